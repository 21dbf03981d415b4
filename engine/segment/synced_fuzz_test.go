package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
)

// FuzzSyncedMarkFiles reads any bytes as a mark file and as the shared
// files' marks: neither panics, a mark that checks out is one encodeMark
// wrote, and a shared slot is only found when its bytes check out.
func FuzzSyncedMarkFiles(f *testing.F) {
	f.Add(encodeMark(nil, syncedMark{created: 1, seg: 2, pos: 3, next: 4}), uint64(2))
	f.Add(make([]byte, markSize), uint64(0))
	f.Add([]byte{1, 2, 3}, uint64(1))
	f.Fuzz(func(t *testing.T, b []byte, no uint64) {
		if m, ok := decodeMark(b); ok {
			if m.pos < 0 {
				t.Fatalf("a mark at byte %d checked out", m.pos)
			}
			if again := encodeMark(nil, m); !bytes.Equal(again, b[:markSize]) {
				t.Fatalf("decoded %+v from %x, which encodes as %x", m, b[:markSize], again)
			}
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, syncedFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if pos, ok, _ := readSharedMark(vfs.Default, dir, no); ok && pos < 0 {
			t.Fatalf("shared file %d's mark at byte %d", no, pos)
		}
		if _, _, err := readMarkFile(vfs.Default, dir); err != nil {
			t.Fatal(err)
		}
	})
}
