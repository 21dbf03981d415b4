package segment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// manifestLocalBytes is LocalBytes as the manifest says it: its sealed
// segments' sizes and the active segment's durable length.
func manifestLocalBytes(t *testing.T, e *Engine, name string) int64 {
	t.Helper()
	segs, err := e.Segments(name)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range segs {
		switch s.State {
		case SegmentSealed:
			n += s.Size
		case SegmentActive:
			b, err := e.ActiveBytes(name)
			if err != nil {
				t.Fatal(err)
			}
			n += b
		}
	}
	return n
}

// filesBytes is the bytes of a shard's segment files in its folder.
func filesBytes(t *testing.T, e *Engine, name string) int64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(e.cfg.Dir, name))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, ent := range ents {
		if !strings.HasSuffix(ent.Name(), ".msg") {
			continue
		}
		fi, err := ent.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// LocalBytes, kept from the shard's segments in memory, stays what the
// manifest says (and, a file per partition, what the segment files hold)
// through appends, rolls, tiering's drops, retention, truncation and a
// restart, in both file models.
func TestLocalBytesFollowsTheManifest(t *testing.T) {
	for _, model := range []string{"", ModelShared} {
		t.Run("model="+model, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
			if model == ModelShared {
				cfg.FileModel = func(string) string { return ModelShared }
			}
			e := open(t, cfg)
			const name = "lb-0"
			check := func(step string, wantSome bool) {
				t.Helper()
				got, err := e.LocalBytes(name)
				if err != nil {
					t.Fatalf("%s: LocalBytes: %v", step, err)
				}
				if want := manifestLocalBytes(t, e, name); got != want {
					t.Fatalf("%s: LocalBytes %d, the manifest says %d", step, got, want)
				}
				if model == "" {
					if files := filesBytes(t, e, name); got != files {
						t.Fatalf("%s: LocalBytes %d, the segment files hold %d", step, got, files)
					}
				}
				if wantSome != (got > 0) {
					t.Fatalf("%s: LocalBytes %d", step, got)
				}
			}
			if err := e.CreateShard(ctx, name); err != nil {
				t.Fatal(err)
			}
			check("created", false)
			fill(t, e, name, 3)
			check("three records, no roll", true)
			fill(t, e, name, 100)
			segs, _ := e.Segments(name)
			if len(segs) < 4 {
				t.Fatalf("%d segments; the test needs several sealed", len(segs))
			}
			check("rolled", true)

			if err := e.DropLocal(ctx, name, segs[0].No); err != nil { // tiered
				t.Fatal(err)
			}
			check("oldest segment dropped after tiering", true)

			if _, err := e.ApplyRetention(ctx, RetentionPolicy{MaxBytes: segs[len(segs)-2].Size}, nil); err != nil {
				t.Fatal(err)
			}
			if after, _ := e.Segments(name); len(after) >= len(segs) {
				t.Fatalf("retention dropped nothing: %d segments", len(after))
			}
			check("retention", true)

			// Records past a managed high watermark, in the active segment,
			// as a follower has them before a truncation.
			_, high, _ := e.Watermarks(ctx, name)
			if err := e.SetHighWatermark(ctx, name, high); err != nil {
				t.Fatal(err)
			}
			fill(t, e, name, 4)
			before, _ := e.LocalBytes(name)
			if err := e.TruncateTo(ctx, name, high+1); err != nil {
				t.Fatal(err)
			}
			if after, _ := e.LocalBytes(name); after >= before {
				t.Fatalf("truncation of 3 records: LocalBytes %d, was %d", after, before)
			}
			check("truncated", true)

			e.Close()
			e = open(t, cfg)
			check("restarted", true)
			fill(t, e, name, 20)
			check("appended after the restart", true)
		})
	}
}
