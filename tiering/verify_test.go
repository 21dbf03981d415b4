package tiering

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"strata/catalog"
	"strata/engine/record"
	"strata/parquet"
	"strata/tiering/objstore"
	"strata/tiering/objstore/local"
)

// countingBucket counts ranged reads.
type countingBucket struct {
	objstore.Bucket
	reads atomic.Int64
}

func (c *countingBucket) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	c.reads.Add(1)
	return c.Bucket.ReadAt(ctx, name, p, off)
}

// Verify reads an object's ends in a few ranged reads whatever the size of
// its footer and page index (here larger than the tail fetched first), and
// refuses an object that does not describe the segment.
func TestVerifyReadsTheObjectsEnds(t *testing.T) {
	ctx := context.Background()
	lb, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &countingBucket{Bucket: lb}
	s := catalog.Segment{StartOffset: 1000, EndOffset: 5999, Records: 5000, Checksum: 0xdecafbad}
	var buf bytes.Buffer
	w, err := parquet.NewWriter(&buf, parquet.Options{RowGroupBytes: 4 << 10, PageBytes: 1 << 10, Metadata: map[string]string{
		MetaSegmentCRC32C: strconv.FormatUint(uint64(s.Checksum), 10), MetaSegmentRecords: strconv.FormatUint(s.Records, 10)}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		r := record.Record{Offset: s.StartOffset + uint64(i), Timestamp: int64(i), Key: []byte("k" + strconv.Itoa(i%50)),
			Value: bytes.Repeat([]byte{byte(i)}, 200)}
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if sum.RowGroups < 200 {
		t.Fatalf("%d row groups: the footer would fit the first tail read", sum.RowGroups)
	}
	if err := lb.Upload(ctx, "obj.parquet", bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	j := &Job{Bucket: b, Log: quiet}
	size, err := j.verify(ctx, "obj.parquet", s)
	if err != nil || size != int64(buf.Len()) {
		t.Fatalf("verify: size %d of %d, %v", size, buf.Len(), err)
	}
	// The head, the tail, the rest of the page index.
	if n := b.reads.Load(); n > 3 {
		t.Fatalf("verify made %d ranged reads of a %d-byte object with %d row groups", n, buf.Len(), sum.RowGroups)
	}
	for _, c := range []struct {
		name string
		edit func(*catalog.Segment)
		want string
	}{
		{"records", func(s *catalog.Segment) { s.Records++ }, "rows"},
		{"offsets", func(s *catalog.Segment) { s.EndOffset++ }, "offsets"},
		{"checksum", func(s *catalog.Segment) { s.Checksum++ }, "crc32c"},
	} {
		bad := s
		c.edit(&bad)
		if _, err := j.verify(ctx, "obj.parquet", bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: verify of an object made from another segment: %v", c.name, err)
		}
	}
}
