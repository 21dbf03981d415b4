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

// recordStarts is the byte position of every record of a segment file.
func recordStarts(t *testing.T, path string) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var starts []int64
	sc := NewScanner(path, bytes.NewReader(data), 0, int64(len(data)), nil)
	for sc.Next() {
		_, pos, _ := sc.Record()
		starts = append(starts, pos)
	}
	if sc.Err() != nil {
		t.Fatal(sc.Err())
	}
	return starts
}

// A record's offset field is outside its CRC. In a sealed segment not yet
// checked whole, a damaged offset fails the read with an error naming the
// file and the byte, whatever the new value: one at or past the high
// watermark (which used to end the read early, silently), one below the
// read's start (which used to skip the record) and one inside the range
// (which used to serve the record under another offset).
func TestHotReadChecksOffsets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		offset func(old uint64) uint64
	}{
		{"past the high watermark", func(old uint64) uint64 { return old | 1<<56 }},
		{"below the read's start", func(old uint64) uint64 { return 0 }},
		{"another offset in range", func(old uint64) uint64 { return old + 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.MaxSegmentBytes, cfg.RollCheckInterval = 4096, 10
			e := open(t, cfg)
			want := fill(t, e, "h-0", 100)
			segs, _ := e.Segments("h-0")
			if len(segs) < 2 || segs[0].State != SegmentSealed {
				t.Fatalf("want a sealed first segment, have %+v", segs)
			}
			path := segmentPath(e.shards["h-0"].dir, 0)
			e.Close()
			starts := recordStarts(t, path)
			at := starts[5]
			data, _ := os.ReadFile(path)
			old := binary.BigEndian.Uint64(data[at:])
			binary.BigEndian.PutUint64(data[at:], tc.offset(old))
			os.Chmod(path, 0o644)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}

			e = open(t, cfg)
			defer e.Close()
			wantErr := fmt.Sprintf("segment %s at byte %d", path, at)
			for _, from := range []uint64{0, 3} {
				recs, err := e.Read(ctx, "h-0", from, store.Budget{})
				if !errors.Is(err, record.ErrCorrupt) || !strings.Contains(err.Error(), wantErr) {
					t.Fatalf("Read from %d: %d records, %v; want an error naming %q", from, len(recs), err, wantErr)
				}
				recs, release, err := e.ReadView(ctx, "h-0", from, store.Budget{})
				release()
				if !errors.Is(err, record.ErrCorrupt) || !strings.Contains(err.Error(), wantErr) || len(recs) != 0 {
					t.Fatalf("ReadView from %d: %d records, %v; want no records and an error naming %q", from, len(recs), err, wantErr)
				}
			}
			// Past the damage the log reads as before.
			recs, err := e.Read(ctx, "h-0", uint64(len(starts)), store.Budget{MaxRecords: 1})
			if err != nil || len(recs) != 1 || recs[0].Offset != want[len(starts)].Offset {
				t.Fatalf("Read past the damaged segment: %v, %v", recs, err)
			}
		})
	}
}
