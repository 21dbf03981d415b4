package sharedfile

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"strata/engine/record"
)

// TestMain lets this test binary double as the writer the crash test kills.
func TestMain(m *testing.M) {
	if dir := os.Getenv("STRATA_SHARED_CRASH_WRITER"); dir != "" {
		crashWriter(dir, os.Getenv("STRATA_SHARED_CRASH_RUN"))
		return
	}
	// A Dir's writer goroutines end with Close: none outlives a test.
	goleak.VerifyTestMain(m)
}

const (
	crashShards  = 40
	crashWriters = 2
	crashCap     = 32 << 10 // files roll every few dozen batches
)

// crashRecord is record i of shard s in batch b of run r: everything about
// it follows from its value, so the checker can tell a whole record from a
// damaged one.
func crashRecord(run, batch, shard, i int) record.Record {
	return record.Record{
		Timestamp: int64(run*1_000_000 + batch*100 + i),
		Key:       []byte("k" + strconv.Itoa(shard)),
		Value:     []byte(fmt.Sprintf("run=%d batch=%d shard=%d i=%d %s", run, batch, shard, i, strings.Repeat("p", (run*31+batch*7+i)%200))),
		Tags:      []string{"t" + strconv.Itoa(batch%3)},
	}
}

func parseCrashValue(v []byte) (run, batch, shard, i int, ok bool) {
	_, err := fmt.Sscanf(string(v), "run=%d batch=%d shard=%d i=%d", &run, &batch, &shard, &i)
	return run, batch, shard, i, err == nil
}

// allChunks lists every shard's chunks after an Open, in offset order.
func allChunks(d *Dir, rec []Recovered) (map[uint64][]Chunk, error) {
	out := map[uint64][]Chunk{}
	for _, r := range rec {
		if r.Damage != nil {
			return nil, r.Damage
		}
		cs := r.Chunks
		if r.Chunks == nil {
			var err error
			if cs, err = d.Chunks(r.No); err != nil {
				return nil, err
			}
		}
		for _, c := range cs {
			out[c.Shard] = append(out[c.Shard], c)
		}
	}
	for _, cs := range out {
		sort.Slice(cs, func(i, j int) bool { return cs[i].First < cs[j].First })
	}
	return out, nil
}

// crashWriter recovers the folder, then writes from crashWriters
// goroutines (each one writer, as the engine's I/O workers) batches of
// chunks of its shards, one fsync per batch, printing
// "ACK shard first count run batch" for each chunk once its batch is
// durable, until it is killed.
func crashWriter(dir, runStr string) {
	run, _ := strconv.Atoi(runStr)
	d, rec, err := Open(Config{Dir: dir, MaxFileBytes: crashCap, Logger: quiet()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(1)
	}
	chunks, err := allChunks(d, rec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "recovered:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := 0; g < crashWriters; g++ {
		next := map[int]uint64{}
		for s := g; s < crashShards; s += crashWriters {
			if cs := chunks[uint64(s)]; len(cs) > 0 {
				next[s] = cs[len(cs)-1].Last() + 1
			}
		}
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			w := d.NewWriter()
			rng := rand.New(rand.NewPCG(uint64(run), uint64(g)))
			var dst []Chunk
			for b := g; ; b += crashWriters {
				dst = dst[:0]
				var batch []string
				for k := 1 + rng.IntN(8); k > 0; k-- {
					s := g + crashWriters*rng.IntN(crashShards/crashWriters)
					n := 1 + rng.IntN(5)
					recs := make([]record.Record, n)
					for i := range recs {
						recs[i] = crashRecord(run, b, s, i)
						recs[i].Offset = next[s] + uint64(i)
					}
					if dst, err = w.Add(dst, uint64(s), recs); err != nil {
						fmt.Fprintln(os.Stderr, "add:", err)
						os.Exit(1)
					}
					batch = append(batch, fmt.Sprintf("ACK %d %d %d %d %d", s, next[s], n, run, b))
					next[s] += uint64(n)
				}
				if _, err := w.Commit(true); err != nil {
					fmt.Fprintln(os.Stderr, "commit:", err)
					os.Exit(1)
				}
				mu.Lock()
				for _, l := range batch {
					fmt.Fprintln(out, l)
				}
				out.Flush()
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
}

// checked is what an earlier check saw of a shard: its first n records,
// whose bytes had CRC-32C crc. Later checks compare the prefix by its CRC
// and decode only the records after it.
type checked struct {
	n   int
	crc uint32
}

type crashAck struct {
	first         uint64
	n, run, batch int
}

// Kill a writer with SIGKILL at random moments, again and again on the same
// folder: after each restart every acknowledged record is there with the
// same bytes, each shard's offsets are contiguous across chunks and files,
// and no chunk is half kept.
func TestCrashLosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	acks := map[uint64][]crashAck{}
	seen := map[uint64]checked{}
	rng := rand.New(rand.NewPCG(3, 4))
	const runs = 20
	parse := func(l string) {
		var a crashAck
		var s uint64
		if _, err := fmt.Sscanf(l, "ACK %d %d %d %d %d", &s, &a.first, &a.n, &a.run, &a.batch); err == nil {
			acks[s] = append(acks[s], a)
		}
	}
	for run := 1; run <= runs; run++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "STRATA_SHARED_CRASH_WRITER="+dir, "STRATA_SHARED_CRASH_RUN="+strconv.Itoa(run))
		stdout, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		kill := time.After(time.Duration(30+rng.IntN(250)) * time.Millisecond)
		for collecting := true; collecting; {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("run %d: the writer exited on its own: %s", run, stderr.String())
				}
				parse(l)
			case <-kill:
				cmd.Process.Signal(syscall.SIGKILL)
				collecting = false
			}
		}
		for l := range lines { // acks printed before the kill landed
			parse(l)
		}
		cmd.Wait()
		checkCrashData(t, dir, run, acks, seen)
	}
	total := 0
	for _, a := range acks {
		total += len(a)
	}
	files, _ := os.ReadDir(dir)
	t.Logf("%d chunks acknowledged across %d kills, %d files", total, runs, len(files))
	if total < runs*10 || len(files) < 3 {
		t.Fatalf("only %d chunks acknowledged and %d files over %d runs: the test did not exercise the writer", total, len(files), runs)
	}
}

func checkCrashData(t *testing.T, dir string, run int, acks map[uint64][]crashAck, seen map[uint64]checked) {
	t.Helper()
	d, rec, err := Open(Config{Dir: dir, MaxFileBytes: crashCap, Logger: quiet()})
	if err != nil {
		t.Fatalf("after kill %d: reopen: %v", run, err)
	}
	defer d.Close()
	for _, r := range rec {
		if !r.Sealed {
			t.Fatalf("after kill %d: file %d was not sealed by recovery: %+v", run, r.No, r)
		}
	}
	chunks, err := allChunks(d, rec)
	if err != nil {
		t.Fatalf("after kill %d: %v", run, err)
	}
	for s, cs := range chunks {
		refs := make([]Ref, len(cs))
		for i, c := range cs {
			refs[i] = c.Ref
		}
		zero := uint64(0)
		all, crcs, err := readShard(d, s, refs, &zero)
		if err != nil {
			t.Fatalf("after kill %d: shard %d: %v", run, s, err)
		}
		prev := seen[s]
		if len(all) < prev.n {
			t.Fatalf("after kill %d: shard %d has %d records; the last restart found %d", run, s, len(all), prev.n)
		}
		if prev.n > 0 && crcs[prev.n-1] != prev.crc {
			t.Fatalf("after kill %d: shard %d: its first %d records changed since the last restart", run, s, prev.n)
		}
		if len(all) > 0 {
			seen[s] = checked{n: len(all), crc: crcs[len(all)-1]}
		}
		for i := prev.n; i < len(all); i++ {
			r := all[i]
			rr, b, ss, j, ok := parseCrashValue(r.Value)
			want := crashRecord(rr, b, ss, j)
			want.Offset = uint64(i)
			if !ok || ss != int(s) || !reflect.DeepEqual(r, want) {
				t.Fatalf("after kill %d: shard %d offset %d holds a damaged record: %+v", run, s, i, r)
			}
		}
		for _, a := range acks[s] {
			for i := 0; i < a.n; i++ {
				at := a.first + uint64(i)
				if at < uint64(prev.n) && a.run < run {
					continue // checked at an earlier restart; its bytes are unchanged
				}
				if at >= uint64(len(all)) {
					t.Fatalf("after kill %d: shard %d lost acknowledged offset %d (run %d batch %d); its log ends at %d", run, s, at, a.run, a.batch, len(all))
				}
				rr, b, _, j, _ := parseCrashValue(all[at].Value)
				if rr != a.run || b != a.batch || j != i {
					t.Fatalf("after kill %d: shard %d offset %d holds run %d batch %d #%d, but run %d batch %d #%d was acknowledged there",
						run, s, at, rr, b, j, a.run, a.batch, i)
				}
			}
		}
	}
	for s, a := range acks {
		if len(a) > 0 && len(chunks[s]) == 0 {
			t.Fatalf("after kill %d: shard %d has acknowledged chunks and none on disk", run, s)
		}
	}
}
