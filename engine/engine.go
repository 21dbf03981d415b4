// Package engine is the storage adapter (docs/design.md): one Store that routes
// each shard to the engine its topic is configured for: "segment" (the File
// Segment engine, the default), "memory" or "pebble".
package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"

	"strata/engine/memory"
	"strata/engine/pebblestore"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
)

// Engine names.
const (
	Segment = "segment"
	Memory  = "memory"
	Pebble  = "pebble"
)

// Config picks engines per topic.
type Config struct {
	// Default is the engine of topics not listed in Topics (segment).
	Default string
	// Topics maps a topic name to its engine.
	Topics map[string]string
	// TopicEngine, if set, names a topic's engine (its strata.engine
	// config; "" for Default), over Topics. Every engine is then opened,
	// since any topic may be created in any of them.
	TopicEngine func(topic string) string
	// Segment configures the segment engine; its Dir is the data folder.
	Segment segment.Config
	// MemoryMaxRecords bounds each memory shard (1,000,000).
	MemoryMaxRecords int
}

// Adapter routes a shard to the engine that holds it, and a new shard to
// its topic's engine. It implements store.Store.
type Adapter struct {
	cfg     Config
	segment *segment.Engine
	stores  map[string]store.Store

	// where holds each existing shard's engine: a shard stays where it was
	// made, whatever its topic's configured engine says now (a changed
	// engine.default, a deleted topic whose config is gone).
	mu    sync.RWMutex
	where map[string]store.Store
}

var (
	_ store.Store   = (*Adapter)(nil)
	_ store.Replica = (*Adapter)(nil)
	_ store.Starter = (*Adapter)(nil)
	_ store.Epochs  = (*Adapter)(nil)
	_ store.Viewer  = (*Adapter)(nil)
)

// Open opens every engine the config names.
func Open(cfg Config) (*Adapter, error) {
	if cfg.Default == "" {
		cfg.Default = Segment
	}
	used := map[string]bool{Segment: true, cfg.Default: true}
	if cfg.TopicEngine != nil {
		used[Memory], used[Pebble] = true, true
	}
	for topic, e := range cfg.Topics {
		used[e] = true
		if err := store.ValidateTopic(topic); err != nil {
			return nil, fmt.Errorf("engine for topic %q: %w", topic, err)
		}
	}
	a := &Adapter{cfg: cfg, stores: map[string]store.Store{}}
	for name := range used {
		var s store.Store
		var err error
		switch name {
		case Segment:
			a.segment, err = segment.Open(cfg.Segment)
			s = a.segment
		case Memory:
			s = memory.New(cfg.MemoryMaxRecords)
		case Pebble:
			s, err = pebblestore.Open(filepath.Join(cfg.Segment.Dir, "pebble-engine"))
		default:
			err = fmt.Errorf("unknown engine %q: want segment, memory or pebble", name)
		}
		if err != nil {
			a.Close() // the engines opened so far; never a nil one
			return nil, err
		}
		a.stores[name] = s
	}
	a.where = map[string]store.Store{}
	for _, s := range a.stores {
		names, err := s.Shards(context.Background())
		if err != nil {
			a.Close()
			return nil, err
		}
		for _, n := range names {
			// A name in two engines (left by an older version) goes to the
			// one its topic names.
			if _, seen := a.where[n]; !seen || a.configured(n) == s {
				a.where[n] = s
			}
		}
	}
	return a, nil
}

func (a *Adapter) route(shard string) store.Store {
	if s, ok := a.lookup(shard); ok {
		return s
	}
	return a.configured(shard)
}

// configured is the engine a new shard of this name is made in.
func (a *Adapter) configured(shard string) store.Store {
	tp, _ := store.ParseShard(shard)
	if a.cfg.TopicEngine != nil {
		if e := a.stores[a.cfg.TopicEngine(tp.Topic)]; e != nil {
			return e
		}
	}
	if e, ok := a.cfg.Topics[tp.Topic]; ok {
		return a.stores[e]
	}
	return a.stores[a.cfg.Default]
}

// SegmentEngine is the File Segment engine, which tiering works on.
func (a *Adapter) SegmentEngine() *segment.Engine { return a.segment }

func (a *Adapter) CreateShard(ctx context.Context, shard string) error {
	return a.CreateShardAt(ctx, shard, 0)
}

// CreateShardAt makes the shard, in its topic's engine, beginning at start:
// every engine is a store.Starter.
func (a *Adapter) CreateShardAt(ctx context.Context, shard string, start uint64) error {
	if s, ok := a.lookup(shard); ok {
		return s.(store.Starter).CreateShardAt(ctx, shard, start) // exists: the engine says so
	}
	s := a.configured(shard)
	if err := s.(store.Starter).CreateShardAt(ctx, shard, start); err != nil {
		return err
	}
	a.mu.Lock()
	a.where[shard] = s
	a.mu.Unlock()
	return nil
}

// CreateShards makes the shards, each in its topic's engine: an engine
// that makes many in one step (store.BatchCreator) is given all of its
// shards at once: all or none within such an engine (a topic's
// partitions are all in one); another makes them one by one and stops
// at the first error.
func (a *Adapter) CreateShards(ctx context.Context, shards []string) error {
	var order []store.Store
	groups := map[store.Store][]string{}
	for _, sh := range shards {
		if _, ok := a.lookup(sh); ok {
			return fmt.Errorf("shard %q: %w", sh, store.ErrShardExists)
		}
		s := a.configured(sh)
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], sh)
	}
	for _, s := range order {
		err := store.CreateShards(ctx, s, groups[s])
		// What was made is routed: on an error, an engine that makes them
		// one by one may have made some.
		a.mu.Lock()
		for _, sh := range groups[s] {
			if err == nil {
				a.where[sh] = s
			} else if _, _, werr := s.Watermarks(ctx, sh); werr == nil {
				a.where[sh] = s
			}
		}
		a.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *Adapter) lookup(shard string) (store.Store, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	s, ok := a.where[shard]
	return s, ok
}

func (a *Adapter) Append(ctx context.Context, shard string, recs []record.Record) (uint64, error) {
	return a.route(shard).Append(ctx, shard, recs)
}

func (a *Adapter) Read(ctx context.Context, shard string, offset uint64, b store.Budget) ([]record.Record, error) {
	return a.route(shard).Read(ctx, shard, offset, b)
}

// ReadView reads without copying from the engines that can (store.Viewer).
func (a *Adapter) ReadView(ctx context.Context, shard string, offset uint64, b store.Budget) ([]record.Record, func(), error) {
	return store.ReadView(ctx, a.route(shard), shard, offset, b)
}

func (a *Adapter) OffsetForTime(ctx context.Context, shard string, ts int64) (uint64, error) {
	return a.route(shard).OffsetForTime(ctx, shard, ts)
}

func (a *Adapter) ReadByKey(ctx context.Context, shard string, key []byte, from uint64, b store.Budget) ([]record.Record, error) {
	return a.route(shard).ReadByKey(ctx, shard, key, from, b)
}

func (a *Adapter) ReadByTag(ctx context.Context, shard string, tag string, from uint64, b store.Budget) ([]record.Record, error) {
	return a.route(shard).ReadByTag(ctx, shard, tag, from, b)
}

// MaxTimestamp returns the largest timestamp of a shard's readable records
// (Kafka's ListOffsets MAX_TIMESTAMP): the segment engine knows it per
// segment; the others scan.
func (a *Adapter) MaxTimestamp(ctx context.Context, shard string) (int64, bool, error) {
	s := a.route(shard)
	if seg, ok := s.(*segment.Engine); ok {
		return seg.MaxTimestamp(ctx, shard)
	}
	low, high, err := s.Watermarks(ctx, shard)
	if err != nil {
		return 0, false, err
	}
	var ts int64
	found := false
	for off := low; off < high; {
		recs, err := s.Read(ctx, shard, off, store.Budget{MaxBytes: 4 << 20})
		if err != nil || len(recs) == 0 {
			return ts, found, err
		}
		for _, r := range recs {
			if !found || r.Timestamp > ts {
				ts, found = r.Timestamp, true
			}
		}
		off = recs[len(recs)-1].Offset + 1
	}
	return ts, found, nil
}

// LocalBytes is the bytes a shard keeps on this node's disk, in whichever
// engine holds it (DescribeLogDirs).
func (a *Adapter) LocalBytes(shard string) (int64, error) {
	s, ok := a.route(shard).(interface{ LocalBytes(string) (int64, error) })
	if !ok {
		return 0, fmt.Errorf("shard %s: its engine does not measure its size", shard)
	}
	return s.LocalBytes(shard)
}

func (a *Adapter) Watermarks(ctx context.Context, shard string) (uint64, uint64, error) {
	return a.route(shard).Watermarks(ctx, shard)
}

// replica is the shard's engine as a store.Replica: every engine is one.
func (a *Adapter) replica(shard string) store.Replica { return a.route(shard).(store.Replica) }

func (a *Adapter) LogEnd(ctx context.Context, shard string) (uint64, error) {
	return a.replica(shard).LogEnd(ctx, shard)
}

func (a *Adapter) SetHighWatermark(ctx context.Context, shard string, hw uint64) error {
	return a.replica(shard).SetHighWatermark(ctx, shard, hw)
}

func (a *Adapter) ReadToLogEnd(ctx context.Context, shard string, offset uint64, b store.Budget) ([]record.Record, error) {
	return a.replica(shard).ReadToLogEnd(ctx, shard, offset, b)
}

func (a *Adapter) AppendAt(ctx context.Context, shard string, recs []record.Record) error {
	return a.replica(shard).AppendAt(ctx, shard, recs)
}

func (a *Adapter) TruncateTo(ctx context.Context, shard string, end uint64) error {
	return a.replica(shard).TruncateTo(ctx, shard, end)
}

// AssignEpoch records a leader epoch in the shard's engine: every engine is
// a store.Epochs.
func (a *Adapter) AssignEpoch(ctx context.Context, shard string, epoch int32, start uint64) error {
	return a.route(shard).(store.Epochs).AssignEpoch(ctx, shard, epoch, start)
}

func (a *Adapter) LeaderEpochs(ctx context.Context, shard string) ([]store.EpochEntry, error) {
	return a.route(shard).(store.Epochs).LeaderEpochs(ctx, shard)
}

func (a *Adapter) DeleteBefore(ctx context.Context, shard string, offset uint64) error {
	return a.route(shard).DeleteBefore(ctx, shard, offset)
}

// Shards lists the shards of every engine that belong to it by config.
func (a *Adapter) Shards(ctx context.Context) ([]string, error) {
	var out []string
	for _, s := range a.stores {
		names, err := s.Shards(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if w, ok := a.lookup(n); !ok || w == s {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func (a *Adapter) DeleteShard(ctx context.Context, shard string) error {
	if err := a.route(shard).DeleteShard(ctx, shard); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.where, shard)
	a.mu.Unlock()
	return nil
}

func (a *Adapter) Close() error {
	var errs []error
	for _, s := range a.stores {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// segmented is an engine whose logs are segment files (the segment engine).
type segmented interface {
	SegmentStarts(ctx context.Context, shard string) ([]uint64, error)
	RollAt(ctx context.Context, shard string, next uint64) error
}

// SegmentStarts is the shard's local segments' first offsets; an engine
// without segment files has one, the log's start.
func (a *Adapter) SegmentStarts(ctx context.Context, shard string) ([]uint64, error) {
	if s, ok := a.route(shard).(segmented); ok {
		return s.SegmentStarts(ctx, shard)
	}
	low, _, err := a.route(shard).Watermarks(ctx, shard)
	return []uint64{low}, err
}

// RollAt seals the shard's active segment at next, as its leader did; an
// engine without segment files has nothing to roll.
func (a *Adapter) RollAt(ctx context.Context, shard string, next uint64) error {
	if s, ok := a.route(shard).(segmented); ok {
		return s.RollAt(ctx, shard, next)
	}
	return nil
}

// DamagedFrom is where the shard's local copy was found damaged (at start
// or by a scrub), cause nil if nowhere; only the segment engine keeps files
// to find damage in.
func (a *Adapter) DamagedFrom(shard string) (uint64, error) {
	if s, ok := a.route(shard).(interface {
		DamagedFrom(shard string) (uint64, error)
	}); ok {
		return s.DamagedFrom(shard)
	}
	return 0, nil
}

// Checksum is a local segment's CRC-32C and length as they are on disk; an
// engine without segment files has none.
func (a *Adapter) Checksum(ctx context.Context, shard string, no uint64) (uint32, int64, error) {
	s, ok := a.route(shard).(interface {
		Checksum(ctx context.Context, shard string, no uint64) (uint32, int64, error)
	})
	if !ok {
		return 0, 0, fmt.Errorf("shard %s: its engine keeps no segment files", shard)
	}
	return s.Checksum(ctx, shard, no)
}

// SealedSegments lists the shard's local sealed segments; an engine
// without segment files has none.
func (a *Adapter) SealedSegments(ctx context.Context, shard string) ([]store.SealedSegment, error) {
	if s, ok := a.route(shard).(store.SealedLister); ok {
		return s.SealedSegments(ctx, shard)
	}
	return nil, nil
}

// TieredStarts is where the shard's tiered segments start; an engine
// without segment files has none.
func (a *Adapter) TieredStarts(ctx context.Context, shard string) ([]uint64, error) {
	if s, ok := a.route(shard).(store.TieredLister); ok {
		return s.TieredStarts(ctx, shard)
	}
	return nil, nil
}
