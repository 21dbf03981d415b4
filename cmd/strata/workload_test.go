package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"strata/internal/workload"
	"strata/internal/workload/driver"
)

// TestWorkload runs the randomized workload (internal/workload) against the
// real service: topics created and deleted and re-created, produce with
// every codec, idempotent or not, odd and over-the-limit sizes, fetches,
// DeleteRecords, tiering runs, retention by age, SIGKILL and graceful
// restarts; it fails on any acknowledged record lost or changed, any record
// of a deleted topic served again, and any crash.
//
// A fresh seed each run, printed as "workload seed=N". Environment:
//
//	STRATA_WORKLOAD_SEED=N      replay seed N (with STRATA_WORKLOAD_WORKERS=1 the operation sequence is the seed's)
//	STRATA_WORKLOAD_TIME=30m    how long operations are started (default 60s; `make soak` runs 30m)
//	STRATA_WORKLOAD_WORKERS=3   concurrent workers (default 3)
//	STRATA_WORKLOAD_RACE=1      build the service with -race
//	STRATA_WORKLOAD_KEEP=1      keep the data folder, server log and history even when it passes
//	STRATA_WORKLOAD_KEEP_GOING=1  record violations and run on (a crash still stops it), to find more than one bug
func TestWorkload(t *testing.T) {
	seed := workloadSeed(t)
	budget := envDuration(t, "STRATA_WORKLOAD_TIME", 60*time.Second)
	workers := envInt(t, "STRATA_WORKLOAD_WORKERS", 3)
	t.Logf("workload seed=%d workers=%d time=%s (replay: STRATA_WORKLOAD_SEED=%d STRATA_WORKLOAD_WORKERS=%d)", seed, workers, budget, seed, workers)

	// Artifacts stay on disk when the run fails, for the reader.
	dir, err := os.MkdirTemp("", fmt.Sprintf("strata-workload-%d-", seed))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "strata")
	args := []string{"build", "-o", bin}
	if os.Getenv("STRATA_WORKLOAD_RACE") == "1" {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("workload seed=%d: go build: %v\n%s", seed, err, out)
	}

	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), budget+10*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := driver.Run(ctx, driver.Config{Bin: bin, Dir: dir, Seed: seed, Budget: budget, Workers: workers, Log: log,
		KeepGoing: os.Getenv("STRATA_WORKLOAD_KEEP_GOING") == "1"})
	if err != nil {
		t.Fatalf("workload seed=%d: %v (artifacts in %s)", seed, err, dir)
	}
	summary := fmt.Sprintf("workload seed=%d: %s in %s; ops %s; %d restarts, %d full checks", seed, res.Stats,
		time.Since(start).Round(time.Second), opCounts(res.Ops), res.Restarts, res.Checks)
	t.Log(summary)
	for _, n := range res.Notes {
		t.Logf("workload seed=%d: note: %s", seed, n)
	}
	if len(res.Violations) == 0 {
		if os.Getenv("STRATA_WORKLOAD_KEEP") != "1" {
			os.RemoveAll(dir)
		}
		return
	}
	var b strings.Builder
	kinds := map[string]int{}
	for _, v := range res.Violations {
		kinds[v.Kind]++
	}
	fmt.Fprintf(&b, "workload seed=%d workers=%d: %d violations %v\n", seed, workers, len(res.Violations), kinds)
	for i, v := range res.Violations {
		if i == 25 {
			fmt.Fprintf(&b, "... and %d more\n", len(res.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "  workload seed=%d: %s\n", seed, v)
	}
	fmt.Fprintf(&b, "%s\n%s\n", summary, res.Context)
	fmt.Fprintf(&b, "artifacts (data, server.log, history.log) kept in %s\n", dir)
	fmt.Fprintf(&b, "replay: STRATA_WORKLOAD_SEED=%d STRATA_WORKLOAD_WORKERS=%d go test -run 'TestWorkload$' ./cmd/strata/", seed, workers)
	t.Fatal(b.String())
}

func workloadSeed(t *testing.T) uint64 {
	if s := os.Getenv("STRATA_WORKLOAD_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STRATA_WORKLOAD_SEED=%q: %v", s, err)
		}
		return n
	}
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1 // fits an int64 too
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	if s := os.Getenv(key); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", key, s, err)
		}
		return d
	}
	return def
}

func envInt(t *testing.T, key string, def int) int {
	if s := os.Getenv(key); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", key, s)
		}
		return n
	}
	return def
}

func opCounts(ops map[workload.Kind]int) string {
	var parts []string
	for k := workload.Create; k <= workload.Restart; k++ {
		if ops[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, ops[k]))
		}
	}
	return strings.Join(parts, " ")
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
