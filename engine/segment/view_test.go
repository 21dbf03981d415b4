package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/store"
	"strata/engine/store/storetest"

	"github.com/cockroachdb/pebble"
)

// A view's records alias the segments' mappings: they must stay readable
// while the segments are deleted by retention, the active one re-mapped as
// it grows and the engine closed, and the mappings must go with the last
// release.
func TestReadViewOutlivesItsSegments(t *testing.T) {
	base := liveMappings.Load()
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	e := open(t, cfg)
	all := fill(t, e, "view-0", 100)
	segs, _ := e.Segments("view-0")
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	// The view spans sealed segments 0 and 1 and more; the second view is
	// the tail of the active segment.
	n := int(segs[2].StartOffset) + 1
	recs, release, err := e.ReadView(ctx, "view-0", 0, store.Budget{MaxRecords: n})
	if err != nil || len(recs) != n {
		t.Fatalf("ReadView: %d records, %v; want %d", len(recs), err, n)
	}
	_, end, _ := e.Watermarks(ctx, "view-0")
	tail, releaseTail, err := e.ReadView(ctx, "view-0", end-1, store.Budget{})
	if err != nil || len(tail) != 1 {
		t.Fatalf("ReadView of the last record: %d records, %v", len(tail), err)
	}
	more := fill(t, e, "view-0", 50) // the active segment grows (or rolls): re-mapped
	storetest.Equal(t, storetest.ReadAll(t, e, "view-0", end), more)

	if err := e.DeleteBefore(ctx, "view-0", segs[3].StartOffset); err != nil {
		t.Fatal(err)
	}
	if d, err := e.ApplyRetention(ctx, RetentionPolicy{}, nil); err != nil || d < 3 {
		t.Fatalf("retention deleted %d segments, %v; want the 3 under the view", d, err)
	}
	if _, err := os.Stat(segmentPath(e.shards["view-0"].dir, segs[0].No)); !os.IsNotExist(err) {
		t.Fatalf("segment 0's file is still there (%v)", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if held := liveMappings.Load() - base; held < 2 {
		t.Fatalf("%d mappings are left after Close with two views held; want at least the views'", held)
	}
	storetest.Equal(t, recs, all[:n])
	storetest.Equal(t, tail, all[len(all)-1:])
	release()
	releaseTail()
	if left := liveMappings.Load() - base; left != 0 {
		t.Fatalf("%d mappings left after the views' release", left)
	}
}

// A sealed segment a consumer scans is checked against its checksum once,
// then read without per-record CRCs; one whose bytes differ from its
// checksum never is, and reads keep naming its bad record.
func TestSealedSegmentChecksumChecked(t *testing.T) {
	for _, corrupt := range []bool{false, true} {
		cfg := testConfig(t.TempDir())
		cfg.MaxSegmentBytes, cfg.RollCheckInterval = 256<<10, 5
		e := open(t, cfg)
		e.CreateShard(ctx, "sum-0")
		recs := make([]record.Record, 100)
		for i := range recs {
			recs[i] = record.Record{Timestamp: int64(i), Value: bytes.Repeat([]byte{byte(i)}, 1000)}
		}
		for e.shards["sum-0"].segments[0].wf != nil {
			if _, err := e.Append(ctx, "sum-0", recs); err != nil {
				t.Fatal(err)
			}
		}
		s := e.shards["sum-0"].segments[0]
		if corrupt {
			f, err := os.OpenFile(s.path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0xee}, s.size/2+500); err != nil { // inside a record's value
				t.Fatal(err)
			}
			f.Close()
		}
		read := func() error {
			for off := uint64(0); off < s.next; {
				got, err := e.Read(ctx, "sum-0", off, store.Budget{MaxBytes: 1 << 20})
				if err != nil {
					return err
				}
				for _, r := range got {
					if !bytes.Equal(r.Value, recs[r.Offset%100].Value) {
						t.Fatalf("corrupt=%v: offset %d read back other bytes", corrupt, r.Offset)
					}
				}
				off = got[len(got)-1].Offset + 1
			}
			return nil
		}
		err := read()
		deadline := time.Now().Add(10 * time.Second)
		for !s.verified.Load() && !s.mismatch.Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		switch {
		case !corrupt && (err != nil || !s.verified.Load()):
			t.Fatalf("intact segment: read %v, verified %v", err, s.verified.Load())
		case corrupt && (s.verified.Load() || !s.mismatch.Load()):
			t.Fatalf("corrupt segment: verified %v, mismatch %v", s.verified.Load(), s.mismatch.Load())
		}
		err2 := read()
		if !corrupt && err2 != nil {
			t.Fatalf("intact segment, once verified: %v", err2)
		}
		if corrupt && (!errors.Is(err, record.ErrCorrupt) || !errors.Is(err2, record.ErrCorrupt)) {
			t.Fatalf("corrupt segment: reads gave %v and %v, want both to name the corrupt record", err, err2)
		}
		e.Close()
	}
}

// ReadView answers what Read answers, at every offset and budget, across
// segment boundaries and into the active segment.
func TestReadViewMatchesRead(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	e := open(t, cfg)
	defer e.Close()
	all := fill(t, e, "match-0", 120)
	for _, b := range []store.Budget{{}, {MaxRecords: 1}, {MaxRecords: 7}, {MaxBytes: 1}, {MaxBytes: 3000}, {MaxRecords: 50, MaxBytes: 5000}} {
		for off := uint64(0); off <= uint64(len(all)); off += 13 {
			want, err := e.Read(ctx, "match-0", off, b)
			if err != nil {
				t.Fatal(err)
			}
			got, release, err := e.ReadView(ctx, "match-0", off, b)
			if err != nil {
				t.Fatalf("ReadView(%d, %+v): %v", off, b, err)
			}
			storetest.Equal(t, got, want)
			release()
		}
	}
	var oor *store.OutOfRangeError
	if _, release, err := e.ReadView(ctx, "match-0", 500, store.Budget{}); !errors.As(err, &oor) {
		t.Fatalf("ReadView past the end: %v, want an out-of-range error", err)
	} else {
		release()
	}
}

// Readers holding views while retention deletes the segments under them
// and appends roll new ones: every record a view returned reads back as
// written until its release, and no mapping outlives the last one.
func TestReadViewsUnderRetention(t *testing.T) {
	base := liveMappings.Load()
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 4096, 5
	e := open(t, cfg)
	e.CreateShard(ctx, "churn-0")
	value := func(off uint64) []byte {
		return []byte(fmt.Sprintf("record %d %s", off, strings.Repeat("v", int(off%97))))
	}
	appendN := func(n int) {
		_, end, _ := e.Watermarks(ctx, "churn-0")
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{Value: value(end + uint64(i))}
		}
		if _, err := e.Append(ctx, "churn-0", recs); err != nil {
			t.Error(err)
		}
	}
	appendN(200)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				low, high, _ := e.Watermarks(ctx, "churn-0")
				if high == low {
					continue
				}
				recs, release, err := e.ReadView(ctx, "churn-0", low+(high-low)/3, store.Budget{MaxBytes: 8 << 10})
				var oor *store.OutOfRangeError
				if errors.As(err, &oor) {
					release()
					continue // retention passed the offset between the two calls
				}
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond) // hold the view while the log moves on
				for _, rec := range recs {
					if !bytes.Equal(rec.Value, value(rec.Offset)) {
						t.Errorf("offset %d read back %q", rec.Offset, rec.Value)
					}
				}
				release()
			}
		}()
	}
	deadline := time.Now().Add(time.Second)
	deleted := 0
	for time.Now().Before(deadline) {
		appendN(50)
		_, end, _ := e.Watermarks(ctx, "churn-0")
		if err := e.DeleteBefore(ctx, "churn-0", end-100); err != nil {
			t.Fatal(err)
		}
		n, err := e.ApplyRetention(ctx, RetentionPolicy{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		deleted += n
	}
	close(stop)
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if deleted < 5 {
		t.Fatalf("retention deleted only %d segments: the test did not churn", deleted)
	}
	if left := liveMappings.Load() - base; left != 0 {
		t.Fatalf("%d mappings left after every view was released and the engine closed", left)
	}
}

// An index point that names the wrong record (a data folder written before
// a truncation's batch committed its appends' entries first could hold
// such points) does not make the records it covers unreadable: the read
// checks the offset there and reads the segment from its start instead.
func TestStaleIndexPointIsReadAround(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.IndexInterval = 10
	e := open(t, cfg)
	if err := e.CreateShard(ctx, "s-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, "s-0", storetest.Records(40, 1)); err != nil {
		t.Fatal(err)
	}
	path := e.SegmentPath("s-0", 0)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pos []int64
	for p := 0; p < len(data); {
		_, size, err := record.Peek(data[p:])
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, int64(p))
		p += size
	}
	// The points of offsets 0, 10, 20 and 30, with 20's naming record 5.
	db, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var g index.OffsetGroup
	for _, off := range []uint64{0, 10, 20, 30} {
		p := pos[off]
		if off == 20 {
			p = pos[5]
		}
		g.Add(off, 0, p)
	}
	if err := db.Set(index.OffsetKey("s-0", g.First()), g.Value(), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()

	e = open(t, cfg)
	defer e.Close()
	recs := readAll(t, e, "s-0", 22)
	if len(recs) != 18 || recs[0].Offset != 22 {
		t.Fatalf("read from 22: %d records from offset %d; want 18 from 22", len(recs), recs[0].Offset)
	}
}
