package main

import "testing"

// The LoadTable answer tells readers to address the bucket as strata does:
// cold.s3.addressing's default ("") is path addressing, as the S3 backend
// reads it.
func TestReaderFileIOAddressesTheBucketAsStrataDoes(t *testing.T) {
	for _, tc := range []struct {
		addressing, path, virtual string
	}{{"", "true", "false"}, {"path", "true", "false"}, {"auto", "true", "false"}, {"virtual", "false", "true"}} {
		sets := []string{"cold.backend=s3", "cold.s3.endpoint=127.0.0.1:9000", "cold.s3.bucket=b", "iceberg.enabled=true"}
		if tc.addressing != "" {
			sets = append(sets, "cold.s3.addressing="+tc.addressing)
		}
		cfg, err := LoadConfig("", sets)
		if err != nil {
			t.Fatal(err)
		}
		io := readerFileIO(cfg)
		if io["s3.path-style-access"] != tc.path || io["s3.force-virtual-addressing"] != tc.virtual || io["s3.endpoint"] == "" {
			t.Errorf("cold.s3.addressing %q: %v; want path-style %s, virtual %s and an endpoint", tc.addressing, io, tc.path, tc.virtual)
		}
	}
}
