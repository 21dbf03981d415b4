package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"strata/internal/testsvc"
)

// The README's quick start, end to end: serve, produce with kcat, tier
// everything sealed, and consume it all back with kcat from the cold tier.
func TestKcatProduceTierConsume(t *testing.T) {
	kcat := testsvc.Tool(t, "kcat")
	s := startServe(t, "segment.max_bytes=4KiB", "segment.roll_check_interval=5",
		"tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s")
	addrs := s.Addrs

	// Every kcat run is bounded: a protocol problem must fail the test, not hang it.
	tctx, tcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer tcancel()
	var lines []string
	for i := 0; i < 300; i++ {
		lines = append(lines, fmt.Sprintf("key-%d:value %d %s", i%7, i, strings.Repeat("z", i%40)))
	}
	// Produced in several kcat runs, so segments roll between them.
	for i := 0; i < len(lines); i += 50 {
		cmd := exec.CommandContext(tctx, kcat, "-b", addrs.Kafka, "-t", "clicks", "-P", "-K", ":")
		cmd.Stdin = strings.NewReader(strings.Join(lines[i:i+50], "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat -P: %v\n%s", err, out)
		}
	}
	resp, err := http.Post("http://"+addrs.Admin+"/v1/tiering/run", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"key": "topic=clicks/partition=0/`) {
		t.Fatalf("the tiering run uploaded nothing: %s", body)
	}

	consume := exec.CommandContext(tctx, kcat, "-b", addrs.Kafka, "-t", "clicks", "-C", "-o", "beginning", "-e", "-f", "%k:%s\n")
	out, err := consume.Output()
	if err != nil {
		t.Fatalf("kcat -C: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(got) != len(lines) {
		t.Fatalf("kcat consumed %d records, %d were produced", len(got), len(lines))
	}
	for i := range lines {
		if got[i] != lines[i] {
			t.Fatalf("record %d: consumed %q, produced %q", i, got[i], lines[i])
		}
	}
	// The admin API shows the same data: shards with bytes per tier, their
	// segments, and the native read view from the cold tier.
	for path, want := range map[string]string{
		"/v1/shards":                   `"shard": "clicks-0"`,
		"/v1/shards/clicks-0/segments": `"state": "remote"`,
		"/v1/records?shard=clicks-0&offset=0&max_records=1": `"key": "` + base64.StdEncoding.EncodeToString([]byte("key-0")) + `"`,
	} {
		resp, err := http.Get("http://" + addrs.Admin + strings.Split(path, "#")[0])
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Fatalf("GET %s = %d, lacks %s:\n%.500s", path, resp.StatusCode, want, body)
		}
	}
	if resp, _ := http.Get("http://" + addrs.Admin + "/v1/records?shard=clicks-0&offset=100000"); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("a read past the end: %d", resp.StatusCode)
	}
	// A consumer group (librdkafka's balanced consumer): the first run reads
	// the topic from the cold tier and commits; the next reads only what
	// was produced since.
	group := func() []string {
		cmd := exec.CommandContext(tctx, kcat, "-b", addrs.Kafka, "-G", "audit", "-e", "-X", "auto.offset.reset=earliest", "-f", "%k:%s\n", "clicks")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kcat -G: %v", err)
		}
		return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	}
	if got := group(); len(got) != len(lines) || got[0] != lines[0] || got[len(got)-1] != lines[len(lines)-1] {
		t.Fatalf("kcat -G read %d records (%q...), %d were produced", len(got), got[0], len(lines))
	}
	produce := exec.CommandContext(tctx, kcat, "-b", addrs.Kafka, "-t", "clicks", "-P", "-K", ":")
	produce.Stdin = strings.NewReader("late:one\nlate:two\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	if got := group(); strings.Join(got, ",") != "late:one,late:two" {
		t.Fatalf("kcat -G after a commit read %q; want only the two new records", got)
	}
	// strata bench loads the same service and reports what it measured.
	var bench strings.Builder
	if err := benchCmd([]string{"--brokers", addrs.Kafka, "--records", "3000", "--size", "512", "--partitions", "4"}, &bench); err != nil {
		t.Fatalf("strata bench: %v", err)
	}
	if !strings.Contains(bench.String(), "produce: 3000 records of 512 bytes") || !strings.Contains(bench.String(), "consume: 3000 records") {
		t.Fatalf("strata bench printed:\n%s", bench.String())
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}
