package sharedfile

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"strata/engine/record"
	"strings"
	"testing"
)

// unsealedFile writes five committed batches, one chunk each, of shards
// 0..4 to a file that is left unsealed, as a writer's active file is at a
// crash, and returns its path and chunks: chunk i is batch i, and its
// commit record follows it.
func unsealedFile(t *testing.T, dir string) (string, []Chunk) {
	t.Helper()
	d, _ := openDir(t, dir, 1<<20)
	w := d.NewWriter()
	var cs []Chunk
	for s := uint64(0); s < 5; s++ {
		var err error
		if cs, err = w.Add(cs, s, testRecords(10*s, 3, "r")); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(true); err != nil {
			t.Fatal(err)
		}
	}
	w.f.wf.Close() // no trailer: the process "died" here
	d.Close()
	return filepath.Join(dir, FileName(0)), cs
}

// legacyFile writes the same five chunks as a writer did before commit
// records (flags 0, nothing between the chunks), unsealed.
func legacyFile(t *testing.T, dir string) (string, []Chunk) {
	t.Helper()
	var b []byte
	var cs []Chunk
	for s := uint64(0); s < 5; s++ {
		c := chunkBytes(t, s, testRecords(10*s, 3, "r"))
		h, _ := ParseHeader(c)
		cs = append(cs, Chunk{Ref: Ref{Pos: int64(len(b))}, Header: h})
		b = append(b, c...)
	}
	path := filepath.Join(dir, FileName(0))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, cs
}

// A file made but never given a whole chunk (the process died in between)
// is removed, and its number is not used again.
func TestRecoveryRemovesAFileWithNoChunk(t *testing.T) {
	for _, content := range [][]byte{nil, make([]byte, 100), []byte{Magic, KindRecords}} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, FileName(3)), content, 0o644)
		d, rec := openDir(t, dir, 1<<20)
		if len(rec) != 0 {
			t.Fatalf("%d bytes with no chunk: recovered %+v; want the file gone", len(content), rec)
		}
		if _, err := os.Stat(filepath.Join(dir, FileName(3))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the file is still there: %v", err)
		}
		w := d.NewWriter()
		if _, err := w.Add(nil, 1, testRecords(0, 1, "a")); err != nil {
			t.Fatal(err)
		}
		if no := w.f.no; no != 4 {
			t.Fatalf("the next file is %d; want 4", no)
		}
	}
}

// recoveryCase damages a file of five chunks (cs) and says what a start
// must find: the first chunks whole chunks, then a cut tail or damage
// inside.
type recoveryCase struct {
	name   string
	damage func(*testing.T, string, []Chunk)
	chunks int  // whole chunks found
	cut    bool // the tail after them was cut
	inside bool // damage inside: left as it is
	// at is where damage inside is reported, when not where the last
	// batch kept ends; next the chunk after it that proves it.
	at   func(cs []Chunk) int64
	next int
}

func flip(at func(cs []Chunk) int64) func(*testing.T, string, []Chunk) {
	return func(t *testing.T, path string, cs []Chunk) {
		b, _ := os.ReadFile(path)
		b[at(cs)] ^= 0x08
		os.WriteFile(path, b, 0o644)
	}
}

func appendBytes(extra func(cs []Chunk, file []byte) []byte) func(*testing.T, string, []Chunk) {
	return func(t *testing.T, path string, cs []Chunk) {
		b, _ := os.ReadFile(path)
		os.WriteFile(path, append(b, extra(cs, b)...), 0o644)
	}
}

// sealedThen seals the file as a start does, then damages it.
func sealedThen(damage func(*testing.T, string, []Chunk)) func(*testing.T, string, []Chunk) {
	return func(t *testing.T, path string, cs []Chunk) {
		d, _ := openDir(t, filepath.Dir(path), 1<<20)
		d.Close()
		os.Chmod(path, 0o644)
		damage(t, path, cs)
		os.Chmod(path, 0o444) // as the seal left it
	}
}

// Files with commit records: damage with a committed batch after it is
// kept and reported; damage in the last batch (its chunks, its commit
// record, or bytes after it) cuts that batch whole.
func TestRecovery(t *testing.T) {
	end := func(i int) func(cs []Chunk) int64 { // of batch i, its commit record included
		return func(cs []Chunk) int64 { return cs[i].Pos + cs[i].Size() + HeaderSize }
	}
	cases := []recoveryCase{
		{name: "clean, unsealed", damage: func(*testing.T, string, []Chunk) {}, chunks: 5},
		{name: "torn header", damage: appendBytes(func(cs []Chunk, b []byte) []byte { return b[cs[1].Pos : cs[1].Pos+10] }), chunks: 5, cut: true},
		{name: "torn records", damage: appendBytes(func(cs []Chunk, b []byte) []byte { return b[cs[1].Pos : cs[1].Pos+cs[1].Size()-5] }), chunks: 5, cut: true},
		{name: "a whole chunk with no commit record", damage: appendBytes(func(cs []Chunk, b []byte) []byte { return b[cs[1].Pos : cs[1].Pos+cs[1].Size()] }), chunks: 5, cut: true},
		{name: "zeros from preallocation", damage: appendBytes(func([]Chunk, []byte) []byte { return make([]byte, 4096) }), chunks: 5, cut: true},
		{name: "last batch's record damaged", damage: flip(func(cs []Chunk) int64 { return end(4)(cs) - HeaderSize - 3 }), chunks: 4, cut: true},
		{name: "last batch's header damaged", damage: flip(func(cs []Chunk) int64 { return cs[4].Pos + 13 }), chunks: 4, cut: true},
		{name: "last batch's commit record damaged", damage: flip(func(cs []Chunk) int64 { return end(4)(cs) - 20 }), chunks: 4, cut: true},
		{name: "last batch's commit record lost", damage: func(t *testing.T, path string, cs []Chunk) { os.Truncate(path, end(4)(cs)-HeaderSize) }, chunks: 4, cut: true},
		{name: "a middle batch's record damaged, committed batches after", damage: flip(func(cs []Chunk) int64 { return cs[2].Pos + HeaderSize + 20 }), chunks: 2, inside: true, next: 3},
		{name: "a middle batch's header damaged, committed batches after", damage: flip(func(cs []Chunk) int64 { return cs[1].Pos + 5 }), chunks: 1, inside: true, next: 2},
		{name: "a middle batch's commit record damaged, committed batches after", damage: flip(func(cs []Chunk) int64 { return end(2)(cs) - 10 }), chunks: 3, inside: true, next: 3,
			at: func(cs []Chunk) int64 { return end(2)(cs) - HeaderSize }},
		{name: "sealed, then its trailer damaged", damage: sealedThen(flip(func(cs []Chunk) int64 { return end(4)(cs) + 10 })), chunks: 5, cut: true},
		{name: "sealed, then bytes after the trailer", damage: sealedThen(appendBytes(func([]Chunk, []byte) []byte { return []byte("stray") })), chunks: 5, cut: true},
	}
	runRecovery(t, unsealedFile, cases, func(cs []Chunk, n int) int64 { return end(n - 1)(cs) })
}

// Files written before commit records still open, by the rule they were
// written under: any whole chunk after damage makes it damage inside.
func TestRecoveryOfFilesWithoutCommitRecords(t *testing.T) {
	end := func(cs []Chunk) int64 { return cs[4].Pos + cs[4].Size() }
	cases := []recoveryCase{
		{name: "clean, unsealed", damage: func(*testing.T, string, []Chunk) {}, chunks: 5},
		{name: "torn header", damage: appendBytes(func(cs []Chunk, b []byte) []byte { return b[cs[1].Pos : cs[1].Pos+10] }), chunks: 5, cut: true},
		{name: "zeros from preallocation", damage: appendBytes(func([]Chunk, []byte) []byte { return make([]byte, 4096) }), chunks: 5, cut: true},
		{name: "last chunk's record damaged", damage: flip(func(cs []Chunk) int64 { return end(cs) - 3 }), chunks: 4, cut: true},
		{name: "a middle chunk's record damaged, whole chunks after", damage: flip(func(cs []Chunk) int64 { return cs[2].Pos + HeaderSize + 20 }), chunks: 2, inside: true, next: 3},
		{name: "a middle chunk's header damaged, whole chunks after", damage: flip(func(cs []Chunk) int64 { return cs[1].Pos + 5 }), chunks: 1, inside: true, next: 2},
		{name: "a chunk with commit records' flag after them", damage: appendBytes(func(cs []Chunk, b []byte) []byte {
			c := reheader(b[cs[1].Pos:cs[1].Pos+cs[1].Size()], func(h []byte) { h[3] = FlagCommits })
			return c
		}), chunks: 5, cut: true},
		{name: "sealed, then its trailer damaged", damage: sealedThen(flip(func(cs []Chunk) int64 { return end(cs) + 10 })), chunks: 5, cut: true},
	}
	runRecovery(t, legacyFile, cases, func(cs []Chunk, n int) int64 { return cs[n-1].Pos + cs[n-1].Size() })
}

func runRecovery(t *testing.T, write func(*testing.T, string) (string, []Chunk), cases []recoveryCase, endOf func(cs []Chunk, n int) int64) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path, cs := write(t, dir)
			tc.damage(t, path, cs)
			before, _ := os.Stat(path)
			d, rec := openDir(t, dir, 1<<20)
			if len(rec) != 1 {
				t.Fatalf("%d files recovered", len(rec))
			}
			r := rec[0]
			if !reflect.DeepEqual(r.Chunks, cs[:tc.chunks]) {
				t.Fatalf("recovered chunks %+v; want the first %d written", r.Chunks, tc.chunks)
			}
			wantEnd := endOf(cs, tc.chunks)
			after, _ := os.Stat(path)
			switch {
			case tc.inside:
				at := cs[tc.chunks].Pos
				if tc.at != nil {
					at = tc.at(cs)
				}
				if r.Damage == nil || r.Damage.Torn || r.Damage.Pos != at || r.Damage.NextValid != cs[tc.next].Pos || !errors.Is(r.Damage, ErrCorrupt) {
					t.Fatalf("damage reported as %+v; want at byte %d, the next whole batch at %d", r.Damage, at, cs[tc.next].Pos)
				}
				if r.Sealed || !r.Damaged || after.Size() != before.Size() || r.Cut != 0 || r.DataLen != before.Size() {
					t.Fatalf("damage inside: sealed=%t, damaged=%t, %d bytes of %d left, cut %d, %d readable; want the file left as it was, readable to its end",
						r.Sealed, r.Damaged, after.Size(), before.Size(), r.Cut, r.DataLen)
				}
				if !reflect.DeepEqual(r.After, cs[tc.next:]) || len(r.Damages) != 1 || r.Damages[0] != r.Damage {
					t.Fatalf("after the damage: chunks %+v, damages %v; want the chunks from the %dth on, one damage", r.After, r.Damages, tc.next)
				}
				for _, c := range r.After {
					if err := d.ReadChunk(c.Ref, &c.Shard, func(Header, []byte) error { return nil }); err != nil {
						t.Fatalf("reading a chunk after the damage: %v", err)
					}
				}
			default:
				if r.Damage != nil || !r.Sealed || after.Size() != wantEnd+HeaderSize || r.DataLen != wantEnd {
					t.Fatalf("recovered %+v, file of %d bytes; want sealed with %d bytes of chunks and a trailer", r, after.Size(), wantEnd)
				}
				if tc.cut != (r.Cut > 0) {
					t.Fatalf("cut %d bytes; want a cut: %t", r.Cut, tc.cut)
				}
				if after.Mode().Perm() != 0o444 {
					t.Fatalf("recovered file's mode %v; want 0444", after.Mode())
				}
			}
			if st := d.Stats(); st.CutBytes.Load() != uint64(r.Cut) || (st.Damaged.Load() == 1) != tc.inside {
				t.Fatalf("stats: %d bytes cut, %d damaged files; recovered %+v", st.CutBytes.Load(), st.Damaged.Load(), r)
			}
			for _, c := range r.Chunks {
				if err := d.ReadChunk(c.Ref, &c.Shard, func(Header, []byte) error { return nil }); err != nil {
					t.Fatalf("reading a recovered chunk: %v", err)
				}
			}
			d.Close()
			// A second start finds the same thing, with nothing more cut.
			_, again := openDir(t, dir, 1<<20)
			if tc.inside {
				if again[0].Damage == nil || !reflect.DeepEqual(again[0].Chunks, r.Chunks) {
					t.Fatalf("a second start: %+v", again[0])
				}
			} else if !again[0].Sealed || again[0].Cut != 0 || again[0].Chunks != nil || again[0].DataLen != wantEnd {
				t.Fatalf("a second start: %+v; want the sealed file trusted as it is", again[0])
			}
		})
	}
}

// A torn last chunk whose records carry, as payload, the bytes of a whole
// chunk is a torn tail: the search for whole chunks after damage starts
// past a chunk whose header checked out, never inside its records.
func TestRecoveryIgnoresChunksInsidePayloads(t *testing.T) {
	dir := t.TempDir()
	d, _ := openDir(t, dir, 1<<20)
	w := d.NewWriter()
	if _, err := w.Add(nil, 1, testRecords(0, 2, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(true); err != nil {
		t.Fatal(err)
	}
	// A whole chunk of a file with commit records, and a commit record
	// naming it, as a client's value.
	inner := reheader(chunkBytes(t, 2, testRecords(0, 1, "inner")), func(h []byte) { h[3] = FlagCommits })
	inner = AppendCommit(inner, Commit{Seq: 5, Length: uint64(len(inner)), Chunks: 1, CRC: crc32.Checksum(inner, castagnoli)})
	recs := testRecords(2, 1, "a")
	recs[0].Value = append(inner, make([]byte, 64)...) // the inner chunk ends well before the record does
	cs, err := w.Add(nil, 1, recs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(true); err != nil {
		t.Fatal(err)
	}
	w.f.wf.Close()
	d.Close()
	path := filepath.Join(dir, FileName(0))
	os.Truncate(path, cs[0].Pos+cs[0].Size()-10) // the last chunk torn inside its padding
	_, rec := openDir(t, dir, 1<<20)
	if len(rec) != 1 || rec[0].Damage != nil || !rec[0].Sealed || rec[0].DataLen != cs[0].Pos || len(rec[0].Chunks) != 1 {
		t.Fatalf("recovered %+v; want the torn batch cut at byte %d and one chunk kept", rec, cs[0].Pos)
	}
}

// powerLossFile writes batches of many chunks (each a few pages), every
// one committed with an fsync, the last one too, and leaves the file
// unsealed. It returns the file's bytes, where each batch starts and what
// each shard got from the batches before the last.
func powerLossFile(t *testing.T, dir string, batches int) ([]byte, []int64, map[uint64]*shardLog) {
	t.Helper()
	d, _ := openDir(t, dir, 1<<30)
	w := d.NewWriter()
	logs := map[uint64]*shardLog{}
	var starts []int64
	var dst []Chunk
	for b := 0; b < batches; b++ {
		starts = append(starts, w.Next().Pos)
		added := map[uint64][]record.Record{}
		for s := uint64(0); s < 12; s++ {
			l := logs[s]
			if l == nil {
				l = &shardLog{}
				logs[s] = l
			}
			recs := testRecords(uint64(len(l.recs)+len(added[s])), 3, fmt.Sprintf("b%d-s%d-%s", b, s, strings.Repeat("x", 90)))
			var err error
			if dst, err = w.Add(dst[:0], s, recs); err != nil {
				t.Fatal(err)
			}
			if b < batches-1 {
				for _, c := range dst {
					l.chunks = append(l.chunks, c.Ref)
				}
				l.recs = append(l.recs, recs...)
			}
		}
		if _, err := w.Commit(true); err != nil {
			t.Fatal(err)
		}
	}
	w.f.wf.Close()
	d.Close()
	b, err := os.ReadFile(filepath.Join(dir, FileName(0)))
	if err != nil {
		t.Fatal(err)
	}
	return b, append(starts, int64(len(b))), logs
}

// Power loss after the last batch's write and before its fsync returned
// may keep any of the pages that write touched and lose others (zeros, or
// garbage), later pages kept while earlier ones are lost. Every such state
// is a torn last batch: recovery cuts exactly that batch, every record of
// the earlier (synced, acknowledged) batches reads back, and the file
// takes writes. Damage in an earlier batch, with a committed batch after
// it, is kept and reported whatever state the last batch is in.
func TestPowerLossCutsOnlyTheLastBatch(t *testing.T) {
	const page = 4096
	const batches = 4
	pristine, starts, logs := powerLossFile(t, t.TempDir(), batches)
	last, size := starts[batches-1], starts[batches]
	firstPage, lastPage := last/page, (size-1)/page
	if lastPage-firstPage < 2 {
		t.Fatalf("the last batch spans pages %d to %d; the test needs at least 3", firstPage, lastPage)
	}
	// lose sets the bytes of the last write on page p to what a lost page
	// reads as.
	lose := func(b []byte, p int64, garbage bool) {
		for i := max(p*page, last); i < min((p+1)*page, size); i++ {
			b[i] = 0
			if garbage {
				b[i] = byte(i*131 + 7)
			}
		}
	}
	check := func(t *testing.T, dir string, file []byte) Recovered {
		t.Helper()
		os.WriteFile(filepath.Join(dir, FileName(0)), file, 0o644)
		d, rec := openDir(t, dir, 1<<30)
		if len(rec) != 1 {
			t.Fatalf("%d files recovered", len(rec))
		}
		r := rec[0]
		for s, l := range logs {
			zero := uint64(0)
			var mine []Ref
			for _, c := range r.Chunks {
				if c.Shard == s {
					mine = append(mine, c.Ref)
				}
			}
			got, _, err := readShard(d, s, mine, &zero)
			if err != nil || !reflect.DeepEqual(got, l.recs) {
				t.Fatalf("shard %d: read %d records (%v); %d were acknowledged", s, len(got), err, len(l.recs))
			}
		}
		return r
	}
	n := 0
	for mask := 1; mask < 1<<(lastPage-firstPage+1); mask++ {
		for _, garbage := range []bool{false, true} {
			b := append([]byte(nil), pristine...)
			for p := firstPage; p <= lastPage; p++ {
				if mask&(1<<(p-firstPage)) != 0 {
					lose(b, p, garbage)
				}
			}
			t.Run(fmt.Sprintf("pages lost %b, garbage %t", mask, garbage), func(t *testing.T) {
				dir := t.TempDir()
				r := check(t, dir, b)
				if r.Damage != nil || !r.Sealed || r.DataLen != last || r.Cut != size-last {
					t.Fatalf("recovered %+v; want the last batch (bytes %d to %d) cut, the file sealed", r, last, size)
				}
				d, _ := openDir(t, dir, 1<<30)
				w := d.NewWriter()
				if _, err := w.Add(nil, 3, testRecords(uint64(len(logs[3].recs)), 1, "after")); err != nil {
					t.Fatal(err)
				}
				if _, err := w.Commit(true); err != nil {
					t.Fatalf("a write after recovery: %v", err)
				}
			})
			n++
		}
	}
	// The file's size may also stop at a page boundary of the last write.
	for p := firstPage + 1; p <= lastPage; p++ {
		t.Run(fmt.Sprintf("cut at page %d", p), func(t *testing.T) {
			r := check(t, t.TempDir(), pristine[:p*page])
			if r.Damage != nil || r.DataLen != last {
				t.Fatalf("recovered %+v; want the last batch cut at %d", r, last)
			}
		})
	}
	// Damage in a synced batch: kept, reported, nothing cut, whatever the
	// last batch's state (while a committed batch lies between them).
	for b := 0; b < batches-1; b++ {
		for _, tornLast := range []bool{false, true} {
			if tornLast && b == batches-2 {
				continue // no committed batch after it: indistinguishable from a torn tail
			}
			t.Run(fmt.Sprintf("batch %d damaged, last batch torn %t", b, tornLast), func(t *testing.T) {
				file := append([]byte(nil), pristine...)
				at := starts[b] + (starts[b+1]-starts[b])/2
				for i := at; i < at+100; i++ {
					file[i] = 0
				}
				if tornLast {
					lose(file, firstPage, false)
				}
				dir := t.TempDir()
				os.WriteFile(filepath.Join(dir, FileName(0)), file, 0o644)
				_, rec := openDir(t, dir, 1<<30)
				if len(rec) != 1 || rec[0].Damage == nil || rec[0].Damage.Torn || rec[0].Sealed || rec[0].Cut != 0 {
					t.Fatalf("recovered %+v; want damage inside reported, nothing cut", rec)
				}
				if d := rec[0].Damage; d.Pos < starts[b] || d.Pos > at || d.NextValid != starts[b+1] {
					t.Fatalf("damage at %d, next valid %d; want in batch %d (bytes %d to %d), the next batch at %d", d.Pos, d.NextValid, b, starts[b], at, starts[b+1])
				}
				after, _ := os.ReadFile(filepath.Join(dir, FileName(0)))
				if !bytes.Equal(after, file) {
					t.Fatal("the damaged file was changed")
				}
			})
		}
	}
}

// Past damage inside, the scan goes on batch by batch, past further
// damage too: the chunks there are listed and readable, every damage is
// reported, and the damaged file can be removed once nothing needs it.
func TestRecoveryReadsPastEveryDamage(t *testing.T) {
	dir := t.TempDir()
	path, cs := unsealedFile(t, dir)
	b, _ := os.ReadFile(path)
	b[cs[1].Pos+HeaderSize+7] ^= 1
	b[cs[3].Pos+3] ^= 1
	os.WriteFile(path, b, 0o644)
	d, rec := openDir(t, dir, 1<<20)
	if len(rec) != 1 {
		t.Fatalf("%d files recovered", len(rec))
	}
	r := rec[0]
	if !reflect.DeepEqual(r.Chunks, cs[:1]) || !reflect.DeepEqual(r.After, []Chunk{cs[2], cs[4]}) {
		t.Fatalf("chunks %+v before the damage and %+v after; want the first, then the third and fifth", r.Chunks, r.After)
	}
	if len(r.Damages) != 2 || r.Damages[0].Pos != cs[1].Pos || r.Damages[1].Pos != cs[3].Pos || r.Damages[1].NextValid != cs[4].Pos {
		t.Fatalf("damages %v; want at bytes %d and %d", r.Damages, cs[1].Pos, cs[3].Pos)
	}
	for _, c := range append(r.Chunks, r.After...) {
		if err := d.ReadChunk(c.Ref, &c.Shard, func(Header, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.ReadChunk(cs[1].Ref, nil, func(Header, []byte) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading the damaged chunk: %v", err)
	}
	if fs := d.Files(); len(fs) != 1 || !fs[0].Damaged || fs[0].Sealed {
		t.Fatalf("files %+v; want one, damaged", fs)
	}
	if err := d.Remove(0); err != nil {
		t.Fatalf("removing the damaged file: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the damaged file is still there: %v", err)
	}
}
