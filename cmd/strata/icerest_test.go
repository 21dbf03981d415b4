package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/icetable"
)

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

// One table whose metadata cannot be read (a torn file put in its
// folder) hides none of the others: GET /v1/tables lists it with the
// reason, the REST catalog lists every table and loads the sound ones.
func TestOneUnreadableTableHidesNoOther(t *testing.T) {
	s := startServe(t, "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "tiering.enabled=false",
		"tiering.min_sealed_age=0s", "iceberg.catalog=hadoop")
	dir := strings.TrimPrefix(s.sets[0], "data_dir=")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, topic := range []string{"sound", "torn"} {
		for i := range 200 {
			r := &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("%s-%03d %s", topic, i, strings.Repeat("p", 40)))}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var out strings.Builder
	if err := tierCmd([]string{"run", "--admin-addr", s.Admin}, &out); err != nil {
		t.Fatalf("strata tier run: %v\n%s", err, out.String())
	}
	torn := filepath.Join(dir, "cold", "topic=torn", "_iceberg", "metadata", "v9.metadata.json")
	if err := os.WriteFile(torn, []byte(`{"format-version": 2, "tab`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Torn files from v3 up to it: the table read is the highest version,
	// whichever version the run's commits reached.
	for v := 3; v < 9; v++ {
		if err := os.WriteFile(filepath.Join(filepath.Dir(torn), fmt.Sprintf("v%d.metadata.json", v)), []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var views []icetable.TableView
	if err := adminCall(s.Admin, "GET", "/v1/tables", nil, &views); err != nil {
		t.Fatalf("GET /v1/tables: %v", err)
	}
	byTopic := map[string]icetable.TableView{}
	for _, v := range views {
		byTopic[v.Topic] = v
	}
	if v := byTopic["sound"]; v.Error != "" || v.Records == 0 {
		t.Errorf("GET /v1/tables, the sound table: %+v", v)
	}
	if v := byTopic["torn"]; !strings.Contains(v.Error, "v9.metadata.json") {
		t.Errorf("GET /v1/tables, the torn table: %+v; want the reason, naming its file", v)
	}
	var list struct {
		Identifiers []struct{ Name string } `json:"identifiers"`
	}
	if err := adminCall(s.Admin, "GET", "/iceberg/v1/namespaces/strata/tables", nil, &list); err != nil {
		t.Fatalf("the REST catalog's list: %v", err)
	}
	if len(list.Identifiers) != 2 {
		t.Errorf("the REST catalog lists %+v; want both tables", list.Identifiers)
	}
	var loaded map[string]any
	if err := adminCall(s.Admin, "GET", "/iceberg/v1/namespaces/strata/tables/sound", nil, &loaded); err != nil || loaded["metadata-location"] == nil {
		t.Errorf("loading the sound table: %v %v", err, loaded["metadata-location"])
	}
}
