package sharedfile

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"strata/engine/record"
)

// readShard reads shard's records out of its chunks, in the order given,
// checking that each chunk is the shard's and that offsets follow each
// other from next (when not nil). crcs[i] is the CRC-32C of the bytes of
// the first i+1 records: the segment-file checksum of that prefix.
func readShard(d *Dir, shard uint64, refs []Ref, next *uint64) (recs []record.Record, crcs []uint32, err error) {
	var crc uint32
	for _, ref := range refs {
		err := d.ReadChunk(ref, &shard, func(h Header, b []byte) error {
			if next != nil && h.First != *next {
				return fmt.Errorf("chunk at file %d byte %d starts at offset %d where %d was expected", ref.File, ref.Pos, h.First, *next)
			}
			b = append([]byte(nil), b...) // records alias it past the read
			for p := 0; p < len(b); {
				r, n, err := record.Decode(b[p:])
				if err != nil {
					return err
				}
				crc = crc32.Update(crc, castagnoli, b[p:p+n])
				recs, crcs = append(recs, r), append(crcs, crc)
				following := r.Offset + 1
				next = &following
				p += n
			}
			return nil
		})
		if err != nil {
			return recs, crcs, err
		}
	}
	return recs, crcs, nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openDir(t testing.TB, dir string, maxBytes int64) (*Dir, []Recovered) {
	t.Helper()
	d, rec, err := Open(Config{Dir: dir, MaxFileBytes: maxBytes, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, rec
}

// shardLog is what a test wrote to one shard: its records in offset order
// and the chunks that hold them.
type shardLog struct {
	recs   []record.Record
	chunks []Ref
}

// writeBatches writes batches batches; batch b touches shards b%3, b%3+3,
// ... of shards, each with 1 to 4 records, committing once per batch.
func writeBatches(t testing.TB, w *Writer, logs map[uint64]*shardLog, shards, batches int) []FileInfo {
	t.Helper()
	var sealed []FileInfo
	var dst []Chunk
	for b := 0; b < batches; b++ {
		for s := b % 3; s < shards; s += 3 {
			l := logs[uint64(s)]
			if l == nil {
				l = &shardLog{}
				logs[uint64(s)] = l
			}
			recs := testRecords(uint64(len(l.recs)), 1+(b+s)%4, fmt.Sprintf("s%d-b%d", s, b))
			var err error
			if dst, err = w.Add(dst[:0], uint64(s), recs); err != nil {
				t.Fatal(err)
			}
			for _, c := range dst {
				l.chunks = append(l.chunks, c.Ref)
			}
			l.recs = append(l.recs, recs...)
		}
		info, err := w.Commit(true)
		if err != nil {
			t.Fatal(err)
		}
		if info != nil {
			sealed = append(sealed, *info)
		}
	}
	return sealed
}

// segmentBytes is the segment file the partition-per-file model would
// write for recs.
func segmentBytes(t testing.TB, recs []record.Record) []byte {
	var out []byte
	for i := range recs {
		var err error
		if out, err = record.Append(out, &recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Many shards, small batches, files rolling by size: every shard reads back
// the records it was given, and its record bytes, chunk after chunk and file
// after file, are exactly its segment file's in the partition model, so the
// segment checksum is the same in both.
func TestShardsReadBackAsTheirSegmentFiles(t *testing.T) {
	dir := t.TempDir()
	d, _ := openDir(t, dir, 8<<10)
	w := d.NewWriter()
	logs := map[uint64]*shardLog{}
	sealed := writeBatches(t, w, logs, 20, 120)
	if len(sealed) < 5 {
		t.Fatalf("%d files sealed; the test should roll several", len(sealed))
	}
	nchunks := 0
	for _, l := range logs {
		nchunks += len(l.chunks)
	}
	if st := d.Stats(); st.Commits.Load() != 120 || st.Fsyncs.Load() != 120 || st.Chunks.Load() != uint64(nchunks) || st.Sealed.Load() != uint64(len(sealed)) {
		t.Fatalf("stats: %d commits, %d fsyncs, %d chunks, %d sealed; want 120, 120 (one per batch), %d, %d",
			st.Commits.Load(), st.Fsyncs.Load(), st.Chunks.Load(), st.Sealed.Load(), nchunks, len(sealed))
	}
	for s, l := range logs {
		want := segmentBytes(t, l.recs)
		var got []byte
		for _, ref := range l.chunks {
			if err := d.ReadChunk(ref, &s, func(h Header, recs []byte) error {
				got = append(got, recs...)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("shard %d: %d record bytes read from its chunks differ from its %d-byte segment file", s, len(got), len(want))
		}
		zero := uint64(0)
		recs, crcs, err := readShard(d, s, l.chunks, &zero)
		if err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
		if !reflect.DeepEqual(recs, l.recs) {
			t.Fatalf("shard %d: scanned %d records, wrote %d, or they differ", s, len(recs), len(l.recs))
		}
		if crcs[len(crcs)-1] != crc32.Checksum(want, castagnoli) {
			t.Fatalf("shard %d: scanner checksum %08x; the segment file's is %08x", s, crcs[len(crcs)-1], crc32.Checksum(want, castagnoli))
		}
	}
	for _, info := range sealed {
		st, err := os.Stat(info.Path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o444 || st.Size() != info.DataLen+HeaderSize || filepath.Base(info.Path) != fmt.Sprintf("%020d.msg", info.No) {
			t.Fatalf("sealed file %s: mode %v, %d bytes; want 0444, %d bytes (data and trailer)", info.Path, st.Mode(), st.Size(), info.DataLen+HeaderSize)
		}
		b, err := os.ReadFile(info.Path)
		if err != nil {
			t.Fatal(err)
		}
		if crc := crc32.Checksum(b[:info.DataLen], castagnoli); crc != info.CRC {
			t.Fatalf("file %d: checksum %08x; sealed with %08x", info.No, crc, info.CRC)
		}
		if info.DataLen < 8<<10 {
			t.Fatalf("file %d sealed at %d bytes, under the cap", info.No, info.DataLen)
		}
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d2, rec := openDir(t, dir, 8<<10)
	for _, r := range rec {
		if !r.Sealed || r.Chunks != nil || r.Cut != 0 || r.Damage != nil {
			t.Fatalf("after a clean close, file %d comes back as %+v; want sealed, trusted without a scan", r.No, r)
		}
	}
	var all []Chunk
	for _, f := range d2.Files() {
		cs, err := d2.Chunks(f.No)
		if err != nil || uint64(len(cs)) != f.Chunks {
			t.Fatalf("file %d: %d chunks listed (%v); its trailer says %d", f.No, len(cs), err, f.Chunks)
		}
		all = append(all, cs...)
	}
	n := 0
	for _, l := range logs {
		n += len(l.chunks)
	}
	if len(all) != n {
		t.Fatalf("%d chunks listed after a reopen; %d written", len(all), n)
	}
}

// File numbers come from one sequence across writers and restarts, and
// never repeat: not after a restart, not after the newest file was
// removed (FirstFileNo, from the engine's manifest, is the floor).
func TestFileNumbersNeverRepeat(t *testing.T) {
	dir := t.TempDir()
	d, _ := openDir(t, dir, 1<<20)
	w1, w2 := d.NewWriter(), d.NewWriter()
	for _, w := range []*Writer{w1, w2} {
		if _, err := w.Add(nil, 1, testRecords(0, 1, "x")); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(true); err != nil {
			t.Fatal(err)
		}
	}
	n1, n2 := w1.f.no, w2.f.no
	if n1 != 0 || n2 != 1 {
		t.Fatalf("two writers took files %d and %d; want 0 and 1", n1, n2)
	}
	if err := d.Remove(n2); err == nil || !strings.Contains(err.Error(), "active") {
		t.Fatalf("removing an active file: %v", err)
	}
	w1.Seal()
	w2.Seal()
	if err := d.Remove(n2); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d, _, err := Open(Config{Dir: dir, Logger: quiet(), FirstFileNo: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	w := d.NewWriter()
	if _, err := w.Add(nil, 1, testRecords(1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	if no := w.f.no; no != 2 {
		t.Fatalf("after a restart the next file is %d; want 2", no)
	}
	// A writer that sealed an empty file removes it rather than leave it.
	w.discard()
	if info, err := w.Seal(); err != nil || info != nil {
		t.Fatalf("sealing a file with no chunk: %+v, %v", info, err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName(2))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an empty file was left: %v", err)
	}
}

// Readers see a chunk only once it is committed; a ref at no chunk, or at
// another shard's, is refused; a removed file reads as an error.
func TestReadChunkRefuses(t *testing.T) {
	d, _ := openDir(t, t.TempDir(), 1<<20)
	w := d.NewWriter()
	cs, err := w.Add(nil, 5, testRecords(0, 2, "a"))
	if err != nil {
		t.Fatal(err)
	}
	nop := func(Header, []byte) error { return nil }
	if err := d.ReadChunk(cs[0].Ref, nil, nop); err == nil || !strings.Contains(err.Error(), "no chunk at byte 0") {
		t.Fatalf("reading an uncommitted chunk: %v", err)
	}
	if _, err := w.Commit(true); err != nil {
		t.Fatal(err)
	}
	other := uint64(6)
	cases := []struct {
		name  string
		ref   Ref
		shard *uint64
		want  string
	}{
		{"another shard's chunk", cs[0].Ref, &other, "a chunk of shard 5, not 6"},
		{"inside a chunk", Ref{File: cs[0].File, Pos: 8}, nil, "magic"},
		{"its commit record", Ref{File: cs[0].File, Pos: cs[0].Size()}, nil, "kind 3 where a records chunk"},
		{"past the end", Ref{File: cs[0].File, Pos: cs[0].Size() + HeaderSize}, nil, "no chunk at byte"},
		{"no such file", Ref{File: 99}, nil, "no file 99"},
	}
	for _, tc := range cases {
		if err := d.ReadChunk(tc.ref, tc.shard, nop); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
	}
	var got Header
	if err := d.ReadChunk(cs[0].Ref, nil, func(h Header, _ []byte) error { got = h; return nil }); err != nil || got != cs[0].Header {
		t.Fatalf("reading the chunk: %+v, %v", got, err)
	}
	w.Seal()
	if err := d.Remove(cs[0].File); err != nil {
		t.Fatal(err)
	}
	if err := d.ReadChunk(cs[0].Ref, nil, nop); err == nil {
		t.Fatal("a removed file was read")
	}
}

// Add refuses records it cannot store and leaves no trace; a large append
// becomes several chunks with contiguous offsets.
func TestAdd(t *testing.T) {
	d, _ := openDir(t, t.TempDir(), 1<<20)
	w := d.NewWriter()
	gap := testRecords(0, 3, "g")
	gap[2].Offset = 5
	if _, err := w.Add(nil, 1, gap); err == nil || !strings.Contains(err.Error(), "offset 5 after 1") {
		t.Fatalf("offsets with a gap: %v", err)
	}
	big := testRecords(0, 2, "b")
	big[1].Value = make([]byte, record.MaxSize)
	if _, err := w.Add(nil, 1, big); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a record over the format's limit: %v", err)
	}
	if len(w.buf) != 0 || len(w.pending) != 0 {
		t.Fatalf("refused adds left %d bytes and %d chunks pending", len(w.buf), len(w.pending))
	}
	w.limit = 300
	recs := testRecords(10, 12, "split")
	cs, err := w.Add(nil, 3, recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) < 3 {
		t.Fatalf("12 records over a 300-byte chunk limit made %d chunks", len(cs))
	}
	next := uint64(10)
	for _, c := range cs {
		if c.First != next || c.Length > 300 || c.Shard != 3 {
			t.Fatalf("chunk %+v after offset %d", c, next)
		}
		next = c.Last() + 1
	}
	if next != 22 {
		t.Fatalf("chunks end at %d", next)
	}
	if _, err := w.Commit(false); err != nil {
		t.Fatal(err)
	}
	refs := make([]Ref, len(cs))
	for i, c := range cs {
		refs[i] = c.Ref
	}
	got, _, err := readShard(d, 3, refs, &cs[0].First)
	if err != nil || !reflect.DeepEqual(got, recs) {
		t.Fatalf("read %d records back (%v)", len(got), err)
	}
}

// A failed write is cut off and refuses the batch only; a failed fsync
// refuses everything after it; a reopen finds what was acknowledged.
func TestWriteFaults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		op       errorfs.Op
		sticky   bool
		kept     int // chunks after a reopen
		takesOne bool
	}{
		{"write fails", errorfs.OpFileWriteAt, false, 2, true},
		{"fsync fails", errorfs.OpFileSync, true, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var armed bool
			fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if armed && op == tc.op {
					armed = false
					return errorfs.ErrInjected
				}
				return nil
			}))
			d, _, err := Open(Config{Dir: dir, FS: fs, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			w := d.NewWriter()
			commit := func(first uint64) error {
				if _, err := w.Add(nil, 1, testRecords(first, 1, "f")); err != nil {
					return err
				}
				_, err := w.Commit(true)
				return err
			}
			if err := commit(0); err != nil {
				t.Fatal(err)
			}
			if err := commit(1); err != nil {
				t.Fatal(err)
			}
			armed = true
			if err := commit(2); !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("the faulty commit: %v", err)
			}
			err = commit(2)
			if tc.sticky != (err != nil) {
				t.Fatalf("the commit after the fault: %v; want refused=%t", err, tc.sticky)
			}
			d.Close()
			_, rec := openDir(t, dir, 0)
			n := 0
			for _, r := range rec {
				n += len(r.Chunks)
			}
			want := tc.kept
			if tc.takesOne {
				want++ // the retried commit
			}
			if n != want {
				t.Fatalf("%d chunks after a reopen; want %d", n, want)
			}
		})
	}
}

// Readers read committed chunks while a writer commits and rolls files
// (go test -race): every read sees whole chunks of the right shard.
func TestReadWhileWriting(t *testing.T) {
	d, _ := openDir(t, t.TempDir(), 16<<10)
	w := d.NewWriter()
	refs := make(chan Chunk, 4096)
	done := make(chan error, 2)
	go func() {
		var dst []Chunk
		next := map[uint64]uint64{}
		for b := 0; b < 300; b++ {
			dst = dst[:0]
			for s := uint64(0); s < 4; s++ {
				var err error
				if dst, err = w.Add(dst, s, testRecords(next[s], 2, "rw")); err != nil {
					done <- err
					return
				}
				next[s] += 2
			}
			if _, err := w.Commit(false); err != nil {
				done <- err
				return
			}
			for _, c := range dst {
				refs <- c
			}
		}
		close(refs)
		done <- nil
	}()
	go func() {
		n := 0
		for c := range refs {
			err := d.ReadChunk(c.Ref, &c.Shard, func(h Header, recs []byte) error {
				if h != c.Header {
					return fmt.Errorf("read %+v at %+v; committed %+v", h, c.Ref, c.Header)
				}
				return nil
			})
			if err != nil {
				done <- err
				return
			}
			if n++; n%50 == 0 {
				d.Files()
			}
		}
		done <- nil
	}()
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if len(d.Files()) < 3 {
		t.Fatalf("%d files; the test should roll several", len(d.Files()))
	}
}

// A failure injected at each write-side file operation of a workload in
// turn (creating files, syncing the folder, writes, fsyncs, seals, the
// removal of an empty file): after a reopen on the real files, every
// acknowledged batch is there, the failed one is there whole or not at
// all, and a writer takes batches again.
func TestFaultAtEveryOperation(t *testing.T) {
	type batch struct{ chunks []Chunk }
	workload := func(fs vfs.FS, dir string) (acked []batch, failed *batch, err error) {
		d, _, err := Open(Config{Dir: dir, FS: fs, MaxFileBytes: 700, Logger: quiet()})
		if err != nil {
			return nil, nil, err
		}
		defer d.Close()
		w := d.NewWriter()
		for b := 0; b < 8; b++ {
			var cs []Chunk
			for s := uint64(0); s < 2; s++ {
				if cs, err = w.Add(cs, s, testRecords(uint64(2*b), 2, fmt.Sprint(b))); err != nil {
					return acked, nil, err
				}
			}
			if _, err := w.Commit(true); err != nil {
				return acked, &batch{cs}, err
			}
			acked = append(acked, batch{cs})
		}
		_, err = w.Seal()
		return acked, nil, err
	}
	eligible := func(op errorfs.Op) bool {
		return op.OpKind() == errorfs.OpKindWrite && op != errorfs.OpFileClose && op != errorfs.OpLock
	}
	var ops int
	counting := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if eligible(op) {
			ops++
		}
		return nil
	}))
	if acked, _, err := workload(counting, t.TempDir()); err != nil || len(acked) != 8 {
		t.Fatalf("the workload without a failure: %d batches, %v", len(acked), err)
	}
	if ops < 20 {
		t.Fatalf("the workload made %d write-side operations; expected more", ops)
	}
	for i := 0; i < ops; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			dir := t.TempDir()
			at := errorfs.OnIndex(int32(i))
			var failedOp string
			faulty := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if !eligible(op) {
					return nil
				}
				err := at.MaybeError(op, path)
				if err != nil {
					failedOp = fmt.Sprintf("op %d on %s", op, filepath.Base(path))
				}
				return err
			}))
			acked, failed, err := workload(faulty, dir)
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("failing %s: the workload ended with %v, not the injected error", failedOp, err)
			}
			d, rec := openDir(t, dir, 700)
			chunks, err := allChunks(d, rec)
			if err != nil {
				t.Fatalf("failing %s: after a reopen: %v", failedOp, err)
			}
			want := map[uint64][]Header{}
			for _, b := range acked {
				for _, c := range b.chunks {
					want[c.Shard] = append(want[c.Shard], c.Header)
				}
			}
			for s := uint64(0); s < 2; s++ {
				var got []Header
				for _, c := range chunks[s] {
					got = append(got, c.Header)
				}
				w := want[s]
				if len(got) > len(w) && failed != nil {
					w = append(w, failed.chunks[s].Header)
				}
				if !reflect.DeepEqual(got, w) {
					t.Fatalf("failing %s: shard %d holds chunks %+v after a reopen; want %+v (%d batches acknowledged)", failedOp, s, got, w, len(acked))
				}
			}
			// The two shards' chunks of the failed batch are there together
			// or not at all.
			if len(chunks[0]) != len(chunks[1]) {
				t.Fatalf("failing %s: part of the failed batch is there: %d and %d chunks", failedOp, len(chunks[0]), len(chunks[1]))
			}
			w := d.NewWriter()
			next := uint64(2 * len(chunks[0]))
			if _, err := w.Add(nil, 0, testRecords(next, 1, "after")); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Commit(true); err != nil {
				t.Fatalf("failing %s: a commit after a reopen: %v", failedOp, err)
			}
		})
	}
	t.Logf("%d operations failed in turn", ops)
}
