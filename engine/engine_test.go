package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"

	"strata/engine/record"
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

// A shard stays in the engine it was made in: when its topic's configured
// engine changes (engine.default edited, or the topic's config gone with a
// deletion), its records still read, across a restart too, and deleting it
// removes it from that engine, so a topic made again starts empty.
func TestShardsStayWhereTheyWereMade(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	engineOf := map[string]string{"t": Pebble}
	open := func() *Adapter {
		cfg := config(dir)
		cfg.TopicEngine = func(topic string) string { return engineOf[topic] }
		a, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := open()
	if err := a.CreateShard(ctx, "t-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "t-0", []record.Record{{Value: []byte("in pebble")}}); err != nil {
		t.Fatal(err)
	}
	delete(engineOf, "t") // the topic's config is gone: the default would be segment
	for round, a := range []*Adapter{a, nil} {
		if a == nil {
			a = open() // after a restart, where it is comes from the engines
		}
		recs, err := a.Read(ctx, "t-0", 0, store.Budget{})
		if err != nil || len(recs) != 1 || string(recs[0].Value) != "in pebble" {
			t.Fatalf("round %d: reading t-0 after its configured engine changed: %v %v", round, recs, err)
		}
		if all, _ := a.Shards(ctx); !slices.Equal(all, []string{"t-0"}) {
			t.Fatalf("round %d: the adapter lists %q", round, all)
		}
		if round == 0 {
			a.Close()
		} else {
			defer a.Close()
			if err := a.DeleteShard(ctx, "t-0"); err != nil {
				t.Fatal(err)
			}
			if err := a.CreateShard(ctx, "t-0"); err != nil {
				t.Fatal(err)
			}
			if _, high, err := a.Watermarks(ctx, "t-0"); err != nil || high != 0 {
				t.Fatalf("t-0 made again after its deletion: high watermark %d, %v; want an empty shard", high, err)
			}
			if names, _ := a.SegmentEngine().Shards(ctx); !slices.Equal(names, []string{"t-0"}) {
				t.Fatalf("t-0 made again goes to its topic's engine now (segment), which holds %q", names)
			}
		}
	}
}

// CreateShards gives each engine its own shards (the segment engine all of
// its in one batch), routes them there, and refuses a name that exists in
// any engine before making any.
func TestCreateShardsRoutesToTheEngines(t *testing.T) {
	ctx := context.Background()
	cfg := config(t.TempDir())
	a, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	batch := []string{"orders-0", "fast-0", "small-0", "orders-1", "small-1", "fast-1"}
	if err := a.CreateShards(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for _, shard := range batch {
		if base, err := a.Append(ctx, shard, storetest.Records(2, 1)); err != nil || base != 0 {
			t.Fatalf("append to %s: base %d, %v", shard, base, err)
		}
	}
	if names, _ := a.SegmentEngine().Shards(ctx); !slices.Equal(names, []string{"orders-0", "orders-1"}) {
		t.Fatalf("segment engine holds %q, want the default engine's orders-0 and orders-1", names)
	}
	if names, _ := a.Shards(ctx); !slices.Equal(names, slices.Sorted(slices.Values(batch))) {
		t.Fatalf("adapter lists %q, want %q", names, batch)
	}
	err = a.CreateShards(ctx, []string{"orders-2", "small-1"})
	if !errors.Is(err, store.ErrShardExists) {
		t.Fatalf("CreateShards with an existing name: %v; want ErrShardExists", err)
	}
	if _, _, err := a.Watermarks(ctx, "orders-2"); !errors.Is(err, store.ErrUnknownShard) {
		t.Fatalf("orders-2 after a refused batch: %v; want an unknown shard", err)
	}
}
