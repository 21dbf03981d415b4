package curves

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"strata/bench"
	"strata/catalog/pebblecat"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/internal/testsvc"
	"strata/parquet"
	"strata/tiering"
	"strata/tiering/objstore"
	"strata/tiering/objstore/s3"
)

var historySizes = []int{10, 1_000, 100_000}

const (
	historyRecords = 10  // per segment
	historyValue   = 100 // bytes per record value
	historySamples = 200 // cold point reads per point
)

// BenchmarkCurveHistory: how cold reads, the catalog, the bucket manifest
// and a catalog rebuild move with the history one shard keeps in the cold
// tier, at 10, 1,000 and 100,000 tiered segments (MinIO).
//
// The history is made the way the tiering job leaves it, without the hours
// of producing it: small segments of 10 records of 100 B, each written to
// Parquet with parquet.Writer (the job's footer metadata included) and
// uploaded under its key in the bucket layout, 16 uploads at a time, then
// the shard's manifest listing them all, written once. Then, each timed:
//
//   - rebuild: tiering.Rebuild (what `strata catalog rebuild` runs) into an
//     empty Pebble catalog and engine, beside a plain listing of the same
//     objects (the listing a rebuild cannot avoid);
//   - cold point reads: 200 reads of one record at random offsets through
//     the engine's Read with an empty cold reader each (footer and row
//     group fetched), p50 and p99, beside the 10-segment point;
//   - the catalog's size on disk (its Pebble folder) beside the manifest's,
//     and the manifest's size beside the 10-segment point's scaled up
//     linearly.
func BenchmarkCurveHistory(b *testing.B) {
	ctx := context.Background()
	m := testsvc.StartMinIO(b)
	bucket := m.Bucket(b, "strata-bench")
	base := testsvc.UniquePrefix(b)
	var ref *historyPoint
	for _, n := range points(b, historySizes) {
		prefix := fmt.Sprintf("%s/h%d", base, n)
		sb, err := s3.New(s3.Config{Endpoint: m.Endpoint, Bucket: bucket, Prefix: prefix, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
		if err != nil {
			b.Fatal(err)
		}
		p := measureHistory(b, ctx, sb, n)
		// 100,000 objects per run would pile up in the test MinIO.
		removePrefix(b, m.Client(b), bucket, prefix)
		if ref == nil {
			ref = &p
		}
		x := float64(n)
		for _, q := range []struct {
			pct      float64
			val, ref float64
		}{{50, p.p50, ref.p50}, {99, p.p99, ref.p99}} {
			report(b, bench.Figure{Name: fmt.Sprintf("curve: cold point read p%.0f, %d segments in the shard", q.pct, n), Value: q.val, Unit: "ms",
				Reference: "10 segments, same run", ReferenceValue: q.ref, Runs: historySamples,
				Curve: "history-cold-read", Series: fmt.Sprintf("cold point read p%.0f, empty cache", q.pct), X: x, XUnit: "tiered segments in the shard"})
		}
		report(b, bench.Figure{Name: fmt.Sprintf("curve: catalog size, %d segments", n), Value: p.catalogKiB, Unit: "KiB",
			Reference: "the bucket manifest, same segments", ReferenceValue: p.manifestKiB, Runs: 1,
			Curve: "history-size", Series: "catalog on disk (Pebble; reference: the manifest)", X: x, XUnit: "tiered segments in the shard"})
		report(b, bench.Figure{Name: fmt.Sprintf("curve: bucket manifest size, %d segments", n), Value: p.manifestKiB, Unit: "KiB",
			Reference: "10 segments' manifest x n/10", ReferenceValue: ref.manifestKiB * x / float64(historySizes[0]), Runs: 1,
			Curve: "history-size", Series: "bucket manifest (reference: linear from 10 segments)", X: x, XUnit: "tiered segments in the shard"})
		report(b, bench.Figure{Name: fmt.Sprintf("curve: catalog rebuild from the bucket, %d objects", n), Value: p.rebuild, Unit: "s",
			Reference: "plain listing of the same objects", ReferenceValue: p.list, Runs: 1,
			Curve: "history-rebuild", Series: "catalog rebuild (reference: a plain listing)", X: x, XUnit: "objects in the bucket"})
	}
}

type historyPoint struct {
	p50, p99, catalogKiB, manifestKiB, rebuild, list float64
}

func measureHistory(b *testing.B, ctx context.Context, sb *s3.Bucket, n int) historyPoint {
	shard := store.ShardName("history", 0)
	loc, err := tiering.LocationOf(shard)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	man := tiering.Manifest{Version: 1, Shard: shard, Topic: loc.Topic, Partition: loc.Partition, Objects: make([]tiering.ManifestEntry, n)}
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				entry, err := uploadSegment(ctx, sb, loc, shard, i)
				mu.Lock()
				if err != nil && failed == nil {
					failed = err
				}
				man.Objects[i] = entry
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		if i%20_000 == 0 && i > 0 {
			fmt.Fprintf(os.Stderr, "curves: history of %d: %d objects uploaded (%s)\n", n, i, time.Since(t0).Round(time.Second))
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	raw, err := json.Marshal(man)
	if err != nil {
		b.Fatal(err)
	}
	if err := sb.Upload(ctx, loc.ManifestKey(""), bytes.NewReader(raw)); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "curves: history of %d segments made in %s\n", n, time.Since(t0).Round(time.Millisecond))
	p := historyPoint{manifestKiB: float64(len(raw)) / 1024}

	t0 = time.Now()
	listed := 0
	if err := sb.List(ctx, "", func(objstore.Attrs) error { listed++; return nil }); err != nil {
		b.Fatal(err)
	}
	p.list = time.Since(t0).Seconds()
	if listed != n+1 {
		b.Fatalf("listing found %d objects, want %d and the manifest", listed, n)
	}

	dir := b.TempDir()
	catDir := filepath.Join(dir, "catalog")
	cat, err := pebblecat.Open(catDir)
	if err != nil {
		b.Fatal(err)
	}
	e, err := segment.Open(segment.Config{Dir: filepath.Join(dir, "data"), Logger: quiet, Events: tiering.Listen(cat, sb, "", quiet)})
	if err != nil {
		b.Fatal(err)
	}
	t0 = time.Now()
	sum, err := tiering.Rebuild(ctx, sb, "", cat, e, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	e.SyncEvents()
	p.rebuild = time.Since(t0).Seconds()
	if sum.Segments != n {
		b.Fatalf("rebuild restored %d segments, want %d", sum.Segments, n)
	}

	rng := rand.New(rand.NewPCG(uint64(n), 7))
	last := uint64(n*historyRecords - 1)
	lat := make([]time.Duration, 0, historySamples)
	for i := 0; i < historySamples; i++ {
		cr := tiering.NewColdReader(cat, sb, 0)
		cr.NoReadAhead = true
		e.SetColdSource(cr)
		off := rng.Uint64N(last + 1)
		t0 := time.Now()
		got, err := e.Read(ctx, shard, off, store.Budget{MaxRecords: 1})
		lat = append(lat, time.Since(t0))
		if err != nil || len(got) != 1 || got[0].Offset != off {
			b.Fatalf("cold read of offset %d among %d segments: %d records, %v", off, n, len(got), err)
		}
	}
	p.p50, p.p99 = bench.Ms(bench.Percentile(lat, 50)), bench.Ms(bench.Percentile(lat, 99))
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	if err := cat.Close(); err != nil {
		b.Fatal(err)
	}
	p.catalogKiB = float64(dirBytes(b, catDir)) / 1024
	return p
}

// uploadSegment makes segment i of the history: historyRecords records, as
// the engine would have written them (their encoding gives the segment's
// size and checksum) and as the tiering job converts them (Parquet with its
// footer metadata), uploaded under the segment's key.
func uploadSegment(ctx context.Context, sb *s3.Bucket, loc tiering.Location, shard string, i int) (tiering.ManifestEntry, error) {
	start := uint64(i * historyRecords)
	ts := int64(1_700_000_000_000 + i*historyRecords)
	var seg []byte
	recs := make([]record.Record, historyRecords)
	for j := range recs {
		recs[j] = record.Record{Offset: start + uint64(j), Timestamp: ts + int64(j), Key: []byte("user-" + strconv.Itoa((i+j)%10_000)),
			Value: value(i*historyRecords+j, historyValue)}
		var err error
		if seg, err = record.Append(seg, &recs[j]); err != nil {
			return tiering.ManifestEntry{}, err
		}
	}
	crc := crc32.Checksum(seg, crc32.MakeTable(crc32.Castagnoli))
	var obj bytes.Buffer
	w, err := parquet.NewWriter(&obj, parquet.Options{Metadata: map[string]string{
		tiering.MetaShard: shard, tiering.MetaSegment: strconv.Itoa(i), tiering.MetaSegmentCRC32C: strconv.FormatUint(uint64(crc), 10),
		tiering.MetaSegmentRecords: strconv.Itoa(historyRecords)}})
	if err != nil {
		return tiering.ManifestEntry{}, err
	}
	for j := range recs {
		if err := w.Write(&recs[j]); err != nil {
			return tiering.ManifestEntry{}, err
		}
	}
	if _, err := w.Close(); err != nil {
		return tiering.ManifestEntry{}, err
	}
	end := start + historyRecords - 1
	key := loc.ObjectKey("", start, end)
	size := int64(obj.Len())
	// A reader with its size: minio-go buffers an unsized body as a
	// multipart upload, which made each small PUT many times slower.
	if err := sb.Upload(ctx, key, bytes.NewReader(obj.Bytes())); err != nil {
		return tiering.ManifestEntry{}, err
	}
	return tiering.ManifestEntry{Key: key, Segment: uint64(i), StartOffset: start, EndOffset: end, MinTimestamp: ts,
		MaxTimestamp: ts + historyRecords - 1, Records: historyRecords, SegmentBytes: int64(len(seg)), SegmentChecksum: crc,
		ObjectBytes: size}, nil
}

// dirBytes is the size of the files under dir.
func dirBytes(b *testing.B, dir string) int64 {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			total += info.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}

// removePrefix deletes every object under prefix, 1,000 to a request.
func removePrefix(b *testing.B, c *minio.Client, bucket, prefix string) {
	ctx := context.Background()
	objs := c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix + "/", Recursive: true})
	for err := range c.RemoveObjects(ctx, bucket, objs, minio.RemoveObjectsOptions{}) {
		b.Fatalf("removing the history under %s: %v", prefix, err.Err)
	}
}
