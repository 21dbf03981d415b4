package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"strata/engine/record"
	"strata/engine/store"
)

// A single-record read from an in-memory point reads the span to the next
// point with pread (not touching the mapping until its page tables are
// filled in), finds every record (the
// first and last of a span, one bigger than a span, the last of the
// segment), goes on past the span when the budget asks for more, and
// checks what it reads as the mapping's walk does: a damaged offset field
// or a record failing its CRC is an error naming the file and the byte.
// Closing the engine gives the file back.
func TestPointReadReadsTheSpanNotTheMapping(t *testing.T) {
	for _, tc := range []struct {
		name string
		// damage changes the file's bytes of the record at byte at (nil:
		// none).
		damage func(data []byte, at int64)
		// fails: whether a read of off fails, the damaged record's offset
		// bad and its span's end spanEnd: a damaged offset field fails every
		// walk over it, from the record before it (whose read looks at the
		// next one) to the span's end; a bad CRC only the read of its
		// record.
		fails func(off, bad, spanEnd uint64) bool
	}{
		{"intact", nil, nil},
		{"offset field", func(data []byte, at int64) {
			binary.BigEndian.PutUint64(data[at:], binary.BigEndian.Uint64(data[at:])+2)
		}, func(off, bad, spanEnd uint64) bool { return off+1 >= bad && off < spanEnd }},
		{"value byte", func(data []byte, at int64) { data[at+record.HeaderSize+20] ^= 0xff },
			func(off, bad, spanEnd uint64) bool { return off == bad }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open0 := preadFiles.Load()
			e := open(t, testConfig(t.TempDir()))
			closed := false
			defer func() {
				if !closed {
					e.Close()
				}
			}()
			if err := e.CreateShard(ctx, "w-0"); err != nil {
				t.Fatal(err)
			}
			// Records of 100 to 1,100 bytes and one of 9,000 (bigger than a
			// span) in the middle.
			var want []record.Record
			for i := 0; i < 400; i++ {
				v := bytes.Repeat([]byte{byte(i)}, 100+(i*37)%1000)
				if i == 200 {
					v = bytes.Repeat([]byte{'b'}, 9000)
				}
				want = append(want, record.Record{Timestamp: int64(i), Key: []byte(fmt.Sprint(i)), Value: v})
			}
			for i := 0; i < len(want); i += 10 {
				if _, err := e.Append(ctx, "w-0", want[i:i+10]); err != nil {
					t.Fatal(err)
				}
			}
			s := e.shards["w-0"].active()
			pts := *s.points.pub.Load()
			if len(pts) < 20 {
				t.Fatalf("%d in-memory points, want one per %d bytes", len(pts), memPointBytes)
			}
			starts := recordStarts(t, s.path)
			// The damaged record: the third of the tenth span.
			bad := int64(-1)
			badOff := uint64(pts[10].rel) + 2
			if tc.damage != nil {
				bad = starts[badOff]
				data, err := os.ReadFile(s.path)
				if err != nil {
					t.Fatal(err)
				}
				tc.damage(data, bad)
				f, err := os.OpenFile(s.path, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt(data[bad:bad+record.HeaderSize+64], bad); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			for off := uint64(0); off < uint64(len(want)); off++ {
				if off == 1 {
					// The first read opened the file for pread and mapped
					// it. Until a mapping's page tables are filled in
					// (populateLater; at once for one this small), lookups
					// pread: drop this one to see them do.
					s.mu.Lock()
					s.dropMapLocked()
					s.mu.Unlock()
				}
				got, err := e.Read(ctx, "w-0", off, store.Budget{MaxRecords: 1})
				if bad >= 0 && tc.fails(off, badOff, uint64(pts[11].rel)) {
					wantErr := fmt.Sprintf("segment %s at byte %d", s.path, bad)
					if !errors.Is(err, record.ErrCorrupt) || !strings.Contains(err.Error(), wantErr) {
						t.Fatalf("read of offset %d, the damaged record %d: %d records, %v; want an error naming %q", off, badOff, len(got), err, wantErr)
					}
					continue
				}
				if err != nil || len(got) != 1 || got[0].Offset != off || !bytes.Equal(got[0].Value, want[off].Value) || !bytes.Equal(got[0].Key, want[off].Key) {
					t.Fatalf("read of offset %d: %d records, %v", off, len(got), err)
				}
			}
			s.mu.RLock()
			mapped, pf := s.mm != nil, s.pf != nil
			s.mu.RUnlock()
			// (A damaged span is walked again in the mapping, whose walk
			// reports the damage as every read does.)
			if (bad < 0 && mapped) || !pf {
				t.Fatalf("after single-record reads: mapped %v, file open for pread %v; want the file read, not mapped", mapped, pf)
			}
			// A read of more than a span goes on in the mapping.
			if bad < 0 {
				got, err := e.Read(ctx, "w-0", 5, store.Budget{MaxBytes: 64 << 10})
				if err != nil || len(got) < 20 {
					t.Fatalf("read of 64 KiB from offset 5: %d records, %v", len(got), err)
				}
				for i, r := range got {
					if r.Offset != 5+uint64(i) || !bytes.Equal(r.Value, want[r.Offset].Value) {
						t.Fatalf("read of 64 KiB from offset 5: record %d has offset %d or other bytes", i, r.Offset)
					}
				}
			}
			if n := preadFiles.Load() - open0; n != 1 {
				t.Fatalf("%d files open for pread, want 1", n)
			}
			closed = true
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if n := preadFiles.Load() - open0; n != 0 {
				t.Fatalf("%d files open for pread after Close", n)
			}
		})
	}
}

// A read that takes a span's last record from the span's pread and goes
// on into the mapping, where the next record is damaged, fails naming it:
// it does not start the segment again and return the span's records twice.
func TestPointReadPastItsSpanMeetsDamage(t *testing.T) {
	e := open(t, testConfig(t.TempDir()))
	defer e.Close()
	if err := e.CreateShard(ctx, "w-0"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		recs := make([]record.Record, 10)
		for j := range recs {
			recs[j] = record.Record{Value: bytes.Repeat([]byte{byte(i)}, 500)}
		}
		if _, err := e.Append(ctx, "w-0", recs); err != nil {
			t.Fatal(err)
		}
	}
	s := e.shards["w-0"].active()
	pts := *s.points.pub.Load()
	if len(pts) < 5 {
		t.Fatalf("%d in-memory points", len(pts))
	}
	first := uint64(pts[3].rel) // the damaged record: the first of a span
	at := recordStarts(t, s.path)[first]
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at+record.HeaderSize+100); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[0] ^ 0xff}, at+record.HeaderSize+100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := e.Read(ctx, "w-0", 0, store.Budget{MaxRecords: 1}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.dropMapLocked() // the lookups below pread their span (see above)
	s.mu.Unlock()
	got, err := e.Read(ctx, "w-0", first-1, store.Budget{MaxRecords: 2})
	wantErr := fmt.Sprintf("segment %s at byte %d", s.path, at)
	if !errors.Is(err, record.ErrCorrupt) || !strings.Contains(err.Error(), wantErr) {
		var offs []uint64
		for _, r := range got {
			offs = append(offs, r.Offset)
		}
		t.Fatalf("read of 2 records from %d, before the damaged %d: offsets %v, %v; want an error naming %q", first-1, first, offs, err, wantErr)
	}
}
