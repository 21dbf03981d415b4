package sharedfile

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"strata/bench"
	"strata/engine/record"
)

// The file layer alone, the shared-file model beside the partition model's
// cost: N shards each append one small record per batch; the shared model
// writes one chunk per shard into one file with one write and one fsync,
// the partition model writes each shard's record to its own file and
// fsyncs every file (what engine/segment's worker does for the shards a
// batch touched). Same records, same batches, same disk, same run; median
// of 3. Records per second, and the ratio shared / partition.
func BenchmarkSharedFileAppend(b *testing.B) {
	const runs, value = 3, 100
	for _, shards := range []int{16, 256, 1024} {
		// About 2,000 fsyncs for the partition model per run, whatever N.
		batches := max(3, 2000/shards)
		var shared, partition []float64
		for run := 0; run < runs; run++ {
			shared = append(shared, sharedRun(b, shards, batches, value))
			partition = append(partition, partitionRun(b, shards, batches, value))
		}
		bench.Must(b, "go test -run '^$' -bench SharedFileAppend ./engine/sharedfile", bench.Figure{
			Name:  fmt.Sprintf("shared file append, %d shards x 1 rec of %d B per batch", shards, value),
			Value: bench.Median(shared), Unit: "rec/s", Reference: "partition model: file + fsync per shard",
			ReferenceValue: bench.Median(partition), Target: ">= 1.00", Runs: runs})
	}
}

func benchRecord(shard, batch, value int) record.Record {
	return record.Record{Offset: uint64(batch), Timestamp: int64(batch), Key: []byte(fmt.Sprintf("k%d", shard)), Value: make([]byte, value)}
}

func sharedRun(b *testing.B, shards, batches, value int) float64 {
	dir := b.TempDir()
	d, _, err := Open(Config{Dir: dir, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	w := d.NewWriter()
	recs := make([]record.Record, 1)
	var dst []Chunk
	start := time.Now()
	for batch := 0; batch < batches; batch++ {
		for s := 0; s < shards; s++ {
			recs[0] = benchRecord(s, batch, value)
			if dst, err = w.Add(dst[:0], uint64(s), recs); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := w.Commit(true); err != nil {
			b.Fatal(err)
		}
	}
	rate := float64(shards*batches) / time.Since(start).Seconds()
	if _, err := w.Seal(); err != nil {
		b.Fatal(err)
	}
	return rate
}

func partitionRun(b *testing.B, shards, batches, value int) float64 {
	dir := b.TempDir()
	files := make([]*os.File, shards)
	sizes := make([]int64, shards)
	for s := range files {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%d.msg", s)))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		files[s] = f
	}
	var buf []byte
	start := time.Now()
	for batch := 0; batch < batches; batch++ {
		for s, f := range files {
			r := benchRecord(s, batch, value)
			var err error
			if buf, err = record.Append(buf[:0], &r); err != nil {
				b.Fatal(err)
			}
			if _, err := f.WriteAt(buf, sizes[s]); err != nil {
				b.Fatal(err)
			}
			sizes[s] += int64(len(buf))
		}
		for _, f := range files {
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	return float64(shards*batches) / time.Since(start).Seconds()
}

// The CPU cost of the shared model's write path without fsync: encoding a
// chunk per shard and one write per batch of 1024 shards. ns/op is per
// record.
func BenchmarkSharedFileAddCommit(b *testing.B) {
	d, _, err := Open(Config{Dir: b.TempDir(), MaxFileBytes: 64 << 20, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	w := d.NewWriter()
	recs := make([]record.Record, 1)
	var dst []Chunk
	b.ReportAllocs()
	b.SetBytes(int64(record.Size(&record.Record{Key: []byte("k0000"), Value: make([]byte, 100)})))
	for i := 0; i < b.N; i++ {
		s := i % 1024
		recs[0] = benchRecord(s, i/1024, 100)
		if dst, err = w.Add(dst[:0], uint64(s), recs); err != nil {
			b.Fatal(err)
		}
		if s == 1023 {
			if _, err := w.Commit(false); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// The recovery scan of an active file of small chunks (one 100-byte record
// each, as many small partitions write them): MB/s of file scanned.
func BenchmarkSharedFileScan(b *testing.B) {
	dir := b.TempDir()
	d, _, err := Open(Config{Dir: dir, MaxFileBytes: 1 << 30, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	w := d.NewWriter()
	recs := make([]record.Record, 1)
	for batch := 0; batch < 200; batch++ {
		for s := 0; s < 1000; s++ {
			recs[0] = benchRecord(s, batch, 100)
			if _, err := w.Add(nil, uint64(s), recs); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := w.Commit(false); err != nil {
			b.Fatal(err)
		}
	}
	path := filepath.Join(dir, FileName(0))
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	b.SetBytes(st.Size())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res := Scan(0, path, f, st.Size())
		if res.Err != nil || len(res.Chunks) != 200_000 {
			b.Fatalf("%d chunks, %v", len(res.Chunks), res.Err)
		}
	}
}
