package segment

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/cockroachdb/pebble"

	"strata/engine/record"
	"strata/engine/sharedfile"
)

// The offline tools (strata segment verify, dump) for the shared-file
// model: a shared shard's folder holds no segment file, so they read its
// manifest entry (the manifest opened read-only) and find its chunks in
// the shared files, scanned as recovery scans them. Nothing is written.

// SharedShardDir says whether dir is the folder of a shared shard: no
// segment file in it, and a data folder around it with shared files. It
// returns the data folder and the shard's name.
func SharedShardDir(dir string) (dataDir, shard string, ok bool) {
	dir = filepath.Clean(dir)
	if m, _ := filepath.Glob(filepath.Join(dir, "*.msg")); len(m) > 0 {
		return "", "", false
	}
	dataDir = filepath.Dir(dir)
	if st, err := os.Stat(filepath.Join(dataDir, "shared")); err != nil || !st.IsDir() {
		return "", "", false
	}
	return dataDir, filepath.Base(dir), true
}

// sharedChunkFn is called with each chunk of a shared shard that
// continues its log, in offset order, and its record bytes (valid during
// the call).
type sharedChunkFn func(file string, c sharedfile.Chunk, recs []byte) error

// walkShared reads a shared shard's log offline: its chunks in the shared
// files from the one it was created in on, in the order written, with its
// logical truncations applied as recovery applies them (a chunk counts
// when it continues the log). It returns one report per shared file that
// holds chunks of the shard or has a problem: the shard's records there,
// and the first thing wrong (damage in the file, which may hold the
// shard's records; a gap in its offsets).
func walkShared(dataDir, shard string, fn sharedChunkFn) ([]FileReport, error) {
	man, err := pebble.Open(filepath.Join(dataDir, "manifest"), &pebble.Options{ReadOnly: true, Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("%s: the manifest (is the service stopped?): %w", dataDir, err)
	}
	defer man.Close()
	shards, err := loadShards(man)
	if err != nil {
		return nil, err
	}
	var meta *ShardMeta
	for i := range shards {
		if shards[i].Name == shard {
			meta = &shards[i]
		}
	}
	switch {
	case meta == nil:
		return nil, fmt.Errorf("%s: the manifest has no shard %q", dataDir, shard)
	case meta.Model != ModelShared:
		return nil, fmt.Errorf("shard %s keeps its records in segment files of its own (%s), not in the shared files", shard, filepath.Join(dataDir, shard))
	}
	segs, err := loadSegments(man, shard)
	if err != nil {
		return nil, err
	}
	cuts, err := loadCuts(man, shard)
	if err != nil {
		return nil, err
	}
	// The log read here starts at the first local segment: older chunks
	// belong to segments tiered or dropped since.
	var end uint64
	found := false
	for _, s := range segs {
		if s.State != SegmentRemote {
			end, found = s.StartOffset, true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("shard %s has no local segment", shard)
	}
	shared := filepath.Join(dataDir, "shared")
	names, err := os.ReadDir(shared)
	if err != nil {
		return nil, err
	}
	var nos []uint64
	for _, n := range names {
		var no uint64
		if _, err := fmt.Sscanf(n.Name(), "%d.msg", &no); err == nil && n.Name() == sharedfile.FileName(no) && no >= meta.FromFile {
			nos = append(nos, no)
		}
	}
	sort.Slice(nos, func(i, j int) bool { return nos[i] < nos[j] })

	// First the log: the shard's chunks that continue it, with the cuts
	// applied in the order they were made (a cut shortens or drops what
	// was counted before it), as recovery replays them.
	type live struct {
		file  int // index in reports
		c     sharedfile.Chunk
		count uint32
	}
	type gap struct {
		file int
		c    sharedfile.Chunk
		end  uint64
	}
	var added []live
	var gaps []gap
	reports := make([]FileReport, len(nos))
	cut := func(c cutMeta) {
		kept := gaps[:0]
		for _, g := range gaps {
			if !(g.c.Ref.Less(c.Pos) && g.c.First >= c.End) {
				kept = append(kept, g) // not made dead by the cut
			}
		}
		gaps = kept
		if c.End >= end {
			return
		}
		end = c.End
		for len(added) > 0 && added[len(added)-1].c.First >= end {
			added = added[:len(added)-1]
		}
		if n := len(added); n > 0 && added[n-1].c.First+uint64(added[n-1].count) > end {
			added[n-1].count = uint32(end - added[n-1].c.First)
		}
	}
	for i, no := range nos {
		path := filepath.Join(shared, sharedfile.FileName(no))
		reports[i].Path = path
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		res := sharedfile.Scan(no, path, f, st.Size())
		f.Close()
		var ce *sharedfile.CorruptError
		if errors.As(res.Err, &ce) {
			reports[i].Problem, reports[i].ProblemAt = ce, ce.Pos
		}
		for _, c := range append(res.Chunks, res.After...) {
			if c.Shard != meta.ID {
				continue
			}
			for len(cuts) > 0 && !c.Ref.Less(cuts[0].Pos) {
				cut(cuts[0])
				cuts = cuts[1:]
			}
			switch {
			case c.First == end:
				added = append(added, live{file: i, c: c, count: c.Count})
				end = c.Last() + 1
			case c.First > end:
				gaps = append(gaps, gap{file: i, c: c, end: end})
			}
			// Below the log's end: before its local start, or dead after a cut.
		}
	}
	for _, c := range cuts {
		cut(c)
	}
	for _, g := range gaps {
		if r := &reports[g.file]; r.Problem == nil {
			r.Problem = fmt.Errorf("%w: the shard's chunk at byte %d holds offsets %d to %d, but its log ends at %d: offsets %d to %d are missing",
				record.ErrCorrupt, g.c.Pos, g.c.First, g.c.Last(), g.end, g.end, g.c.First-1)
			r.ProblemAt = g.c.Pos
		}
	}

	// Then its records, chunk by chunk.
	var buf []byte
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for _, l := range added {
		r := &reports[l.file]
		if f == nil || f.Name() != r.Path {
			if f != nil {
				f.Close()
			}
			if f, err = os.Open(r.Path); err != nil {
				return nil, err
			}
		}
		buf = append(buf[:0], make([]byte, l.c.Size())...)
		if _, err := f.ReadAt(buf, l.c.Pos); err != nil {
			return nil, err
		}
		_, recs, err := sharedfile.DecodeChunk(buf)
		if err != nil {
			return nil, fmt.Errorf("%s at byte %d: %w", r.Path, l.c.Pos, err)
		}
		n := 0
		for k := uint32(0); k < l.count; k++ {
			_, size, err := record.Peek(recs[n:])
			if err != nil {
				return nil, err
			}
			n += size
		}
		if r.Records == 0 {
			r.FirstOffset = l.c.First
		}
		r.LastOffset = l.c.First + uint64(l.count) - 1
		r.Records += int(l.count)
		r.Bytes += int64(n)
		if fn != nil {
			c := l.c
			c.Count = l.count
			if err := fn(r.Path, c, recs[:n]); err != nil {
				return nil, err
			}
		}
	}
	var out []FileReport
	for _, r := range reports {
		if r.Records > 0 || r.Problem != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// VerifyShared checks a shared shard offline (service stopped): every
// shared file it may have chunks in is scanned whole (chunk headers,
// records' CRCs and offsets, commit records, the seal trailer and its
// checksum), and its chunks must continue its log. One report per file
// holding its chunks or a problem; Bytes are the shard's record bytes
// there.
func VerifyShared(dataDir, shard string) ([]FileReport, error) {
	return walkShared(dataDir, shard, nil)
}

// DumpShared prints every record of a shared shard's local log, in
// offset order, as Dump does (pos is the record's byte position in its
// shared file), then the problems found.
func DumpShared(dataDir, shard string, w io.Writer) error {
	reports, err := walkShared(dataDir, shard, func(file string, c sharedfile.Chunk, recs []byte) error {
		fmt.Fprintf(w, "# file=%s chunk at byte %d: offsets %d to %d\n", filepath.Base(file), c.Pos, c.First, c.Last())
		for p := 0; p < len(recs); {
			r, n, err := record.Decode(recs[p:])
			if err != nil {
				return err
			}
			dumpRecord(w, &r, c.Pos+sharedfile.HeaderSize+int64(p), n)
			p += n
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range reports {
		if r.Problem != nil {
			return fmt.Errorf("%s at byte %d: %w", r.Path, r.ProblemAt, r.Problem)
		}
	}
	return nil
}

// DumpSharedFile prints a shared file chunk by chunk, each chunk's
// records as Dump prints them, then how the file ends (sealed, torn,
// damaged inside).
func DumpSharedFile(path string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	res := sharedfile.Scan(0, path, f, st.Size())
	var buf []byte
	for _, c := range append(res.Chunks, res.After...) {
		buf = append(buf[:0], make([]byte, c.Size())...)
		if _, err := f.ReadAt(buf, c.Pos); err != nil {
			return err
		}
		_, recs, err := sharedfile.DecodeChunk(buf)
		if err != nil {
			return fmt.Errorf("%s at byte %d: %w", path, c.Pos, err)
		}
		fmt.Fprintf(w, "# chunk at byte %d: shard id %d, offsets %d to %d, %d bytes\n", c.Pos, c.Shard, c.First, c.Last(), c.Size())
		for p := 0; p < len(recs); {
			r, n, err := record.Decode(recs[p:])
			if err != nil {
				return err
			}
			dumpRecord(w, &r, c.Pos+sharedfile.HeaderSize+int64(p), n)
			p += n
		}
	}
	switch {
	case res.Err != nil:
		return res.Err
	case res.Sealed != nil:
		fmt.Fprintf(w, "# sealed: %d chunks in %d bytes, crc32c %08x\n", res.Sealed.Chunks, res.Sealed.DataLen, res.Sealed.CRC)
	default:
		fmt.Fprintf(w, "# not sealed (a writer's active file): %d chunks in %d bytes\n", len(res.Chunks), res.End)
	}
	return nil
}
