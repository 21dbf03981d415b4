package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble"

	"strata/engine/record"
	"strata/engine/store"
)

// replicaRecords are n records from offset at, key key, a time bucket each.
func replicaRecords(n int, at uint64, key string, ts0 int64) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = record.Record{Offset: at + uint64(i), Timestamp: ts0 + int64(i)*1000, Key: []byte(key),
			Value: []byte(fmt.Sprintf("%s %d %s", key, i, strings.Repeat("v", 100))), Tags: []string{"t-" + key}}
	}
	return out
}

func truncateConfig(dir string) Config {
	cfg := testConfig(dir)
	cfg.Workers, cfg.IndexInterval = 1, 3
	return cfg
}

// truncateChildRecords are the 50 records the child writes before it
// truncates to 30.
func truncateChildRecords() []record.Record {
	var out []record.Record
	for b := 0; b < 5; b++ {
		out = append(out, replicaRecords(10, uint64(b*10), "old", int64(b*10_000))...)
	}
	return out
}

// truncateChild builds a shard, truncates it and, at step "truncated"
// right after TruncateTo returns or at "appended" after appending past the
// cut, dies by SIGKILL: no Close, nothing flushed that was not already.
func truncateChild(dir, step string) {
	e, err := Open(truncateConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	must := func(err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	must(e.CreateShard(ctx, "tr-0"))
	must(e.SetHighWatermark(ctx, "tr-0", 0))
	must(e.AppendAt(ctx, "tr-0", truncateChildRecords()))
	must(e.SetHighWatermark(ctx, "tr-0", 20))
	must(e.TruncateTo(ctx, "tr-0", 30))
	if step == "appended" {
		must(e.AppendAt(ctx, "tr-0", replicaRecords(5, 30, "new", 100_000)))
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

// A crash right after TruncateTo (or after the appends that follow it)
// recovers the truncated log, its high watermark and indexes that name no
// record cut.
func TestTruncateSurvivesCrash(t *testing.T) {
	for _, step := range []string{"truncated", "appended"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			runKilled(t, "STRATA_TRUNCATE_DIR="+dir, "STRATA_TRUNCATE_STEP="+step)
			e := open(t, truncateConfig(dir))
			defer e.Close()
			want := truncateChildRecords()[:30]
			end := uint64(30)
			if step == "appended" {
				want = append(want, replicaRecords(5, 30, "new", 100_000)...)
				end = 35
			}
			if le, _ := e.LogEnd(ctx, "tr-0"); le != end {
				t.Fatalf("log end %d after the crash, want %d", le, end)
			}
			if _, hw, _ := e.Watermarks(ctx, "tr-0"); hw != 20 {
				t.Fatalf("high watermark %d after the crash, want 20", hw)
			}
			got, err := e.ReadToLogEnd(ctx, "tr-0", 0, store.Budget{})
			if err != nil || len(got) != len(want) {
				t.Fatalf("after the crash: %d records, %v; want %d", len(got), err, len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("after the crash, record %d:\n got %+v\nwant %+v", i, got[i], want[i])
				}
			}
			if err := e.SetHighWatermark(ctx, "tr-0", end); err != nil {
				t.Fatal(err)
			}
			old, _ := e.ReadByKey(ctx, "tr-0", []byte("old"), 25, store.Budget{})
			if len(old) != 5 || old[4].Offset != 29 {
				t.Fatalf("ReadByKey(old) from 25 after the crash: %d records", len(old))
			}
			// A cut record's time entry (34000 at offset 34) would start the
			// search past offset 30.
			if off, _ := e.OffsetForTime(ctx, "tr-0", 35_000); off != 30 {
				t.Fatalf("OffsetForTime(35000) = %d; want 30", off)
			}
			// Appends go on at the log end, across a roll.
			if err := e.AppendAt(ctx, "tr-0", replicaRecords(3, end, "more", 200_000)); err != nil {
				t.Fatal(err)
			}
			if err := e.RollAt(ctx, "tr-0", end+3); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The cut must fall in the active segment; a cut in a sealed one is
// refused with a message naming it.
func TestTruncateInSealedSegmentIsRefused(t *testing.T) {
	e := open(t, testConfig(t.TempDir()))
	defer e.Close()
	if err := e.CreateShard(ctx, "s-0"); err != nil {
		t.Fatal(err)
	}
	if err := e.SetHighWatermark(ctx, "s-0", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.AppendAt(ctx, "s-0", replicaRecords(10, 0, "a", 0)); err != nil {
		t.Fatal(err)
	}
	if err := e.RollAt(ctx, "s-0", 10); err != nil {
		t.Fatal(err)
	}
	if err := e.AppendAt(ctx, "s-0", replicaRecords(10, 10, "a", 10_000)); err != nil {
		t.Fatal(err)
	}
	err := e.TruncateTo(ctx, "s-0", 5)
	if err == nil || !strings.Contains(err.Error(), "sealed segment 0") || !strings.Contains(err.Error(), "s-0") {
		t.Fatalf("TruncateTo into a sealed segment: %v", err)
	}
	if err := e.TruncateTo(ctx, "s-0", 10); err != nil { // the active segment's start: empties it
		t.Fatal(err)
	}
	if err := e.AppendAt(ctx, "s-0", replicaRecords(2, 10, "b", 50_000)); err != nil {
		t.Fatal(err)
	}
	if err := e.SetHighWatermark(ctx, "s-0", 12); err != nil {
		t.Fatal(err)
	}
	got, err := e.Read(ctx, "s-0", 8, store.Budget{})
	if err != nil || len(got) != 4 || string(got[2].Key) != "b" {
		t.Fatalf("read across the roll after emptying the active segment: %d records, %v", len(got), err)
	}
}

// Readers running while the active file shrinks must neither fault on the
// cut pages nor show a record at or past the high watermark, nor a cut one.
func TestReadersDuringTruncation(t *testing.T) {
	e := open(t, testConfig(t.TempDir()))
	defer e.Close()
	if err := e.CreateShard(ctx, "r-0"); err != nil {
		t.Fatal(err)
	}
	if err := e.SetHighWatermark(ctx, "r-0", 0); err != nil {
		t.Fatal(err)
	}
	big := func(n int, at uint64, round int) []record.Record {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{Offset: at + uint64(i), Value: bytes.Repeat([]byte{byte(round)}, 3000)}
		}
		return recs
	}
	if err := e.AppendAt(ctx, "r-0", big(10, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := e.SetHighWatermark(ctx, "r-0", 10); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for !stop.Load() {
				if g == 0 {
					recs, err := e.Read(ctx, "r-0", 5, store.Budget{})
					_, hw, _ := e.Watermarks(ctx, "r-0")
					for _, r := range recs {
						if r.Offset >= hw || r.Value[0] != 0 {
							t.Errorf("Read showed offset %d of round %d, high watermark %d", r.Offset, r.Value[0], hw)
							return
						}
					}
					if err != nil {
						t.Errorf("Read: %v", err)
						return
					}
					continue
				}
				// Past the high watermark a read may race the cut: an error
				// is allowed, a fault or a damaged record is not. One reader
				// reads single records (a pread of the span between two
				// in-memory points, read.go), the other runs of them.
				from, budget := uint64(8), store.Budget{}
				if g == 2 {
					from, budget = uint64(8+rand.IntN(10)), store.Budget{MaxRecords: 1}
				}
				recs, _ := e.ReadToLogEnd(ctx, "r-0", from, budget)
				for _, r := range recs {
					if len(r.Value) != 3000 {
						t.Errorf("ReadToLogEnd: offset %d has %d bytes", r.Offset, len(r.Value))
						return
					}
				}
			}
		}(g)
	}
	for round := 1; round <= 200; round++ {
		if err := e.AppendAt(ctx, "r-0", big(5+round%7, 10, round)); err != nil {
			t.Fatal(err)
		}
		if err := e.TruncateTo(ctx, "r-0", 10); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
}

// A damaged high watermark file shows nothing above the low watermark
// until the next SetHighWatermark; a missing one leaves the shard
// following its log end.
func TestDamagedHighWatermarkFile(t *testing.T) {
	cfg := testConfig(t.TempDir())
	e := open(t, cfg)
	for _, shard := range []string{"d-0", "u-0"} {
		if err := e.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Append(ctx, shard, replicaRecords(4, 0, "k", 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetHighWatermark(ctx, "d-0", 3); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteBefore(ctx, "d-0", 1); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if err := os.WriteFile(filepath.Join(cfg.Dir, "d-0", highWatermarkFile), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	e = open(t, cfg)
	defer e.Close()
	if low, hw, _ := e.Watermarks(ctx, "d-0"); low != 1 || hw != 1 {
		t.Fatalf("with a damaged high watermark file: watermarks %d, %d; want 1, 1", low, hw)
	}
	if err := e.SetHighWatermark(ctx, "d-0", 4); err != nil {
		t.Fatal(err)
	}
	if _, hw, _ := e.Watermarks(ctx, "u-0"); hw != 4 {
		t.Fatalf("an unmanaged shard's high watermark is %d after reopen, want its log end 4", hw)
	}
	if err := e.TruncateTo(ctx, "d-0", 2); !errors.Is(err, store.ErrCommitted) {
		t.Fatalf("TruncateTo below the high watermark: %v", err)
	}
}

// A replicated copy whose log ends below its saved high watermark lost
// records that were acknowledged, whatever its synced mark says (here the
// mark is gone, as a mark not yet on disk at a kill would be): it is
// marked damaged from its end on, so replication refills it and the
// controller does not elect it.
func TestLogEndBelowTheSavedHighWatermarkIsDamage(t *testing.T) {
	cfg := testConfig(t.TempDir())
	e := open(t, cfg)
	if err := e.CreateShard(ctx, "m-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, "m-0", replicaRecords(10, 0, "k", 0)); err != nil {
		t.Fatal(err)
	}
	if err := e.SetHighWatermark(ctx, "m-0", 10); err != nil {
		t.Fatal(err)
	}
	e.Close()
	db, err := pebble.Open(filepath.Join(cfg.Dir, "index"), &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(syncedKey("m-0"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := os.Remove(filepath.Join(cfg.Dir, "m-0", syncedFile)); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(cfg.Dir, "m-0", "0.msg")
	st, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, st.Size()-10); err != nil { // the last record cut short
		t.Fatal(err)
	}
	e = open(t, cfg)
	defer e.Close()
	d := e.Damage("m-0")
	if d == nil || d.From != 9 {
		t.Fatalf("a copy that ends at 9 below its saved high watermark 10: damage %v; want damage from offset 9", d)
	}
}
