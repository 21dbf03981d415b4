package engine

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"strata/engine/segment"
	"strata/engine/store"
	"strata/engine/store/storetest"
)

func config(dir string) Config {
	return Config{
		Topics:  map[string]string{"fast": Memory, "small": Pebble},
		Segment: segment.Config{Dir: dir, Workers: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
	}
}

func TestContractThroughTheAdapter(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		a, err := Open(config(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}, storetest.Options{Reopen: func(t *testing.T, s store.Store) store.Store {
		a := s.(*Adapter)
		a.Close()
		b, err := Open(a.cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}})
}

func TestTopicsRouteToTheirEngine(t *testing.T) {
	ctx := context.Background()
	cfg := config(t.TempDir())
	a, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, shard := range []string{"fast-0", "small-0", "orders-0", "orders-with-dashes-3"} {
		if err := a.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Append(ctx, shard, storetest.Records(3, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if names, _ := a.SegmentEngine().Shards(ctx); len(names) != 2 {
		t.Fatalf("segment engine holds %q, want the two default-engine shards", names)
	}
	a.Close()
	a, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	names, _ := a.Shards(ctx)
	if len(names) != 3 || names[0] != "orders-0" || names[2] != "small-0" {
		t.Fatalf("after restart shards %q: the memory topic is gone, the others stay", names)
	}
	for shard, want := range map[string]store.TopicPartition{
		"orders-with-dashes-3": {Topic: "orders-with-dashes", Partition: 3},
		"wl-a-1-0":             {Topic: "wl-a-1", Partition: 0},
		"wl-a-1":               {Topic: "wl-a", Partition: 1},
	} {
		if got, ok := store.ParseShard(shard); !ok || got != want || got.Shard() != shard {
			t.Errorf("ParseShard(%q) = %+v, %t; want %+v", shard, got, ok, want)
		}
	}
	for _, bad := range []string{"orders", "-3", "orders-", "orders-x", "orders-03"} {
		if _, ok := store.ParseShard(bad); ok {
			t.Errorf("ParseShard(%q) took it for a topic-partition", bad)
		}
	}
}

// CreateShardAt reaches the shard's own engine, and each durable one keeps
// the start across a restart.
func TestCreateShardAtRoutesToTheEngine(t *testing.T) {
	ctx := context.Background()
	cfg := config(t.TempDir())
	a, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const start = 12345
	shards := []struct {
		name    string
		durable bool
	}{{"fast-0", false}, {"small-0", true}, {"orders-0", true}}
	for _, sh := range shards {
		if err := a.CreateShardAt(ctx, sh.name, start); err != nil {
			t.Fatal(err)
		}
		if base, err := a.Append(ctx, sh.name, storetest.Records(3, 1)); err != nil || base != start {
			t.Fatalf("%s: first append at %d, %v; want %d", sh.name, base, err, start)
		}
	}
	if names, _ := a.SegmentEngine().Shards(ctx); len(names) != 1 || names[0] != "orders-0" {
		t.Fatalf("segment engine holds %q, want the default-engine shard alone", names)
	}
	a.Close()
	if a, err = Open(cfg); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, sh := range shards {
		low, high, err := a.Watermarks(ctx, sh.name)
		switch {
		case !sh.durable:
			if err == nil {
				t.Errorf("%s, a memory shard, is still there after a restart", sh.name)
			}
		case err != nil || low != start || high != start+3:
			t.Errorf("%s after a restart: watermarks %d, %d, %v; want %d, %d", sh.name, low, high, err, start, start+3)
		}
	}
}

func TestUnknownEngine(t *testing.T) {
	cfg := config(t.TempDir())
	cfg.Topics["x"] = "tape"
	if _, err := Open(cfg); err == nil {
		t.Fatal("an unknown engine name was accepted")
	}
}

// A topic's strata.engine config (TopicEngine) routes its shards over the
// Topics map and the default.
func TestTopicEngineHook(t *testing.T) {
	ctx := context.Background()
	cfg := config(t.TempDir())
	cfg.TopicEngine = func(topic string) string {
		return map[string]string{"kept": Pebble, "fast": Segment}[topic]
	}
	a, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, shard := range []string{"kept-0", "fast-0", "other-0"} {
		if err := a.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
	}
	names, _ := a.SegmentEngine().Shards(ctx)
	if want := []string{"fast-0", "other-0"}; !slices.Equal(names, want) {
		t.Fatalf("segment engine holds %q, want %q (fast by its config, over the Topics map)", names, want)
	}
	if all, _ := a.Shards(ctx); !slices.Equal(all, []string{"fast-0", "kept-0", "other-0"}) {
		t.Fatalf("the adapter lists %q", all)
	}
}
