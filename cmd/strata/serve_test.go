package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// served is the service running inside the test process on a fresh data
// folder and loopback ports.
type served struct {
	Addrs
	sets []string     // the --set values it runs with
	stop func() error // ends it; returns what serving returned
}

func startServe(t *testing.T, extra ...string) served {
	t.Helper()
	dir := t.TempDir()
	sets := append([]string{"data_dir=" + dir, "cold.local.dir=" + dir + "/cold",
		"admin_addr=127.0.0.1:0", "kafka_addr=127.0.0.1:0", "schema_registry.addr=127.0.0.1:0"}, extra...)
	cfg, err := LoadConfig("", sets)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a Addrs) { ready <- a })
	}()
	var s served
	select {
	case s.Addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve ended before it was ready: %v", err)
	}
	s.sets = sets
	var once sync.Once
	var result error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(30 * time.Second):
				result = errors.New("serve did not stop after its context ended")
			}
		})
		return result
	}
	t.Cleanup(func() { s.stop() })
	return s
}

func TestServeAnswersHealthAndMetrics(t *testing.T) {
	s := startServe(t)
	addr := s.Admin
	for path, want := range map[string]string{
		"/healthz":  "ok",
		"/readyz":   "ready",
		"/metrics":  `strata_objstore_operations_total{backend="local",operation="check"} 1`,
		"/metrics#": "strata_engine_appended_records_total 0",
	} {
		resp, err := http.Get("http://" + addr + strings.TrimSuffix(path, "#"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Post("http://"+addr+"/v1/tiering/run", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var run map[string]any
	json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	if resp.StatusCode != 200 || run["started"] == nil {
		t.Fatalf("POST /v1/tiering/run = %d %v", resp.StatusCode, run)
	}
	resp, _ = http.Get("http://" + addr + "/v1/tiering/jobs")
	var jobs []map[string]any
	json.NewDecoder(resp.Body).Decode(&jobs)
	resp.Body.Close()
	if len(jobs) != 1 {
		t.Fatalf("GET /v1/tiering/jobs lists %d runs after one", len(jobs))
	}
	if err := s.stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestServeRefusesUnreachableColdTier(t *testing.T) {
	cfg, err := LoadConfig("", []string{"data_dir=" + t.TempDir(), "cold.backend=s3", "cold.s3.endpoint=127.0.0.1:1",
		"cold.s3.bucket=b", "cold.retry.attempts=1", "cold.retry.timeout=2s"})
	if err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("serve with an unreachable cold tier: %v; want an error naming the endpoint", err)
	}
}

// The operator's loop: serve, tier by hand through the CLI, stop, list the
// catalog offline.
func TestTierRunAndCatalogLs(t *testing.T) {
	s := startServe(t)
	var out strings.Builder
	if err := tierCmd([]string{"run", "--admin-addr", s.Admin}, &out); err != nil || !strings.Contains(out.String(), "uploaded 0 segments") {
		t.Fatalf("strata tier run: %v\n%s", err, out.String())
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	sets := s.sets
	out.Reset()
	if err := catalogCmd(append([]string{"ls"}, setFlags(sets)...), &out); err != nil || !strings.HasPrefix(out.String(), "SHARD") {
		t.Fatalf("strata catalog ls: %v\n%s", err, out.String())
	}
}

func setFlags(sets []string) []string {
	var out []string
	for _, s := range sets {
		out = append(out, "--set", s)
	}
	return out
}
