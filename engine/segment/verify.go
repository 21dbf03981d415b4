package segment

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/record"
)

// FileReport is what an offline check found in one segment file.
type FileReport struct {
	Path                    string
	Records                 int
	FirstOffset, LastOffset uint64
	Bytes                   int64
	// Problem is the first thing wrong (a bad CRC, a torn record, an offset
	// out of sequence, records missing before the synced mark) at byte
	// ProblemAt; nil when the file is whole.
	Problem   error
	ProblemAt int64
	// Synced is the file's synced mark when VerifyDir could read it (-1
	// otherwise); TornTail says the problem lies at or past it: bytes no
	// fsync covered, which the next start cuts (docs/engine.md, "Recovery").
	Synced   int64
	TornTail bool
}

// VerifyFile decodes every record of a segment file, checking lengths, CRCs
// and that offsets follow each other (from next, when next is not nil).
func VerifyFile(path string, next *uint64) FileReport { return verifyFile(path, next, false) }

// verifyFile is VerifyFile, for a cleaned segment's file (gaps: its
// offsets only increase) too.
func verifyFile(path string, next *uint64, gaps bool) FileReport {
	rep := FileReport{Path: path, Synced: -1}
	f, err := os.Open(path)
	if err != nil {
		rep.Problem = err
		return rep
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		rep.Problem = err
		return rep
	}
	rep.Bytes = st.Size()
	sc := NewScanner(path, f, 0, st.Size(), next)
	if gaps {
		sc.Gaps(math.MaxUint64)
	}
	for sc.Next() {
		r, _, _ := sc.Record()
		if rep.Records == 0 {
			rep.FirstOffset = r.Offset
		}
		rep.LastOffset = r.Offset
		rep.Records++
	}
	var ce *CorruptError
	if errors.As(sc.Err(), &ce) {
		rep.Problem, rep.ProblemAt = ce, ce.Pos
	}
	return rep
}

// VerifyDir checks every segment file of one shard folder in number order,
// and that each file's offsets continue the previous file's. With the
// service stopped, it also reads the shard's synced mark from the data
// folder's index (the folder's parent) and tells a torn tail past it from
// damage before it, and a file that ends before it.
func VerifyDir(dir string, progress func(done, total int)) ([]FileReport, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	// A cleaned segment's file is its newest generation ({no}.{gen}.msg):
	// an older one beside it is a leftover the next start removes.
	var nums []uint64
	gens := map[uint64]uint64{}
	for _, e := range entries {
		if n, gen, ok := parseSegmentFile(e.Name()); ok {
			if g, seen := gens[n]; !seen {
				nums = append(nums, n)
				gens[n] = gen
			} else {
				gens[n] = max(g, gen)
			}
		}
	}
	if len(nums) == 0 {
		if st, err := os.Stat(filepath.Join(filepath.Dir(filepath.Clean(dir)), "shared")); err == nil && st.IsDir() {
			return nil, fmt.Errorf("%s holds no segment files (N.msg): a partition of a strata.file.model=shared topic keeps its records in %s (VerifyShared checks it)",
				dir, filepath.Join(filepath.Dir(filepath.Clean(dir)), "shared"))
		}
		return nil, fmt.Errorf("%s holds no segment files (N.msg)", dir)
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	markSeg, mark, marked := syncedMarkOffline(dir)
	var reports []FileReport
	var next *uint64
	for i, n := range nums {
		rep := verifyFile(cleanedPath(dir, n, gens[n]), next, gens[n] > 0)
		if marked && n == markSeg {
			rep.Synced = mark
			switch {
			case rep.Problem != nil:
				rep.TornTail = rep.ProblemAt >= mark
			case rep.Bytes < mark:
				rep.Problem = fmt.Errorf("%s: the file ends at byte %d, but it was on disk up to byte %d: records are missing: %w",
					rep.Path, rep.Bytes, mark, record.ErrCorrupt)
				rep.ProblemAt = rep.Bytes
			}
		}
		reports = append(reports, rep)
		switch {
		case gens[n] > 0:
			next = nil // a cleaned segment may have lost its last offsets: the next file's start is not known here
		case rep.Records > 0:
			after := rep.LastOffset + 1
			next = &after
		}
		if progress != nil {
			progress(i+1, len(nums))
		}
	}
	return reports, nil
}

// Dump writes one line per record of a segment file.
func Dump(path string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	sc := NewScanner(filepath.Base(path), f, 0, st.Size(), nil)
	for sc.Next() {
		r, p, size := sc.Record()
		dumpRecord(w, r, p, size)
	}
	return sc.Err()
}

// syncedMarkOffline reads the synced mark of the shard whose folder is dir:
// its mark file, or where it has none the earlier version's key in the
// index beside it, read-only (Pebble locks its folder even so: a running
// service keeps it, and that mark is then unknown). The mark's shard
// creation time is not checked (that is the manifest's): the deletion of a
// shard deletes its mark.
func syncedMarkOffline(dir string) (seg uint64, pos int64, ok bool) {
	dir = filepath.Clean(dir)
	if m, found, err := readMarkFile(vfs.Default, dir); err == nil && found {
		return m.seg, m.pos, true
	}
	idx := filepath.Join(filepath.Dir(dir), "index")
	if _, err := os.Stat(idx); err != nil {
		return 0, 0, false
	}
	db, err := pebble.Open(idx, &pebble.Options{ReadOnly: true, Logger: quietLogger{}})
	if err != nil {
		return 0, 0, false
	}
	defer db.Close()
	v, closer, err := db.Get(syncedKey(filepath.Base(dir)))
	if err != nil {
		return 0, 0, false
	}
	defer closer.Close()
	m, ok := decodeSynced(v)
	return m.seg, m.pos, ok
}

// dumpRecord writes Dump's line for a record at byte p of its file.
func dumpRecord(w io.Writer, r *record.Record, p int64, size int) {
	key := "null"
	if r.Key != nil {
		key = strconv.Quote(string(r.Key))
	}
	value := "null"
	if r.Value != nil {
		value = strconv.Quote(string(r.Value[:min(len(r.Value), 64)]))
		if len(r.Value) > 64 {
			value += fmt.Sprintf("...(%d bytes)", len(r.Value))
		}
	}
	fmt.Fprintf(w, "offset=%d pos=%d size=%d ts=%d key=%s value=%s headers=%d tags=%q protocol_data=%x\n",
		r.Offset, p, size, r.Timestamp, key, value, len(r.Headers), r.Tags, r.ProtocolData)
}
