package segment

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"strata/engine/record"
	"strata/engine/store"
)

// syncGate holds the fsyncs of one shard's segment files while armed, so a
// test can queue requests behind a busy worker and decide what lands in
// one worker batch.
type syncGate struct {
	mu      sync.Mutex
	shard   string // folder name whose .msg fsyncs wait
	held    chan struct{}
	release chan struct{}
}

func (g *syncGate) arm(shard string) (held <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shard, g.held, g.release = shard, make(chan struct{}, 1), make(chan struct{})
	r := g.release
	return g.held, func() { close(r) }
}

func (g *syncGate) inject(op errorfs.Op, path string) error {
	if op != errorfs.OpFileSync || !strings.HasSuffix(path, ".msg") {
		return nil
	}
	g.mu.Lock()
	armed := g.shard != "" && filepath.Base(filepath.Dir(path)) == g.shard
	held, release := g.held, g.release
	if armed {
		g.shard = "" // one fsync only
	}
	g.mu.Unlock()
	if armed {
		held <- struct{}{}
		<-release
	}
	return nil
}

// An append's index entries, and a truncation or deletion of the same shard
// queued right behind it, fall into one worker batch. The truncation and
// the deletion clear the shard's offset entries from what the index holds;
// the append's entries, committed with the batch after them, used to
// survive and name byte positions of records that are gone: a new shard
// of the same name, or the records written again after the truncation,
// were then read from the wrong byte (no record found, or a CRC error).
func TestIndexEntriesOfABatchLandBeforeItsTruncationOrDeletion(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1000)
	recs := func(n int, v []byte) []record.Record {
		out := make([]record.Record, n)
		for i := range out {
			out[i] = record.Record{Value: v}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		// cut queues the truncation or deletion of shard a behind the
		// append of 600 big records; it returns the requests it queued
		// and a wait for its answer.
		cut func(t *testing.T, e *Engine, g *syncGate) (queued int, wait func())
		// from is where the records written after the cut start.
		from uint64
	}{
		{"truncate", func(t *testing.T, e *Engine, g *syncGate) (int, func()) {
			errc := make(chan error, 1)
			go func() { errc <- e.TruncateTo(context.Background(), "a", 1) }()
			return 1, func() {
				if err := <-errc; err != nil {
					t.Fatalf("truncate: %v", err)
				}
			}
		}, 1},
		{"delete and create again", func(t *testing.T, e *Engine, g *syncGate) (int, func()) {
			errc := make(chan error, 1)
			go func() { errc <- e.DeleteShard(context.Background(), "a") }()
			waitQueued(t, e, 2)
			// An append to another shard in the same batch: its fsync
			// holds the batch's index commit until the deletion is done.
			held, release := g.arm("b")
			bdone := make(chan error, 1)
			go func() { _, err := e.Append(context.Background(), "b", recs(1, []byte("b"))); bdone <- err }()
			return 2, func() {
				<-held
				if err := <-errc; err != nil {
					t.Fatalf("delete: %v", err)
				}
				release()
				if err := <-bdone; err != nil {
					t.Fatalf("append to b: %v", err)
				}
				// Starting at 100, its offset-index groups start elsewhere
				// than the old shard's, so old groups are not overwritten.
				if err := e.CreateShardAt(context.Background(), "a", 100); err != nil {
					t.Fatal(err)
				}
			}
		}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &syncGate{}
			cfg := testConfig(t.TempDir())
			cfg.Workers = 1
			cfg.IndexInterval = 1 // a group of points every 64 records
			cfg.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(g.inject))
			e := open(t, cfg)
			defer e.Close()
			ctx := context.Background()
			for _, n := range []string{"a", "b"} {
				if err := e.CreateShard(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			// Hold the worker in an append's fsync while the next batch queues.
			held, release := g.arm("a")
			first := make(chan error, 1)
			go func() { _, err := e.Append(ctx, "a", recs(1, []byte("v"))); first <- err }()
			<-held
			appended := make(chan error, 1)
			go func() { _, err := e.Append(ctx, "a", recs(600, big)); appended <- err }()
			waitQueued(t, e, 1)
			queued, wait := tc.cut(t, e, g)
			waitQueued(t, e, queued+1)
			release()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			wait()
			<-appended // acknowledged or refused by the deletion: either way cut

			// 600 records again where the cut ones were, now of 10 bytes.
			small := []byte("0123456789")
			if _, err := e.Append(ctx, "a", recs(600, small)); err != nil {
				t.Fatal(err)
			}
			for off := tc.from; off < tc.from+600; off++ {
				got, err := e.Read(ctx, "a", off, store.Budget{MaxRecords: 1})
				if err != nil {
					t.Fatalf("read offset %d: %v", off, err)
				}
				if len(got) != 1 || got[0].Offset != off || !bytes.Equal(got[0].Value, small) {
					t.Fatalf("read offset %d: got %d records %v, want the 10-byte record at %d", off, len(got), offsetsOf(got), off)
				}
			}
		})
	}
}

func offsetsOf(recs []record.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i := range recs {
		out[i] = recs[i].Offset
	}
	return out
}
