package icetable

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"strata/engine/store"
)

// readOffsets reads the offsets of each partition that snapshot s of tbl
// holds and checks them against its summary: every offset of the
// partition's committed range once, in order, and no other: no duplicate,
// no gap, no file missing. It returns what it read, by partition.
func readOffsets(ctx context.Context, tbl *table.Table, s *table.Snapshot) (map[int32]int, error) {
	committed, err := Committed(s.Summary.Properties)
	if err != nil {
		return nil, err
	}
	read := map[int32]int{}
	for p, r := range committed {
		sc := tbl.Scan(table.WithSnapshotID(s.SnapshotID), table.WithSelectedFields(ColOffset),
			table.WithRowFilter(iceberg.EqualTo(iceberg.Reference(ColPartition), p)))
		at, err := sc.ToArrowTable(ctx)
		if err != nil {
			return nil, fmt.Errorf("snapshot %d, partition %d: %w", s.SnapshotID, p, err)
		}
		var offsets []int64
		tr := array.NewTableReader(at, 1024)
		for tr.Next() {
			col := tr.RecordBatch().Column(0).(*array.Int64)
			for i := 0; i < col.Len(); i++ {
				offsets = append(offsets, col.Value(i))
			}
		}
		tr.Release()
		at.Release()
		slices.Sort(offsets) // a scan hands files in the plan's order
		want := 0
		if !r.Empty() {
			want = int(r.Last - r.First + 1)
		}
		if len(offsets) != want {
			return nil, fmt.Errorf("snapshot %d, partition %d: %d rows, its summary says offsets %d-%d", s.SnapshotID, p, len(offsets), r.First, r.Last)
		}
		for i, o := range offsets {
			if uint64(o) != r.First+uint64(i) {
				return nil, fmt.Errorf("snapshot %d, partition %d: row %d is offset %d, want %d (a duplicate or a gap)", s.SnapshotID, p, i, o, r.First+uint64(i))
			}
		}
		read[p] = len(offsets)
	}
	return read, nil
}

// The table read while tiering, DeleteRecords and retention run, and its
// snapshots expire: every read of the current snapshot holds each
// committed offset once and nothing else, with every file there; and a
// snapshot a reader loaded earlier reads whole as long as the table
// keeps it, commits and retention since notwithstanding (its objects stay
// till it expires, at least the file delete delay after a removal).
func TestReadsWhileTieringAndRetentionRun(t *testing.T) {
	ctx := context.Background()
	raw, dir := localBucket(t)
	r := newRig(t, raw, dir)
	r.job.OrphanGrace = time.Nanosecond
	r.tables.MinSnapshots, r.tables.MaxSnapshotAge, r.tables.MaintainEvery = 3, time.Nanosecond, -1
	// Longer than a read; shorter than the runs, so removed files go
	// while the reads go on. The policy keeps 3 snapshots, fewer than
	// the runs make in the delay: the delay keeps what a removal took.
	r.tables.FileDeleteDelay = 2 * time.Second
	reader := &Tables{Bucket: raw, Prefix: "data", Location: dir, Log: quiet}
	shards := []string{store.ShardName("orders", 0), store.ShardName("orders", 1)}
	produce(t, r.engine, shards[0], 14, 0)
	produce(t, r.engine, shards[1], 14, 100)
	r.run(t, map[string]uint64{})

	var (
		mu                 sync.Mutex
		errs               []error
		reads, stale, slow int
	)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var held *table.Table // the table as loaded one read before
		for {
			select {
			case <-done:
				return
			default:
			}
			loaded := time.Now()
			tbl, _, err := reader.load(ctx, "orders")
			if err == nil {
				_, err = readOffsets(ctx, tbl, tbl.CurrentSnapshot())
			}
			if err != nil && time.Since(loaded) > r.tables.FileDeleteDelay {
				// A read slower than the delay (a loaded machine) may find
				// a removed file gone, as a Kafka fetch slower than
				// file.delete.delay.ms may: the delay is the promise.
				mu.Lock()
				slow++
				mu.Unlock()
				held = nil
				continue
			}
			var staleErr error
			wasKept := false
			if held != nil && err == nil {
				// Still kept: it must read whole.
				id := held.CurrentSnapshot().SnapshotID
				if tbl.Metadata().SnapshotByID(id) != nil {
					wasKept = true
					_, staleErr = readOffsets(ctx, held, held.CurrentSnapshot())
				}
				if staleErr != nil {
					// An expiry between the check and the read let it go
					// (and its files with it): no longer the table's.
					if now, _, err := reader.load(ctx, "orders"); err == nil && now.Metadata().SnapshotByID(id) == nil {
						staleErr, wasKept = nil, false
					}
				}
			}
			mu.Lock()
			if err != nil {
				errs = append(errs, fmt.Errorf("the current snapshot: %w", err))
			} else {
				reads++
			}
			if staleErr != nil {
				errs = append(errs, fmt.Errorf("a kept snapshot loaded a read earlier: %w", staleErr))
			} else if wasKept {
				stale++
			}
			mu.Unlock()
			held = tbl
		}
	}()
	for round := 1; round <= 12; round++ {
		for i, shard := range shards {
			produce(t, r.engine, shard, 14, 1000*round+100*i)
		}
		switch round % 4 {
		case 1: // DeleteRecords inside what is tiered of partition 0
			_, high, err := r.engine.Watermarks(ctx, shards[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := r.engine.DeleteBefore(ctx, shards[0], high/2); err != nil {
				t.Fatal(err)
			}
		case 3: // retention by bytes
			r.job.Policy.RetentionMaxBytes = 32 << 10
		}
		r.run(t, map[string]uint64{})
		r.job.Policy.RetentionMaxBytes = 0
	}
	time.Sleep(200 * time.Millisecond) // a last read of the final table
	close(done)
	<-stopped
	for _, err := range errs {
		t.Error(err)
	}
	if reads < 12 || stale < 6 {
		t.Fatalf("%d reads of the current snapshot and %d of a kept earlier one while the runs went; the test wants many of each", reads, stale)
	}
	t.Logf("%d reads of the current snapshot, %d of an earlier one still kept, %d slower than the delay", reads, stale, slow)
}
