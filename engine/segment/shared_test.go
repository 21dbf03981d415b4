package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/sharedfile"
	"strata/engine/store"
	"strata/engine/store/storetest"
)

// modelConfig puts the topic "s" in the shared files and every other
// topic in files of its own.
func modelConfig(dir string) Config {
	cfg := testConfig(dir)
	cfg.MaxSegmentBytes, cfg.RollCheckInterval, cfg.SharedFileBytes = 8<<10, 10, 32<<10
	cfg.FileModel = func(topic string) string {
		if topic == "s" {
			return ModelShared
		}
		return "partition"
	}
	return cfg
}

func readAll(t *testing.T, e *Engine, shard string, from uint64) []record.Record {
	t.Helper()
	var out []record.Record
	for {
		recs, err := e.Read(ctx, shard, from, store.Budget{MaxRecords: 333})
		if err != nil {
			t.Fatalf("read %s at %d: %v", shard, from, err)
		}
		if len(recs) == 0 {
			return out
		}
		out = append(out, recs...)
		from = recs[len(recs)-1].Offset + 1
	}
}

func msgFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.msg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A shared topic's partitions write into the shared files, not files of
// their own, while a partition-model topic beside it keeps its own; both
// read back every record, also after a restart, and the shared
// partitions' segments (rolled by the same gates) have the same offsets,
// sizes and checksums as the same records' segment files.
func TestSharedShardsShareFiles(t *testing.T) {
	dir := t.TempDir()
	e := open(t, modelConfig(dir))
	shards := []string{"p-0"}
	for i := range 12 {
		shards = append(shards, fmt.Sprintf("s-%d", i))
	}
	for _, s := range shards {
		if err := e.CreateShard(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]record.Record{}
	sizes := map[string][]int{} // each shard's appends, to append the same again
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, s := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range 40 {
				recs := storetest.Records(1+b%7, i*100+b)
				base, err := e.Append(ctx, s, recs)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for j := range recs {
					recs[j].Offset = base + uint64(j)
				}
				want[s] = append(want[s], recs...)
				sizes[s] = append(sizes[s], len(recs))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	check := func(when string, e *Engine) {
		for _, s := range shards {
			got := readAll(t, e, s, 0)
			if !reflect.DeepEqual(normalize(got), normalize(want[s])) {
				t.Fatalf("%s: %s reads back %d records, want %d (or other bytes)", when, s, len(got), len(want[s]))
			}
			// The model the manifest records, as tiering and verify read it.
			m, err := e.Shard(s)
			if err != nil || (m.Model == ModelShared) != (s != "p-0") {
				t.Fatalf("%s: %s's file model %q, %v", when, s, m.Model, err)
			}
		}
	}
	check("before a restart", e)
	if n := len(msgFiles(t, filepath.Join(dir, "p-0"))); n == 0 {
		t.Errorf("the partition-model shard has no segment file")
	}
	for _, s := range shards[1:] {
		if m := msgFiles(t, filepath.Join(dir, s)); len(m) > 0 {
			t.Errorf("shared shard %s has files of its own: %v", s, m)
		}
	}
	if n := len(msgFiles(t, filepath.Join(dir, "shared"))); n < 2 {
		t.Errorf("%d shared files; want several (32 KiB each)", n)
	}

	// The same records in a partition-model engine give the same segments.
	ref := open(t, testConfig(t.TempDir()))
	cfg := modelConfig("")
	ref.cfg.MaxSegmentBytes, ref.cfg.RollCheckInterval = cfg.MaxSegmentBytes, cfg.RollCheckInterval
	defer ref.Close()
	s := shards[3]
	if err := ref.CreateShard(ctx, s); err != nil {
		t.Fatal(err)
	}
	for i, k := 0, 0; i < len(want[s]); k++ {
		n := sizes[s][k] // the same appends: a roll is checked before each
		recs := append([]record.Record(nil), want[s][i:i+n]...)
		if _, err := ref.Append(ctx, s, recs); err != nil {
			t.Fatal(err)
		}
		i += n
	}
	a, _ := e.Segments(s)
	b, _ := ref.Segments(s)
	sealed := 0
	for i := range min(len(a), len(b)) {
		if a[i].State != SegmentSealed || b[i].State != SegmentSealed {
			continue
		}
		sealed++
		if a[i].StartOffset != b[i].StartOffset || a[i].EndOffset != b[i].EndOffset || a[i].Records != b[i].Records ||
			a[i].Size != b[i].Size || a[i].Checksum != b[i].Checksum {
			t.Errorf("segment %d: shared %+v\npartition %+v", i, a[i], b[i])
		}
		crc, size, err := e.ScanSegment(s, a[i].No, nil)
		if err != nil || crc != a[i].Checksum || size != a[i].Size {
			t.Errorf("ScanSegment(%s, %d) = %08x, %d, %v; sealed with %08x, %d", s, a[i].No, crc, size, err, a[i].Checksum, a[i].Size)
		}
	}
	if sealed == 0 {
		t.Errorf("no sealed segment to compare: shared %+v", a)
	}
	if err := e.Scrub(ctx, s); err != nil {
		t.Errorf("scrub: %v", err)
	}

	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open(t, modelConfig(dir))
	check("after a restart", e)
	if !e.cleanStart {
		t.Errorf("a start after a clean Close read the shared files' chunk headers")
	}
	// Lost index: the chunk entries are rebuilt from the shared files.
	e.Close()
	if err := os.RemoveAll(filepath.Join(dir, "index")); err != nil {
		t.Fatal(err)
	}
	e = open(t, modelConfig(dir))
	defer e.Close()
	check("after the index was lost", e)
	if e.cleanStart {
		t.Errorf("a start that lost the index trusted the clean mark")
	}
	for _, s := range shards {
		base, err := e.Append(ctx, s, storetest.Records(3, 9999))
		if err != nil || base != uint64(len(want[s])) {
			t.Fatalf("append to %s after the restarts: base %d, %v; want %d", s, base, err, len(want[s]))
		}
	}
}

// normalize makes records comparable whatever slices were empty or nil.
func normalize(recs []record.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%d %d %q %q %v %v %q", r.Offset, r.Timestamp, r.Key, r.Value, r.Headers, r.Tags, r.ProtocolData)
	}
	return out
}

// A truncation of a shared shard is logical: the cut chunks stay in the
// shared files. Records appended after it take the cut offsets, and a
// restart, also one that lost every chunk entry and rebuilds them from the
// files, serves the new records there, never the cut ones.
func TestSharedTruncateSurvivesRestart(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("index lost %v", lose), func(t *testing.T) {
			dir := t.TempDir()
			e := open(t, sharedConfig(dir))
			if err := e.CreateShard(ctx, "x-0"); err != nil {
				t.Fatal(err)
			}
			if err := e.SetHighWatermark(ctx, "x-0", 0); err != nil { // a follower's
				t.Fatal(err)
			}
			if _, err := e.Append(ctx, "x-0", storetest.Records(10, 1)); err != nil {
				t.Fatal(err)
			}
			if err := e.SetHighWatermark(ctx, "x-0", 4); err != nil {
				t.Fatal(err)
			}
			// Cut inside the first chunk, then again after more appends.
			if err := e.TruncateTo(ctx, "x-0", 6); err != nil {
				t.Fatal(err)
			}
			if err := e.AppendAt(ctx, "x-0", at(storetest.Records(5, 2), 6)); err != nil {
				t.Fatal(err)
			}
			if err := e.TruncateTo(ctx, "x-0", 8); err != nil {
				t.Fatal(err)
			}
			if err := e.AppendAt(ctx, "x-0", at(storetest.Records(4, 3), 8)); err != nil {
				t.Fatal(err)
			}
			want := append(at(storetest.Records(10, 1), 0)[:6], at(storetest.Records(5, 2), 6)[:2]...)
			want = append(want, at(storetest.Records(4, 3), 8)...)
			check := func(when string) {
				got, err := e.ReadToLogEnd(ctx, "x-0", 0, store.Budget{})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(normalize(got), normalize(want)) {
					t.Fatalf("%s: read\n%v\nwant\n%v", when, normalize(got), normalize(want))
				}
			}
			check("before a restart")
			e.Close()
			if lose {
				os.RemoveAll(filepath.Join(dir, "index"))
			}
			e = open(t, sharedConfig(dir))
			defer e.Close()
			check("after a restart")
		})
	}
}

func at(recs []record.Record, base uint64) []record.Record {
	for i := range recs {
		recs[i].Offset = base + uint64(i)
	}
	return recs
}

// A shared file goes once no local segment holds it: retention, a
// tiered segment's DropLocal and a shard's deletion each free files, and
// the file numbers of removed files are never used again.
func TestSharedFilesRemovedWhenUnheld(t *testing.T) {
	dir := t.TempDir()
	cfg := sharedConfig(dir)
	cfg.MaxSegmentBytes, cfg.RollCheckInterval, cfg.SharedFileBytes = 4<<10, 5, 4<<10
	cfg.Workers = 1 // one writer: both shards' chunks in every file
	e := open(t, cfg)
	for _, s := range []string{"a-0", "b-0"} {
		if err := e.CreateShard(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for range 30 {
		for _, s := range []string{"a-0", "b-0"} {
			if _, err := e.Append(ctx, s, storetest.Records(10, 5)); err != nil {
				t.Fatal(err)
			}
		}
	}
	files := func() int { return len(msgFiles(t, filepath.Join(dir, "shared"))) }
	before := files()
	if before < 5 {
		t.Fatalf("%d shared files; want many", before)
	}
	// Dropping a's old segments frees nothing while b's segments hold the files.
	for {
		no, sealed, err := e.OldestLocal("a-0")
		if err != nil {
			t.Fatal(err)
		}
		if !sealed {
			break
		}
		if err := e.DropLocal(ctx, "a-0", no); err != nil {
			t.Fatal(err)
		}
	}
	if got := files(); got != before {
		t.Errorf("after a's segments left the disk: %d files, want the %d b still holds", got, before)
	}
	if _, err := e.Read(ctx, "b-0", 0, store.Budget{MaxRecords: 1}); err != nil {
		t.Fatalf("b after a's drops: %v", err)
	}
	if err := e.DeleteShard(ctx, "b-0"); err != nil {
		t.Fatal(err)
	}
	after := files()
	if after >= before/2 {
		t.Errorf("after b's deletion and a's drops: %d of %d files left", after, before)
	}
	got := readAll(t, e, "a-0", mustLow(t, e, "a-0"))
	if len(got) == 0 {
		t.Errorf("a's active segment reads nothing")
	}
	e.Close()
	e = open(t, cfg)
	defer e.Close()
	if err := e.CreateShard(ctx, "c-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, "c-0", storetest.Records(10, 6)); err != nil {
		t.Fatal(err)
	}
	if got2 := readAll(t, e, "a-0", mustLow(t, e, "a-0")); !reflect.DeepEqual(normalize(got2), normalize(got)) {
		t.Errorf("a after a restart reads %d records, before %d", len(got2), len(got))
	}
}

func mustLow(t *testing.T, e *Engine, shard string) uint64 {
	t.Helper()
	segs, err := e.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if s.State != SegmentRemote {
			return s.StartOffset
		}
	}
	t.Fatalf("%s has no local segment", shard)
	return 0
}

// A shared file damaged inside, with whole chunks after the damage (found
// unsealed at start, as after a crash): the shards that may have records
// after the damage serve what comes before it and refuse writes, rather
// than give acknowledged offsets to new records.
func TestSharedDamageInsideRefusesWrites(t *testing.T) {
	dir := t.TempDir()
	cfg := sharedConfig(dir)
	cfg.Workers = 1
	e := open(t, cfg)
	for _, s := range []string{"a-0", "b-0"} {
		if err := e.CreateShard(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		for _, s := range []string{"a-0", "b-0"} {
			if _, err := e.Append(ctx, s, storetest.Records(5, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A copy of the folder as a crash leaves it: the shared file unsealed.
	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	e.Close()
	os.Remove(filepath.Join(crashed, "LOCK"))
	os.RemoveAll(filepath.Join(crashed, "index")) // recovery must read the files
	files := msgFiles(t, filepath.Join(crashed, "shared"))
	if len(files) != 1 {
		t.Fatalf("%d shared files, want 1", len(files))
	}
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Inside the third chunk (a's second): a record byte, not the header.
	chunks, err := chunkPositions(files[0])
	if err != nil || len(chunks) < 4 {
		t.Fatalf("chunks %v, %v", chunks, err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, chunks[2]+60); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cfg.Dir = crashed
	e = open(t, cfg)
	defer e.Close()
	_, err = e.Append(ctx, "a-0", storetest.Records(1, 99))
	if err == nil || !strings.Contains(err.Error(), "damaged inside") {
		t.Fatalf("append to a shard with records after the damage: %v; want it refused", err)
	}
	got := readAll(t, e, "a-0", 0)
	if len(got) != 5 {
		t.Errorf("a reads %d records; want the 5 before the damage", len(got))
	}
	if e.Stats().Damaged.Load() == 0 {
		t.Errorf("no damaged shard counted")
	}
}

// chunkPositions lists the byte positions of a shared file's chunks
// (commit records skipped).
func chunkPositions(path string) ([]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int64
	for pos := int64(0); pos < int64(len(b)); {
		if _, err := sharedfile.ParseCommit(b[pos:]); err == nil {
			pos += sharedfile.HeaderSize
			continue
		}
		h, err := sharedfile.ParseHeader(b[pos:])
		if err != nil {
			break
		}
		out = append(out, pos)
		pos += h.Size()
	}
	return out, nil
}

// A shared shard deleted and made again under its name starts empty: no
// chunk entry of the old one leads a read to its chunks, before or after
// a restart, and the old shard's files go once nothing holds them.
func TestSharedShardRecreated(t *testing.T) {
	dir := t.TempDir()
	cfg := sharedConfig(dir)
	cfg.Workers = 1
	e := open(t, cfg)
	if err := e.CreateShard(ctx, "r-0"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := e.Append(ctx, "r-0", storetest.Records(10, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.DeleteShard(ctx, "r-0"); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateShard(ctx, "r-0"); err != nil {
		t.Fatal(err)
	}
	want := at(storetest.Records(3, 77), 0)
	if base, err := e.Append(ctx, "r-0", storetest.Records(3, 77)); err != nil || base != 0 {
		t.Fatalf("append to the new shard: base %d, %v", base, err)
	}
	for _, when := range []string{"before a restart", "after a restart"} {
		got := readAll(t, e, "r-0", 0)
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Fatalf("%s: the new shard reads %v", when, normalize(got))
		}
		e.Close()
		e = open(t, cfg)
	}
	defer e.Close()
}

// The offline check names a shared partition's folder for what it is.
func TestVerifyDirOfASharedShard(t *testing.T) {
	dir := t.TempDir()
	e := open(t, sharedConfig(dir))
	if err := e.CreateShard(ctx, "v-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, "v-0", storetest.Records(3, 1)); err != nil {
		t.Fatal(err)
	}
	e.Close()
	_, err := VerifyDir(filepath.Join(dir, "v-0"), nil)
	if err == nil || !strings.Contains(err.Error(), "strata.file.model=shared") {
		t.Fatalf("VerifyDir of a shared shard's folder: %v", err)
	}
}

// A shard created while its worker's shared file is already open writes
// its first chunks into that file: with the index lost, the next start
// still finds them there.
func TestSharedShardCreatedIntoAnOpenFile(t *testing.T) {
	dir := t.TempDir()
	cfg := sharedConfig(dir)
	cfg.Workers = 1
	e := open(t, cfg)
	for _, shard := range []string{"x-0", "y-0"} {
		if err := e.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Append(ctx, shard, storetest.Records(5, 1)); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	os.RemoveAll(filepath.Join(dir, "index"))
	e = open(t, cfg)
	defer e.Close()
	for _, shard := range []string{"x-0", "y-0"} {
		if got := readAll(t, e, shard, 0); len(got) != 5 {
			t.Fatalf("%s: %d records after a restart without the index, want the 5 acknowledged", shard, len(got))
		}
	}
}

// A shard restored from the bucket (its tiered segments remote, an empty
// active segment after them) keeps its topic's file model: a shared
// topic's partition comes back in the shared files, takes appends at the
// restored offset and keeps its model across a restart; a partition-model
// topic's comes back in files of its own.
func TestRestoreKeepsTheFileModel(t *testing.T) {
	dir := t.TempDir()
	cfg := modelConfig(dir)
	e := open(t, cfg)
	now := time.Now().UTC()
	for _, name := range []string{"s-3", "p-3"} {
		segs := []SegmentMeta{
			{No: 0, State: SegmentRemote, StartOffset: 0, EndOffset: 99, Records: 100, Created: now},
			{No: 1, State: SegmentActive, StartOffset: 100, Created: now},
		}
		if err := e.Restore(ShardMeta{Name: name, Created: now, LowWatermark: 0}, segs); err != nil {
			t.Fatalf("restore %s: %v", name, err)
		}
	}
	check := func(when string) {
		t.Helper()
		for name, want := range map[string]bool{"s-3": true, "p-3": false} {
			if m, err := e.Shard(name); err != nil || (m.Model == ModelShared) != want {
				t.Fatalf("%s: %s's file model %q, %v; want in the shared files: %t", when, name, m.Model, err, want)
			}
		}
	}
	check("restored")
	for _, name := range []string{"s-3", "p-3"} {
		if off, err := e.Append(ctx, name, storetest.Records(3, 1)); err != nil || off != 100 {
			t.Fatalf("append to restored %s: offset %d, %v; want 100", name, off, err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "s-3", "*.msg")); len(m) != 0 {
		t.Fatalf("the restored shared shard has segment files of its own: %v", m)
	}
	e.Close()
	e = open(t, cfg)
	defer e.Close()
	check("after a restart")
	for _, name := range []string{"s-3", "p-3"} {
		if err := e.SetHighWatermark(ctx, name, 103); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, e, name, 100); len(got) != 3 || got[0].Offset != 100 {
			t.Fatalf("%s reads %d records from 100 after a restart", name, len(got))
		}
	}
	// Segment files in place (a data folder from before the manifest) are
	// the partition model's: a shared topic's shard adopted with a sealed
	// local segment is refused rather than misread.
	err := e.Restore(ShardMeta{Name: "s-4", Created: now}, []SegmentMeta{
		{No: 0, State: SegmentSealed, StartOffset: 0, EndOffset: 9, Records: 10, Created: now},
		{No: 1, State: SegmentActive, StartOffset: 10, Created: now},
	})
	if m, serr := e.Shard("s-4"); err == nil && (serr != nil || m.Model == ModelShared) {
		t.Fatalf("restore of s-4 with a sealed local segment: %v; file model %q, %v", err, m.Model, serr)
	}
}

// A crash loses the chunk entries written since the index's last sync,
// while the manifest (synced) has moved on: here every sealed segment was
// tiered and dropped (another shard's segments keep the shared files),
// and the index kept only the shard's first entry. The shard starts where its manifest says its
// active segment does, with nothing acknowledged since lost (the
// workload found a start refused: "the shared files hold its offsets up
// to 6, but its active segment starts at 64").
func TestSharedStartIgnoresEntriesOfSegmentsGone(t *testing.T) {
	dir := t.TempDir()
	cfg := sharedConfig(dir)
	cfg.MaxSegmentBytes, cfg.RollCheckInterval, cfg.SharedFileBytes = 4<<10, 5, 4<<10
	cfg.Workers = 1 // one writer: both shards' chunks in every file
	e := open(t, cfg)
	for _, s := range []string{"a-0", "b-0"} {
		if err := e.CreateShard(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// b's one sealed segment keeps the file of a's first chunk; a's later
	// chunks are in files of a's alone.
	for i := range 30 {
		for _, s := range []string{"a-0", "b-0"} {
			if s == "b-0" && i > 0 {
				continue
			}
			if _, err := e.Append(ctx, s, storetest.Records(10, 5)); err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 {
			must(t, e.RollAt(ctx, "b-0", 10))
		}
	}
	var first index.ChunkEntry
	if err := index.ChunksFrom(e.index, "a-0", 0, func(c index.ChunkEntry) bool { first = c; return false }); err != nil {
		t.Fatal(err)
	}
	for {
		no, sealed, err := e.OldestLocal("a-0")
		if err != nil {
			t.Fatal(err)
		}
		if !sealed {
			break
		}
		if err := e.DropLocal(ctx, "a-0", no); err != nil {
			t.Fatal(err)
		}
	}
	low := mustLow(t, e, "a-0")
	if low <= first.End() {
		t.Fatalf("the active segment starts at %d; want it past the first chunk (%d)", low, first.End())
	}
	if _, err := e.Append(ctx, "a-0", storetest.Records(3, 7)); err != nil {
		t.Fatal(err)
	}
	want := normalize(readAll(t, e, "a-0", low))
	e.Close()

	// What the crash left: the index as of its first entry, no clean mark.
	idx, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, idx.DeleteRange(index.ChunkKey("a-0", 0), index.ChunkKey("a-0", 1<<62), pebble.Sync))
	must(t, idx.Set(index.ChunkKey("a-0", first.First), index.ChunkValue(first), pebble.Sync))
	must(t, idx.Close())
	man, err := pebble.Open(filepath.Join(dir, "manifest"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, man.Delete(counterKey("clean"), pebble.Sync))
	must(t, man.Close())

	e = open(t, cfg)
	defer e.Close()
	if got := normalize(readAll(t, e, "a-0", low)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the crash the active segment reads %d records, want the %d acknowledged", len(got), len(want))
	}
	if _, err := e.Append(ctx, "a-0", storetest.Records(1, 8)); err != nil {
		t.Fatalf("a write after the restart: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
