package segment

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"strata/engine/record"
	"strata/engine/store"
)

// TestMain lets this test binary double as the writer the crash test kills.
func TestMain(m *testing.M) {
	if dir := os.Getenv("STRATA_CRASH_WRITER"); dir != "" {
		crashWriter(dir, os.Getenv("STRATA_CRASH_RUN"), os.Getenv("STRATA_CRASH_MODEL"))
		return
	}
	if dir := os.Getenv("STRATA_TRUNCATE_DIR"); dir != "" {
		truncateChild(dir, os.Getenv("STRATA_TRUNCATE_STEP"))
		return
	}
	if dir := os.Getenv("STRATA_LIFECYCLE_DIR"); dir != "" {
		lifecycleChild(dir, os.Getenv("STRATA_LIFECYCLE_STEP"))
		return
	}
	if dir := os.Getenv("STRATA_CREATE_DIR"); dir != "" {
		createChild(dir, os.Getenv("STRATA_CREATE_STEP"))
		return
	}
	if dir := os.Getenv("STRATA_EPOCHS_DIR"); dir != "" {
		epochsChild(dir, os.Getenv("STRATA_EPOCHS_STEP"))
		return
	}
	if dir := os.Getenv("STRATA_ACKED_DIR"); dir != "" {
		ackedChild(dir, os.Getenv("STRATA_ACKED_MODEL"))
		return
	}
	if dir := os.Getenv("STRATA_CLEAN_DIR"); dir != "" {
		cleanChild(dir, os.Getenv("STRATA_CLEAN_STEP"))
		return
	}
	if dir := os.Getenv("STRATA_START_DIR"); dir != "" {
		startCrashChild(dir, os.Getenv("STRATA_START_STEP"))
		return
	}
	// The engine's workers, tickers and scrubber end with Close: none outlives
	// a test.
	goleak.VerifyTestMain(m)
}

// crashShards are the shards the writer appends to; crashStart gives the
// ones made at a start offset (CreateShardAt) where they begin. Batch b
// goes to shard b%5, and each goroutine takes every fourth batch, so every
// goroutine writes to every shard.
var crashShards = []string{"crash-0", "crash-1", "crash-2", "crash-3", "crash-4"}

var crashStart = map[string]uint64{"crash-3": 12345, "crash-4": 1 << 40}

// crashShardsOf is the shards of a file model's crash test: under the
// shared model forty, so every commit interleaves many shards' chunks.
func crashShardsOf(model string) []string {
	if model != ModelShared {
		return crashShards
	}
	out := slices.Clone(crashShards)
	for i := len(out); i < 40; i++ {
		out = append(out, fmt.Sprintf("crash-%d", i))
	}
	return out
}

// crashConfig is the engine of the crash test: small segments, and under
// the shared model small shared files, so runs cross rolls and files.
func crashConfig(dir, model string) Config {
	cfg := Config{Dir: dir, Workers: 2, MaxSegmentBytes: 64 << 10, RollCheckInterval: 50, IndexInterval: 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if model == ModelShared {
		cfg.FileModel = func(string) string { return ModelShared }
		cfg.SharedFileBytes = 256 << 10
	}
	return cfg
}

// crashRecord is record i of batch b of run r: everything about it follows
// from its value, so the checker can tell a whole record from a damaged one.
func crashRecord(run, batch, i int) record.Record {
	v := fmt.Sprintf("run=%d batch=%d i=%d %s", run, batch, i, strings.Repeat("p", (run*31+batch*7+i)%300))
	return record.Record{
		Timestamp: int64(run*1_000_000 + batch*100 + i),
		Key:       []byte(fmt.Sprintf("k%d", i%5)),
		Value:     []byte(v),
		Headers:   []record.Header{{Key: "batch", Value: []byte(strconv.Itoa(batch))}},
		Tags:      []string{"t" + strconv.Itoa(batch%3)},
	}
}

func parseCrashValue(v []byte) (run, batch, i int, ok bool) {
	_, err := fmt.Sscanf(string(v), "run=%d batch=%d i=%d", &run, &batch, &i)
	return run, batch, i, err == nil
}

// crashWriter appends from four goroutines until it is killed, printing
// "ACK shard base run batch n" after each acknowledged append.
func crashWriter(dir, runStr, model string) {
	run, _ := strconv.Atoi(runStr)
	crashShards := crashShardsOf(model)
	e, err := Open(crashConfig(dir, model))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(1)
	}
	for _, s := range crashShards {
		e.CreateShardAt(ctx, s, crashStart[s])
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "READY")
	out.Flush()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for b := g; ; b += 4 {
				n := 1 + (b*13)%17
				recs := make([]record.Record, n)
				for i := range recs {
					recs[i] = crashRecord(run, b, i)
				}
				shard := crashShards[b%len(crashShards)]
				base, err := e.Append(ctx, shard, recs)
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(1)
				}
				mu.Lock()
				fmt.Fprintf(out, "ACK %s %d %d %d %d\n", shard, base, run, b, n)
				out.Flush()
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
}

type ack struct {
	base          uint64
	run, batch, n int
}

// Kill a writer with SIGKILL at random moments, again and again on the same
// data: every acknowledged record must come back with the same bytes,
// offsets must stay contiguous, and no record may be half kept.
func TestCrashLosesNothingAcknowledged(t *testing.T) { crashTest(t, "", 24) }

// The same under the shared-file model: forty shards' chunks interleaved
// in shared files, one commit per worker batch.
func TestSharedCrashLosesNothingAcknowledged(t *testing.T) { crashTest(t, ModelShared, 16) }

func crashTest(t *testing.T, model string, runs int) {
	dir := t.TempDir()
	acks := map[string][]ack{}
	rng := rand.New(rand.NewPCG(1, 2))
	for run := 1; run <= runs; run++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "STRATA_CRASH_WRITER="+dir, "STRATA_CRASH_RUN="+strconv.Itoa(run), "STRATA_CRASH_MODEL="+model)
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
		// Let it write for a random while, then kill it mid-flight. The
		// while starts when the writer is ready (engine open, shards
		// made): a start takes 100-300 ms on a loaded machine and more
		// under -race, so counted from the process start most
		// kills landed before the first append and the test failed for
		// want of acknowledgements. Every fourth run still counts from the
		// process start, so some kills land in a start (recovery).
		window := time.Duration(10+rng.IntN(120)) * time.Millisecond
		var kill <-chan time.Time
		if run%4 == 0 {
			kill = time.After(window)
		}
		ready := time.After(2 * time.Minute)
		collecting := true
		for collecting {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("run %d: the writer exited on its own: %s", run, stderr.String())
				}
				if l == "READY" {
					ready = nil
					if kill == nil {
						kill = time.After(window)
					}
					continue
				}
				var a ack
				var shard string
				if _, err := fmt.Sscanf(l, "ACK %s %d %d %d %d", &shard, &a.base, &a.run, &a.batch, &a.n); err == nil {
					acks[shard] = append(acks[shard], a)
				}
			case <-kill:
				cmd.Process.Signal(syscall.SIGKILL)
				collecting = false
			case <-ready:
				cmd.Process.Signal(syscall.SIGKILL)
				t.Fatalf("run %d: the writer was not ready (engine open, shards made) after 2 minutes: %s", run, stderr.String())
			}
		}
		for l := range lines { // acks printed before the kill landed
			var a ack
			var shard string
			if _, err := fmt.Sscanf(l, "ACK %s %d %d %d %d", &shard, &a.base, &a.run, &a.batch, &a.n); err == nil {
				acks[shard] = append(acks[shard], a)
			}
		}
		cmd.Wait()
		checkCrashData(t, dir, model, run, acks)
	}
	total := 0
	for _, a := range acks {
		total += len(a)
	}
	t.Logf("%d appends acknowledged across %d kills", total, runs)
	if total < runs {
		t.Fatalf("only %d appends were acknowledged over %d runs: the test did not exercise the engine", total, runs)
	}
}

func checkCrashData(t *testing.T, dir, model string, run int, acks map[string][]ack) {
	t.Helper()
	e, err := Open(crashConfig(dir, model))
	if err != nil {
		t.Fatalf("after kill %d: reopen: %v", run, err)
	}
	defer e.Close()
	for _, shard := range crashShardsOf(model) {
		if _, err := e.shard(shard); err != nil {
			continue // killed before it was created
		}
		start := crashStart[shard]
		if segs, _ := e.Segments(shard); len(segs) == 0 || segs[0].StartOffset != start {
			t.Fatalf("after kill %d: %s's segments %+v; want the first at offset %d", run, shard, segs, start)
		}
		var all []record.Record
		for from := start; ; {
			recs, err := e.Read(ctx, shard, from, store.Budget{MaxRecords: 1000})
			if err != nil {
				t.Fatalf("after kill %d: read %s at %d: %v", run, shard, from, err)
			}
			if len(recs) == 0 {
				break
			}
			all = append(all, recs...)
			from = recs[len(recs)-1].Offset + 1
		}
		for i, r := range all {
			if r.Offset != start+uint64(i) {
				t.Fatalf("after kill %d: %s record %d has offset %d", run, shard, i, r.Offset)
			}
			rr, b, j, ok := parseCrashValue(r.Value)
			want := crashRecord(rr, b, j)
			want.Offset = r.Offset
			if !ok || !reflect.DeepEqual(r, want) {
				t.Fatalf("after kill %d: %s offset %d holds a damaged record: %+v", run, shard, r.Offset, r)
			}
		}
		for _, a := range acks[shard] {
			for i := 0; i < a.n; i++ {
				at := a.base + uint64(i) - start
				if a.base < start || at >= uint64(len(all)) {
					t.Fatalf("after kill %d: %s lost acknowledged offset %d (run %d batch %d); log ends at %d", run, shard, a.base+uint64(i), a.run, a.batch, start+uint64(len(all)))
				}
				rr, b, j, _ := parseCrashValue(all[at].Value)
				if rr != a.run || b != a.batch || j != i {
					t.Fatalf("after kill %d: %s offset %d holds run %d batch %d #%d, but run %d batch %d #%d was acknowledged there",
						run, shard, a.base+uint64(i), rr, b, j, a.run, a.batch, i)
				}
			}
		}
	}
}
