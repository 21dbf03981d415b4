package curves

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"strata/bench"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/parquet"
)

var recordSizes = []int{100, 1 << 10, 16 << 10, 1 << 20}

// BenchmarkCurveRecordSize: how append and conversion rates move with
// record size. At each size (100 B, 1 KiB, 16 KiB, 1 MiB):
//
//   - engine append, 16 shards, 16 KiB producer batches (one record per
//     batch from 16 KiB up), 96 MiB, beside the disk's own rate for the same
//     bytes in the engine's chunks (bench.DiskLimit, as BenchmarkEngineAppend);
//   - Parquet conversion of one 64 MiB segment of those records on one
//     core, the tiering job's path (segment.ScanFile into parquet.Writer,
//     zstd), beside zstd alone over the same segment bytes on one core.
//
// Median of 3 runs each.
func BenchmarkCurveRecordSize(b *testing.B) {
	const runs = 3
	for _, size := range points(b, recordSizes) {
		var mbs, limits []float64
		var ref string
		for run := 0; run < runs; run++ {
			var r appendResult
			pprof.Do(context.Background(), pprof.Labels("size", sizeName(size)), func(context.Context) { r = appendRun(b, size, 16) })
			mbs, limits = append(mbs, r.mbs), append(limits, r.limit)
			ref = fmt.Sprintf("disk, %d files, %d KiB/fsync", r.files, r.chunk>>10)
		}
		report(b, bench.Figure{Name: fmt.Sprintf("curve: engine append %s records x 16 shards", sizeName(size)), Value: bench.Median(mbs), Unit: "MB/s",
			Reference: ref, ReferenceValue: bench.Median(limits), Runs: runs,
			Curve: "record-size", Series: "engine append, 16 shards (reference: the disk)", X: float64(size), XUnit: "record bytes"})

		var conv, zs []float64
		// Labelled, so a profile of the whole curve can be cut to one size
		// (go tool pprof -tagfocus size=1MiB).
		pprof.Do(context.Background(), pprof.Labels("size", sizeName(size)), func(context.Context) {
			conv, zs = convertRuns(b, size, runs)
		})
		report(b, bench.Figure{Name: fmt.Sprintf("curve: convert %s records to Parquet (zstd), one core", sizeName(size)), Value: bench.Median(conv), Unit: "MB/s",
			Reference: "zstd of the same bytes, one core", ReferenceValue: bench.Median(zs), Runs: runs,
			Curve: "record-size", Series: "Parquet conversion, one core (reference: zstd alone)", X: float64(size), XUnit: "record bytes"})
	}
}

type appendResult struct {
	mbs, limit float64
	files      int
	chunk      int64
}

// appendRun appends 96 MiB of size-byte records to shards shards from 32
// producers in 16 KiB batches, then measures the disk's limit for what the
// engine wrote (the same bytes, its mean bytes per fsync, one file per
// shard up to the engine's 16 writers).
func appendRun(b *testing.B, size, shards int) appendResult {
	const total = 96 << 20
	dir := b.TempDir()
	e, err := segment.Open(segment.Config{Dir: dir, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for s := 0; s < shards; s++ {
		if err := e.CreateShard(ctx, fmt.Sprintf("a-%d", s)); err != nil {
			b.Fatal(err)
		}
	}
	perReq := max(1, (16<<10)/size)
	reqs := total / (perReq * size)
	next := make(chan int, reqs)
	for i := 0; i < reqs; i++ {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	start := time.Now()
	for p := 0; p < 32; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			recs := make([]record.Record, perReq)
			for i := range next {
				for j := range recs {
					recs[j] = record.Record{Timestamp: int64(i), Value: value(i*perReq+j, size)}
				}
				if _, err := e.Append(ctx, fmt.Sprintf("a-%d", (p+i)%shards), recs); err != nil {
					b.Error(err)
					return
				}
			}
		}(p)
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := e.Stats()
	written := int64(st.Bytes.Load())
	r := appendResult{mbs: float64(written) / 1e6 / elapsed.Seconds(),
		chunk: written / int64(max(1, st.Fsyncs.Load())), files: min(shards, 16)}
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	if r.limit, err = bench.DiskLimit(dir, written, r.chunk, r.files); err != nil {
		b.Fatal(err)
	}
	os.RemoveAll(dir)
	return r
}

// convertRuns writes one 64 MiB segment of size-byte records and converts
// it to Parquet runs times on one core, each time followed by zstd alone
// over the segment file's bytes; both in segment MB/s.
func convertRuns(b *testing.B, size, runs int) (conv, zs []float64) {
	const total = 64 << 20
	dir := b.TempDir()
	e, err := segment.Open(segment.Config{Dir: dir, Workers: 1, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := e.CreateShard(ctx, "conv"); err != nil {
		b.Fatal(err)
	}
	perReq := max(1, (1<<20)/size)
	recs := make([]record.Record, perReq)
	for i := 0; i < total/size; i += perReq {
		for j := range recs {
			recs[j] = record.Record{Timestamp: 1_700_000_000_000 + int64(i+j), Key: []byte(fmt.Sprintf("user-%d", (i+j)%10_000)),
				Value: value(i+j, size), Headers: []record.Header{{Key: "source", Value: []byte("bench")}}}
		}
		if _, err := e.Append(ctx, "conv", recs); err != nil {
			b.Fatal(err)
		}
	}
	path := e.SegmentPath("conv", 0)
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	for run := 0; run < runs; run++ {
		t0 := time.Now()
		w, err := parquet.NewWriter(io.Discard, parquet.Options{})
		if err != nil {
			b.Fatal(err)
		}
		_, n, err := segment.ScanFile(path, func(r *record.Record) error { return w.Write(r) })
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Close(); err != nil {
			b.Fatal(err)
		}
		conv = append(conv, float64(n)/1e6/time.Since(t0).Seconds())

		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		zw, _ := zstd.NewWriter(io.Discard, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
		t0 = time.Now()
		if _, err := io.Copy(zw, f); err != nil {
			b.Fatal(err)
		}
		zw.Close()
		zs = append(zs, float64(n)/1e6/time.Since(t0).Seconds())
		f.Close()
	}
	return conv, zs
}
