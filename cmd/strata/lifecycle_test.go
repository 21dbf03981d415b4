package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A topic tiered, read from the cold tier, deleted and created again under
// the same name: the bucket keeps nothing of the deleted topic, reads of
// the new one never meet the old one's cached objects, and rebuilding the
// catalog from the bucket does not bring a deleted topic back.
func TestDeletedTopicStaysDeleted(t *testing.T) {
	s := startServe(t, "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "tiering.enabled=false",
		"tiering.min_sealed_age=0s", "tiering.local_retention=0s")
	dataDir := strings.TrimPrefix(s.sets[0], "data_dir=")
	cold := filepath.Join(dataDir, "cold")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.DefaultProduceTopic("reborn"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	incarnation := func(name string) {
		t.Helper()
		for i := 0; i < 200; i++ {
			if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("%s-%03d %s", name, i, strings.Repeat("p", 40)))).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		var out strings.Builder
		if err := tierCmd([]string{"run", "--admin-addr", s.Admin}, &out); err != nil || strings.Contains(out.String(), "uploaded 0 segments") {
			t.Fatalf("strata tier run: %v\n%s", err, out.String())
		}
		// Offset 0 now lives only in the cold tier; read it (and cache it).
		if got := consumeFirst(t, ctx, s.Kafka, "reborn"); !strings.HasPrefix(got, name+"-000 ") {
			t.Fatalf("the first record of the %s topic reads %q", name, got)
		}
	}
	incarnation("old")
	if n := countFiles(t, filepath.Join(cold, "topic=reborn")); n == 0 {
		t.Fatal("nothing was tiered: the test would prove nothing")
	}
	deleteTopic(t, ctx, adm, "reborn")
	if n := countFiles(t, filepath.Join(cold, "topic=reborn")); n != 0 {
		t.Fatalf("%d files of the deleted topic are still in the bucket", n)
	}

	incarnation("new")
	deleteTopic(t, ctx, adm, "reborn")
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := catalogCmd(append([]string{"rebuild"}, setFlags(s.sets)...), &out); err != nil {
		t.Fatalf("strata catalog rebuild: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := catalogCmd(append([]string{"ls"}, setFlags(s.sets)...), &out); err != nil || strings.Contains(out.String(), "reborn") {
		t.Fatalf("after a rebuild the catalog lists the deleted topic (%v):\n%s", err, out.String())
	}
}

func consumeFirst(t *testing.T, ctx context.Context, addr, topic string) string {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record of %s: %v", topic, err)
		}
		for _, e := range fs.Errors() {
			t.Logf("fetch %s: %v", topic, e.Err)
		}
		if recs := fs.Records(); len(recs) > 0 {
			if recs[0].Offset != 0 {
				t.Fatalf("the first record of %s is at offset %d", topic, recs[0].Offset)
			}
			return string(recs[0].Value)
		}
	}
}

func deleteTopic(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) {
	t.Helper()
	resp, err := adm.DeleteTopics(ctx, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete %s: %v", topic, err)
	}
}

func countFiles(t *testing.T, dir string, skip ...string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && slices.Contains(skip, d.Name()) {
			return filepath.SkipDir
		}
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// A second service on a data folder in use is refused with a message that
// says so; the first keeps serving.
func TestSecondServeOnALockedFolder(t *testing.T) {
	s := startServe(t)
	cfg, err := LoadConfig("", append(append([]string(nil), s.sets...), "admin_addr=127.0.0.1:0", "kafka_addr=127.0.0.1:0", "schema_registry.addr=127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err == nil || !strings.Contains(err.Error(), "in use by another strata process") {
		t.Fatalf("a second serve on %s: %v; want a refusal naming the lock", cfg.DataDir, err)
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.DefaultProduceTopic("still"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.ProduceSync(context.Background(), kgo.StringRecord("alive")).FirstErr(); err != nil {
		t.Fatalf("the first service after the refused second one: %v", err)
	}
}

// The SQL catalog that held a topic's table is lost (its SQLite file
// deleted with the service stopped): `strata catalog rebuild` makes the
// table again from the bucket's manifests, holding every tiered record
// once, and a second rebuild adds nothing.
func TestCatalogRebuildRemakesTheTables(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tables.db")
	s := startServe(t, "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "tiering.enabled=false",
		"tiering.min_sealed_age=0s", "iceberg.enabled=true", "iceberg.catalog=sqlite:"+file)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.DefaultProduceTopic("orders"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 200; i++ {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("order-%03d %s", i, strings.Repeat("p", 40)))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := tierCmd([]string{"run", "--admin-addr", s.Admin}, &out); err != nil || strings.Contains(out.String(), "uploaded 0 segments") {
		t.Fatalf("strata tier run: %v\n%s", err, out.String())
	}
	cfg, err := LoadConfig("", s.sets)
	if err != nil {
		t.Fatal(err)
	}
	records := func() int64 {
		t.Helper()
		cold, err := openColdTier(cfg.Cold, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		defer cold.Close()
		tables, err := icebergTables(ctx, cfg, cold, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer tables.Close()
		v, err := tables.Describe(ctx, "orders")
		if err != nil {
			t.Fatalf("the table of orders: %v", err)
		}
		return v.Records
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	tiered := records()
	if tiered == 0 {
		t.Fatal("nothing in the table: the test would prove nothing")
	}
	for _, f := range []string{file, file + "-wal", file + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	for range 2 {
		out.Reset()
		if err := catalogCmd(append([]string{"rebuild"}, setFlags(s.sets)...), &out); err != nil {
			t.Fatalf("strata catalog rebuild: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "committed the tiered objects of 1 topics") {
			t.Fatalf("strata catalog rebuild said:\n%s", out.String())
		}
		if got := records(); got != tiered {
			t.Fatalf("after the rebuild the table of orders holds %d records, %d were tiered", got, tiered)
		}
	}
}
