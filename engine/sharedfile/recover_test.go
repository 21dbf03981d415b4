package sharedfile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// unsealedFile writes five committed chunks of shards 0..4 to a file that
// is left unsealed, as a writer's active file is at a crash, and returns
// its path and chunks.
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
	}
	if _, err := w.Commit(true); err != nil {
		t.Fatal(err)
	}
	w.f.wf.Close() // no trailer: the process "died" here
	d.Close()
	return filepath.Join(dir, FileName(0)), cs
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
		if no, _ := w.Active(); no != 4 {
			t.Fatalf("the next file is %d; want 4", no)
		}
	}
}

func TestRecovery(t *testing.T) {
	flip := func(at func(cs []Chunk) int64) func(*testing.T, string, []Chunk) {
		return func(t *testing.T, path string, cs []Chunk) {
			b, _ := os.ReadFile(path)
			b[at(cs)] ^= 0x08
			os.WriteFile(path, b, 0o644)
		}
	}
	appendBytes := func(extra func(cs []Chunk, file []byte) []byte) func(*testing.T, string, []Chunk) {
		return func(t *testing.T, path string, cs []Chunk) {
			b, _ := os.ReadFile(path)
			os.WriteFile(path, append(b, extra(cs, b)...), 0o644)
		}
	}
	seal := func(t *testing.T, path string) {
		d, _ := openDir(t, filepath.Dir(path), 1<<20)
		d.Close()
	}
	end := func(cs []Chunk) int64 { return cs[4].Pos + cs[4].Size() }
	cases := []struct {
		name   string
		damage func(*testing.T, string, []Chunk)
		chunks int  // whole chunks found
		cut    bool // the tail after them was cut
		inside bool // damage inside: left as it is
	}{
		{"clean, unsealed", func(*testing.T, string, []Chunk) {}, 5, false, false},
		{"torn header", appendBytes(func(cs []Chunk, b []byte) []byte { return b[cs[1].Pos : cs[1].Pos+10] }), 5, true, false},
		{"torn records", appendBytes(func(cs []Chunk, b []byte) []byte { return b[cs[1].Pos : cs[1].Pos+cs[1].Size()-5] }), 5, true, false},
		{"zeros from preallocation", appendBytes(func([]Chunk, []byte) []byte { return make([]byte, 4096) }), 5, true, false},
		{"last chunk's record damaged", flip(func(cs []Chunk) int64 { return end(cs) - 3 }), 4, true, false},
		{"last chunk's header damaged", flip(func(cs []Chunk) int64 { return cs[4].Pos + 13 }), 4, true, false},
		{"a middle chunk's record damaged, whole chunks after", flip(func(cs []Chunk) int64 { return cs[2].Pos + HeaderSize + 20 }), 2, false, true},
		{"a middle chunk's header damaged, whole chunks after", flip(func(cs []Chunk) int64 { return cs[1].Pos + 5 }), 1, false, true},
		{"sealed, then its trailer damaged", func(t *testing.T, path string, cs []Chunk) {
			seal(t, path)
			os.Chmod(path, 0o644)
			flip(func(cs []Chunk) int64 { return end(cs) + 10 })(t, path, cs)
			os.Chmod(path, 0o444) // as the seal left it
		}, 5, true, false},
		{"sealed, then bytes after the trailer", func(t *testing.T, path string, cs []Chunk) {
			seal(t, path)
			os.Chmod(path, 0o644)
			appendBytes(func([]Chunk, []byte) []byte { return []byte("stray") })(t, path, cs)
		}, 5, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path, cs := unsealedFile(t, dir)
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
			wantEnd := cs[tc.chunks-1].Pos + cs[tc.chunks-1].Size()
			after, _ := os.Stat(path)
			switch {
			case tc.inside:
				if r.Damage == nil || r.Damage.Pos != wantEnd || r.Damage.NextValid != cs[tc.chunks+1].Pos || !errors.Is(r.Damage, ErrCorrupt) {
					t.Fatalf("damage reported as %+v; want at byte %d, the next whole chunk at %d", r.Damage, wantEnd, cs[tc.chunks+1].Pos)
				}
				if r.Sealed || after.Size() != before.Size() || r.Cut != 0 {
					t.Fatalf("damage inside: sealed=%t, %d bytes of %d left, cut %d; want the file left as it was", r.Sealed, after.Size(), before.Size(), r.Cut)
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
	inner := chunkBytes(t, 2, testRecords(0, 1, "inner"))
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
		t.Fatalf("recovered %+v; want the torn chunk cut at byte %d and one chunk kept", rec, cs[0].Pos)
	}
}
