package tiering

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"strata/catalog"
	"strata/engine/record"
	"strata/parquet"
	"strata/tiering/objstore"
)

// countReads counts a bucket's ranged reads.
type countReads struct {
	objstore.Bucket
	n *atomic.Int64
}

func (c countReads) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	c.n.Add(1)
	return c.Bucket.ReadAt(ctx, name, p, off)
}

// Opening a cold object reads its footer and page index with one ranged
// read of its tail (beside one of its first 4 bytes, at the same time),
// whatever its records' size, with the default row groups; so does
// verifying an upload.
func TestColdOpenIsOneRead(t *testing.T) {
	ctx := context.Background()
	b := backends["local"](t)
	for _, valueBytes := range []int{10, 1000, 16000} {
		t.Run(fmt.Sprint(valueBytes), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(valueBytes)))
			var buf bytes.Buffer
			w, err := parquet.NewWriter(&buf, parquet.Options{Metadata: map[string]string{MetaSegmentCRC32C: "0"}})
			if err != nil {
				t.Fatal(err)
			}
			// Values are slices of one buffer at random places: drawing
			// each byte made this the slowest test of its package.
			text := make([]byte, 64<<10)
			for j := range text {
				text[j] = `{"sku":123,"qty":4}`[rng.IntN(19)] // compresses as JSON does
			}
			segSize, n := int64(0), uint64(0)
			for ; segSize < 48<<20; n++ {
				at := rng.IntN(len(text) - valueBytes)
				v := text[at : at+valueBytes]
				r := record.Record{Offset: n, Timestamp: int64(n), Key: fmt.Appendf(nil, "customer-%06d", rng.IntN(50_000)), Value: v,
					Headers: []record.Header{{Key: "trace-id", Value: fmt.Appendf(nil, "%016x", rng.Uint64())}}}
				if err := w.Write(&r); err != nil {
					t.Fatal(err)
				}
				segSize += int64(record.Size(&r))
			}
			if _, err := w.Close(); err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("footer/%d.parquet", valueBytes)
			if err := b.Upload(ctx, key, bytes.NewReader(buf.Bytes())); err != nil {
				t.Fatal(err)
			}
			s := catalog.Segment{Shard: "footer-0", StartOffset: 0, EndOffset: n - 1, Records: n, Size: segSize,
				ObjectKey: key, ObjectSize: int64(buf.Len())}
			opens := countReads{b, new(atomic.Int64)}
			cold := NewColdReader(nil, opens, 0)
			cf, err := cold.file(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			groups := cf.f.Groups()
			tail := int64(buf.Len()) - groups[len(groups)-1].End
			if got := opens.n.Load(); got != 2 {
				t.Fatalf("open made %d ranged reads, want 2 (the tail, the magic): %d row groups, a tail of %d bytes, %d fetched",
					got, len(groups), tail, cold.FetchedBytes.Load())
			}
			if tail < 64<<10 {
				t.Fatalf("a tail of %d bytes: smaller than any guess, the test proves nothing", tail)
			}
			if g := footerGuess(s.ObjectSize, s.Size); g > 4*tail {
				t.Fatalf("fetched %d bytes for a tail of %d", g, tail)
			}
			reads := countReads{b, new(atomic.Int64)}
			r, err := readEnds(ctx, reads, key, s.ObjectSize, s.Size)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parquet.Open(r, s.ObjectSize); err != nil {
				t.Fatal(err)
			}
			if got := reads.n.Load(); got != 2 {
				t.Fatalf("verify's open made %d ranged reads, want 2", got)
			}
		})
	}
}
