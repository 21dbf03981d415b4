package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"strata/engine/record"
	"strata/engine/sharedfile"
	"strata/engine/store"
	"strata/engine/store/storetest"

	"github.com/cockroachdb/pebble"
)

// crashedCopy copies an open engine's folder as a crash leaves it (the
// writer's shared file unsealed), closes the engine, and returns the copy,
// without its index when lose is set (recovery then reads the files).
func crashedCopy(t *testing.T, e *Engine, dir string, lose bool) string {
	t.Helper()
	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	e.Close()
	os.Remove(filepath.Join(crashed, "LOCK"))
	if lose {
		os.RemoveAll(filepath.Join(crashed, "index"))
	}
	return crashed
}

// unsynced makes a crashed copy's marks say that shared file path was on
// disk only up to byte pos: the crash came after the write of the batch
// at pos and before the mark that follows its fsync, so nothing of it was
// acknowledged, in the world a power loss leaves. (The copy, taken while
// the engine ran, has that mark.) The earlier version's index key is set
// too, where the copy has its index.
func unsynced(t *testing.T, crashed, path string, pos int64) {
	t.Helper()
	no, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".msg"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	marks := filepath.Join(crashed, "shared", syncedFile)
	if b, err := os.ReadFile(marks); err == nil {
		for at := 0; at+sharedMarkSize <= len(b); at += sharedMarkSize {
			s := b[at : at+sharedMarkSize]
			if binary.BigEndian.Uint64(s) == no {
				binary.BigEndian.PutUint64(s[8:], uint64(pos))
				binary.BigEndian.PutUint32(s[16:], crc32.Checksum(s[:16], castagnoli))
			}
		}
		if err := os.WriteFile(marks, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx := filepath.Join(crashed, "index")
	if _, err := os.Stat(idx); err != nil {
		return
	}
	db, err := pebble.Open(idx, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Set(sharedSyncedKey(no), binary.BigEndian.AppendUint64(nil, uint64(pos)), pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// onlySharedFile scans the one shared file of a folder.
func onlySharedFile(t *testing.T, dir string) (string, sharedfile.ScanResult) {
	t.Helper()
	files := msgFiles(t, filepath.Join(dir, "shared"))
	if len(files) != 1 {
		t.Fatalf("%d shared files, want 1", len(files))
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	return files[0], sharedfile.Scan(1, files[0], f, st.Size())
}

func damageFile(t *testing.T, path string, at int64, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n), at); err != nil {
		t.Fatal(err)
	}
}

// Power loss tears the last batch's write, a batch of two shards' chunks:
// the first chunk's bytes lost, the second chunk and the commit record (a
// later page) kept. That batch was never acknowledged: a start cuts it
// whole, every earlier record reads back, and every shard of the file
// takes writes. (Without commit records, the whole chunk after the lost
// bytes made it damage inside and both shards refused writes for good.)
func TestSharedTornLastBatchIsCut(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "index kept", true: "index lost"}[lose], func(t *testing.T) {
			dir := t.TempDir()
			cfg := sharedConfig(dir)
			cfg.Workers = 1
			e := open(t, cfg)
			shards := []string{"a-0", "b-0"}
			for _, s := range shards {
				if err := e.CreateShard(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			// Appends to both shards at once until the worker has put both
			// in its last batch (one write, one fsync). Several appenders
			// per shard keep the worker's queue full whatever the timing.
			sids := map[uint64]string{}
			for _, s := range shards {
				sids[e.shards[s].files.(*sharedFiles).id] = s
			}
			var last []sharedfile.Chunk
			for round := 0; ; round++ {
				if round == 200 {
					t.Fatal("200 rounds of appends to two shards at once never made a batch of both")
				}
				var wg sync.WaitGroup
				errs := make([]error, 4*len(shards))
				for i := range errs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, errs[i] = e.Append(ctx, shards[i%len(shards)], storetest.Records(5, round))
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				b, err := os.ReadFile(msgFiles(t, filepath.Join(dir, "shared"))[0])
				if err != nil {
					t.Fatal(err)
				}
				c, err := sharedfile.ParseCommit(b[len(b)-sharedfile.HeaderSize:])
				if err != nil {
					t.Fatal(err)
				}
				// A batch has a chunk per append: it may hold two of one shard.
				res := sharedfile.Scan(1, "", bytes.NewReader(b), int64(len(b)))
				last = res.Chunks[len(res.Chunks)-int(c.Chunks):]
				if of := shardsOf(last, sids); len(of) == 2 {
					break
				}
			}
			crashed := crashedCopy(t, e, dir, lose)
			path, res := onlySharedFile(t, crashed)
			n := len(res.Chunks)
			if res.Err != nil || n < len(last) {
				t.Fatalf("the crashed file: %d chunks, %v", n, res.Err)
			}
			// Each shard's first chunk in the last batch starts where its
			// records acknowledged before that batch end.
			want := shardsOf(last, sids)
			unsynced(t, crashed, path, res.Chunks[n-len(last)].Pos)
			damageFile(t, path, res.Chunks[n-len(last)].Pos, 40) // the last batch's first chunk
			cfg.Dir = crashed
			e = open(t, cfg)
			defer e.Close()
			if n := e.Stats().Damaged.Load(); n != 0 {
				t.Fatalf("%d shards counted damaged; want none", n)
			}
			for _, s := range shards {
				want := want[s]
				if got := len(readAll(t, e, s, 0)); got != want {
					t.Fatalf("%s reads %d records; want the %d acknowledged before the torn batch", s, got, want)
				}
				off, err := e.Append(ctx, s, storetest.Records(1, 99))
				if err != nil || off != uint64(want) {
					t.Fatalf("%s: append after the restart at offset %d, %v; want it taken at %d", s, off, err, want)
				}
			}
		})
	}
}

// shardsOf maps the shards of chunks to the first offset of their first
// chunk.
func shardsOf(chunks []sharedfile.Chunk, names map[uint64]string) map[string]int {
	first := map[string]int{}
	for _, c := range chunks {
		if _, ok := first[names[c.Shard]]; !ok {
			first[names[c.Shard]] = int(c.First)
		}
	}
	return first
}

// Damage in a synced batch of a shared file, with committed batches after
// it: the shard with records in the damage serves what comes before it and
// refuses writes, naming the repair; a shard whose log goes on past the
// damage takes writes; a shard quiet since before the damage may have
// had records in it and is refused too. Open succeeds. A repair ends the
// shard's log at the damage for good: it takes writes, also after a
// restart.
func TestSharedDamageInsideRefusesOnlyShardsItMayHold(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "index kept", true: "index lost"}[lose], func(t *testing.T) {
			dir := t.TempDir()
			cfg := sharedConfig(dir)
			cfg.Workers = 1
			e := open(t, cfg)
			for _, s := range []string{"a-0", "b-0", "c-0"} {
				if err := e.CreateShard(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.Append(ctx, "c-0", storetest.Records(3, 50)); err != nil {
				t.Fatal(err)
			}
			for i := range 6 {
				for _, s := range []string{"a-0", "b-0"} {
					if _, err := e.Append(ctx, s, storetest.Records(5, i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			crashed := crashedCopy(t, e, dir, lose)
			path, res := onlySharedFile(t, crashed)
			if res.Err != nil || len(res.Chunks) != 13 {
				t.Fatalf("the crashed file: %d chunks, %v", len(res.Chunks), res.Err)
			}
			// a's second chunk (offsets 5 to 9): record bytes, not the header.
			hit := res.Chunks[3]
			if hit.First != 5 {
				t.Fatalf("chunk 3 holds offsets from %d", hit.First)
			}
			damageFile(t, path, hit.Pos+sharedfile.HeaderSize+30, 8)
			cfg.Dir = crashed
			e = open(t, cfg)
			wantRefused := func(s string, end uint64) {
				t.Helper()
				_, err := e.Append(ctx, s, storetest.Records(1, 99))
				var de *SharedDamagedError
				if !errors.As(err, &de) || !strings.Contains(err.Error(), "strata segment repair --shard "+s) || de.LogEnd != end {
					t.Fatalf("append to %s: %v; want it refused with its log ending at %d, naming the repair", s, err, end)
				}
				if got := len(readAll(t, e, s, 0)); got != int(end) {
					t.Fatalf("%s reads %d records; want the %d before the damage", s, got, end)
				}
			}
			wantRefused("a-0", 5)
			wantRefused("c-0", 3)
			if off, err := e.Append(ctx, "b-0", storetest.Records(1, 99)); err != nil || off != 30 {
				t.Fatalf("append to b-0, whose log goes on past the damage: offset %d, %v", off, err)
			}
			if n := e.Stats().Damaged.Load(); n != 2 {
				t.Fatalf("%d shards counted damaged; want 2", n)
			}
			if err := e.Repair(ctx, "b-0"); err == nil || !strings.Contains(err.Error(), "no damaged") {
				t.Fatalf("repairing an undamaged shard: %v", err)
			}
			if err := e.Repair(ctx, "a-0"); err != nil {
				t.Fatal(err)
			}
			if off, err := e.Append(ctx, "a-0", storetest.Records(2, 98)); err != nil || off != 5 {
				t.Fatalf("append to a-0 after its repair: offset %d, %v; want 5", off, err)
			}
			e.Close()
			e = open(t, cfg)
			defer e.Close()
			if off, err := e.Append(ctx, "a-0", storetest.Records(1, 97)); err != nil || off != 7 {
				t.Fatalf("append to a-0 after a restart: offset %d, %v; want 7 (repaired, not refused again)", off, err)
			}
			if got := readAll(t, e, "a-0", 0); len(got) != 8 || string(got[5].Value) != string(storetest.Records(2, 98)[0].Value) {
				t.Fatalf("a-0 reads %d records; want its 5 from before the damage and 3 written since", len(got))
			}
			if got := len(readAll(t, e, "b-0", 0)); got != 31 {
				t.Fatalf("b-0 reads %d records; want 31", got)
			}
			wantRefused("c-0", 3)
			if err := e.Repair(ctx, "c-0"); err != nil {
				t.Fatal(err)
			}
			if off, err := e.Append(ctx, "c-0", storetest.Records(1, 96)); err != nil || off != 3 {
				t.Fatalf("append to c-0 after its repair: offset %d, %v", off, err)
			}
		})
	}
}

// The offline tools read a shared shard from the shared files: verify
// counts the records of its log (a truncation's dead records not among
// them) file by file, dump prints them in offset order, and damage in a
// shared file it has chunks in is reported.
func TestVerifyAndDumpSharedShard(t *testing.T) {
	dir := t.TempDir()
	cfg := sharedConfig(dir)
	cfg.Workers, cfg.SharedFileBytes = 1, 2048
	e := open(t, cfg)
	for _, s := range []string{"x-0", "y-0"} {
		if err := e.CreateShard(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetHighWatermark(ctx, "x-0", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, "x-0", storetest.Records(10, 1)); err != nil {
		t.Fatal(err)
	}
	if err := e.TruncateTo(ctx, "x-0", 6); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := e.Append(ctx, "y-0", storetest.Records(3, 10+i)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Append(ctx, "x-0", storetest.Records(2, 20+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetHighWatermark(ctx, "x-0", 22); err != nil {
		t.Fatal(err)
	}
	want := readAll(t, e, "x-0", 0) // 6 + 16
	e.Close()
	if len(want) != 22 {
		t.Fatalf("x-0 holds %d records", len(want))
	}
	reports, err := VerifyShared(dir, "x-0")
	if err != nil {
		t.Fatal(err)
	}
	total, next := 0, uint64(0)
	for _, r := range reports {
		if r.Problem != nil || r.FirstOffset != next {
			t.Fatalf("report %+v after offset %d", r, next)
		}
		total += r.Records
		next = r.LastOffset + 1
	}
	if total != 22 || len(reports) < 2 {
		t.Fatalf("verify found %d records in %d files; want 22 across several", total, len(reports))
	}
	var out strings.Builder
	if err := DumpShared(dir, "x-0", &out); err != nil {
		t.Fatal(err)
	}
	var offs []string
	for _, l := range strings.Split(out.String(), "\n") {
		if f, ok := strings.CutPrefix(l, "offset="); ok {
			offs = append(offs, strings.Fields(f)[0])
		}
	}
	if len(offs) != 22 {
		t.Fatalf("dump printed offsets %v; want 0 to 21", offs)
	}
	for i, o := range offs {
		if o != fmt.Sprint(i) {
			t.Fatalf("dump printed offsets %v; want 0 to 21, the truncated ones once", offs)
		}
	}
	if !strings.Contains(out.String(), strconv.Quote(string(want[21].Value))) {
		t.Fatalf("dump does not show the last record's value %q", want[21].Value)
	}
	if _, err := VerifyShared(dir, "nope-0"); err == nil || !strings.Contains(err.Error(), "no shard") {
		t.Fatalf("verify of an unknown shard: %v", err)
	}
	if d, s, ok := SharedShardDir(filepath.Join(dir, "x-0")); !ok || d != filepath.Clean(dir) || s != "x-0" {
		t.Fatalf("SharedShardDir: %s %s %t", d, s, ok)
	}
	// Damage a record of a chunk of y-0 in the first file: x-0's report of
	// that file says so.
	first := msgFiles(t, filepath.Join(dir, "shared"))[0]
	os.Chmod(first, 0o644)
	chunks, err := chunkPositions(first)
	if err != nil || len(chunks) < 3 {
		t.Fatalf("chunks %v, %v", chunks, err)
	}
	damageFile(t, first, chunks[2]+sharedfile.HeaderSize+20, 4)
	reports, err = VerifyShared(dir, "x-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) == 0 || reports[0].Path != first || reports[0].Problem == nil {
		t.Fatalf("reports %+v; want the first file's damage", reports)
	}
	out.Reset()
	if err := DumpSharedFile(first, &out); err == nil || !strings.Contains(out.String(), "# chunk at byte 0: shard id") {
		t.Fatalf("dump of a damaged shared file: %v\n%s", err, out.String())
	}
}

// Power loss at a random moment of a loaded engine: 8 shards on 2
// workers (two files), appending at once. Each file's last batch is torn
// as power loss may leave it (a random subset of its pages lost, later
// ones kept); after a start, every shard holds exactly its records
// outside those batches, byte for byte, no shard is refused, and each
// takes appends where its log ends. With the index kept and lost.
func TestSharedPowerLossKeepsEverySyncedRecord(t *testing.T) {
	const page = 4096
	for round := 0; round < 8; round++ {
		lose := round%4 >= 2
		t.Run(fmt.Sprintf("round %d, index lost %t", round, lose), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(round), 7))
			dir := t.TempDir()
			cfg := sharedConfig(dir)
			cfg.Workers = 2
			e := open(t, cfg)
			shards := make([]string, 8)
			for i := range shards {
				shards[i] = fmt.Sprintf("p-%d", i)
				if err := e.CreateShard(ctx, shards[i]); err != nil {
					t.Fatal(err)
				}
				if err := e.SetHighWatermark(ctx, shards[i], 0); err != nil {
					t.Fatal(err)
				}
			}
			// Rounds of appends to every shard at once, until each file's
			// last batch holds chunks of several shards.
			for k := 0; ; k++ {
				if k == 200 {
					t.Fatal("200 rounds never left each file's last batch with several chunks")
				}
				var wg sync.WaitGroup
				for i, s := range shards {
					wg.Add(1)
					go func() {
						defer wg.Done()
						recs := storetest.Records(1+(k+i)%4, 100*i+k)
						for j := range recs {
							// About a page per record: a batch spans pages.
							recs[j].Value = append(recs[j].Value, bytes.Repeat([]byte{byte(j)}, 3000)...)
						}
						if _, err := e.Append(ctx, s, recs); err != nil {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
				if t.Failed() {
					t.FailNow()
				}
				several := k >= 10
				for _, path := range msgFiles(t, filepath.Join(dir, "shared")) {
					b, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					c, err := sharedfile.ParseCommit(b[len(b)-sharedfile.HeaderSize:])
					several = several && err == nil && c.Chunks >= 2
				}
				if several {
					break
				}
			}
			want := map[string][]string{}
			for _, s := range shards {
				want[s] = normalize(readUncommitted(t, e, s))
			}
			crashed := crashedCopy(t, e, dir, lose)
			// Tear each file's last batch; what it held of each shard is
			// lost (never acknowledged, in the world power loss leaves).
			ids := map[uint64]string{}
			for _, s := range shards {
				ids[shardID(t, crashed, s)] = s
			}
			lost := map[string]uint64{} // a shard's log end after the loss
			for _, path := range msgFiles(t, filepath.Join(crashed, "shared")) {
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				st, _ := f.Stat()
				res := sharedfile.Scan(0, path, f, st.Size())
				f.Close()
				if res.Err != nil || res.Sealed != nil || res.End != st.Size() {
					t.Fatalf("%s before the loss: %+v", path, res)
				}
				b, _ := os.ReadFile(path)
				c, err := sharedfile.ParseCommit(b[len(b)-sharedfile.HeaderSize:])
				if err != nil {
					t.Fatal(err)
				}
				from := int64(len(b)) - sharedfile.HeaderSize - int64(c.Length)
				unsynced(t, crashed, path, from)
				for _, ch := range res.Chunks {
					if ch.Pos >= from {
						if s := ids[ch.Shard]; lost[s] == 0 || ch.First < lost[s] {
							lost[s] = ch.First
						}
					}
				}
				first, last := from/page, (int64(len(b))-1)/page
				// A non-empty subset of its pages; every other round only
				// the first, the rest kept (whole chunks after the loss).
				mask := 1 + rng.IntN(1<<(last-first+1)-1)
				if round%2 == 0 {
					mask = 1
				}
				for p := first; p <= last; p++ {
					if mask&(1<<(p-first)) != 0 {
						for i := max(p*page, from); i < min((p+1)*page, int64(len(b))); i++ {
							b[i] = 0
						}
					}
				}
				os.WriteFile(path, b, 0o644)
			}
			if files := msgFiles(t, filepath.Join(crashed, "shared")); len(files) != 2 || len(lost) == 0 {
				t.Fatalf("%d shared files, %d shards with records in their last batches; want 2 and some", len(files), len(lost))
			}
			cfg.Dir = crashed
			e = open(t, cfg)
			defer e.Close()
			if n := e.Stats().Damaged.Load(); n != 0 {
				t.Fatalf("%d shards refused after a torn last batch", n)
			}
			for _, s := range shards {
				w := want[s]
				if end, ok := lost[s]; ok {
					w = w[:end]
				}
				if got := normalize(readUncommitted(t, e, s)); !reflect.DeepEqual(got, w) {
					t.Fatalf("%s: read %d records, want the %d outside the torn batches", s, len(got), len(w))
				}
				if off, err := e.Append(ctx, s, storetest.Records(1, 999)); err != nil || off != uint64(len(w)) {
					t.Fatalf("%s: append after the loss at %d, %v; want %d", s, off, err, len(w))
				}
			}
		})
	}
}

// readUncommitted reads a shard's whole log, past its high watermark.
func readUncommitted(t *testing.T, e *Engine, shard string) []record.Record {
	t.Helper()
	recs, err := e.ReadToLogEnd(ctx, shard, 0, store.Budget{})
	if err != nil {
		t.Fatalf("read %s: %v", shard, err)
	}
	return recs
}

// shardID is a shared shard's id, from the manifest of a closed folder.
func shardID(t *testing.T, dir, shard string) uint64 {
	t.Helper()
	man, err := pebble.Open(filepath.Join(dir, "manifest"), &pebble.Options{ReadOnly: true, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer man.Close()
	metas, err := loadShards(man)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metas {
		if m.Name == shard {
			return m.ID
		}
	}
	t.Fatalf("no shard %s in the manifest", shard)
	return 0
}

// Damage in a chunk of a shard's sealed segment (its active segment
// starts past it): Open succeeds, the shard refuses writes with its log
// end where the manifest has it, the other shard of the file takes
// writes, and a repair lets the shard append at that end.
func TestSharedDamageInASealedSegment(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "index kept", true: "index lost"}[lose], func(t *testing.T) {
			dir := t.TempDir()
			cfg := sharedConfig(dir)
			cfg.Workers, cfg.MaxSegmentBytes, cfg.RollCheckInterval, cfg.SharedFileBytes = 1, 1500, 1, 1<<20
			e := open(t, cfg)
			for _, s := range []string{"a-0", "b-0"} {
				if err := e.CreateShard(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 12 {
				for _, s := range []string{"a-0", "b-0"} {
					if _, err := e.Append(ctx, s, storetest.Records(5, i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			segs, err := e.Segments("a-0")
			if err != nil || len(segs) < 3 || segs[0].EndOffset < 9 {
				t.Fatalf("a-0's segments %+v, %v; want several, the first holding offsets 5 to 9", segs, err)
			}
			active := segs[len(segs)-1].StartOffset
			crashed := crashedCopy(t, e, dir, lose)
			path, res := onlySharedFile(t, crashed)
			hit := res.Chunks[2] // a's second: offsets 5 to 9, in its first (sealed) segment
			if hit.First != 5 {
				t.Fatalf("chunk 2 holds offsets from %d", hit.First)
			}
			damageFile(t, path, hit.Pos+sharedfile.HeaderSize+30, 8)
			cfg.Dir = crashed
			e = open(t, cfg)
			defer e.Close()
			_, err = e.Append(ctx, "a-0", storetest.Records(1, 99))
			var de *SharedDamagedError
			if !errors.As(err, &de) || de.LogEnd != 5 {
				t.Fatalf("append to a-0: %v; want it refused, its log as read ending at 5", err)
			}
			if off, err := e.Append(ctx, "b-0", storetest.Records(1, 99)); err != nil || off != 60 {
				t.Fatalf("append to b-0: offset %d, %v; want 60", off, err)
			}
			// Reads serve what comes before the damage and fail at it (no
			// empty read a consumer would wait on).
			if recs, err := e.Read(ctx, "a-0", 0, store.Budget{}); err != nil || len(recs) != 5 {
				t.Fatalf("read a-0 from 0: %d records, %v; want the 5 before the damage", len(recs), err)
			}
			if _, err := e.Read(ctx, "a-0", 5, store.Budget{}); !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("read a-0 at the damage: %v; want an error wrapping record.ErrCorrupt", err)
			}
			if err := e.Repair(ctx, "a-0"); err != nil {
				t.Fatal(err)
			}
			if off, err := e.Append(ctx, "a-0", storetest.Records(1, 98)); err != nil || off != active {
				t.Fatalf("append to a-0 after its repair: offset %d, %v; want %d, its active segment's start", off, err, active)
			}
		})
	}
}
