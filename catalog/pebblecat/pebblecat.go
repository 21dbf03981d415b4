// Package pebblecat is the catalog on one node: a Pebble database where
// every change is one synced batch, so a restart resumes from the last
// recorded state (docs/catalog.md).
package pebblecat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"strata/catalog"
)

// Catalog is safe for concurrent use.
type Catalog struct {
	mu sync.Mutex
	db *pebble.DB
}

// Open opens (creating if needed) the catalog in dir.
func Open(dir string) (*Catalog, error) { return OpenFS(vfs.Default, dir) }

// OpenFS opens the catalog in dir of fs, so tests can record or fail its
// file operations.
func OpenFS(fs vfs.FS, dir string) (*Catalog, error) {
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", dir, err)
	}
	return &Catalog{db: db}, nil
}

func (c *Catalog) Close() error { return c.db.Close() }

func shardKey(name string) []byte { return []byte("shard/" + name) }

func segPrefix(shard string) []byte { return []byte("seg/" + shard + "/") }

func segKey(shard string, no uint64) []byte {
	return fmt.Appendf(segPrefix(shard), "%020d", no)
}

func (c *Catalog) get(key []byte, v any) error {
	raw, closer, err := c.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return catalog.ErrNotFound
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	return json.Unmarshal(raw, v)
}

func put(b *pebble.Batch, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Set(key, raw, nil)
}

// CreateShard records a new shard with an empty active segment 0.
func (c *Catalog) CreateShard(name string, now time.Time) (catalog.Shard, catalog.Segment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var existing catalog.Shard
	if err := c.get(shardKey(name), &existing); err == nil {
		return catalog.Shard{}, catalog.Segment{}, fmt.Errorf("shard %q: %w", name, catalog.ErrExists)
	} else if !errors.Is(err, catalog.ErrNotFound) {
		return catalog.Shard{}, catalog.Segment{}, err
	}
	sh := catalog.Shard{Name: name, Created: now.UTC()}
	seg := catalog.Segment{Shard: name, No: 0, State: catalog.Active, Created: now.UTC()}
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, shardKey(name), sh); err != nil {
		return catalog.Shard{}, catalog.Segment{}, err
	}
	if err := put(b, segKey(name, 0), seg); err != nil {
		return catalog.Shard{}, catalog.Segment{}, err
	}
	return sh, seg, b.Commit(pebble.Sync)
}

// Shards lists every shard in name order.
func (c *Catalog) Shards() ([]catalog.Shard, error) {
	var out []catalog.Shard
	err := c.scan([]byte("shard/"), func(raw []byte) error {
		var s catalog.Shard
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// Shard returns one shard.
func (c *Catalog) Shard(name string) (catalog.Shard, error) {
	var s catalog.Shard
	if err := c.get(shardKey(name), &s); err != nil {
		return catalog.Shard{}, fmt.Errorf("shard %q: %w", name, err)
	}
	return s, nil
}

// Segments lists a shard's segments in order.
func (c *Catalog) Segments(shard string) ([]catalog.Segment, error) {
	var out []catalog.Segment
	err := c.scan(segPrefix(shard), func(raw []byte) error {
		var s catalog.Segment
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// SegmentsFrom bisects the shard's segment keys (catalog.FindSegment),
// then reads max segments on from there.
func (c *Catalog) SegmentsFrom(shard string, offset uint64, max int) ([]catalog.Segment, error) {
	prefix := segPrefix(shard)
	it, err := c.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: append(slices.Clone(prefix), 0xff)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	decode := func(ok bool) (catalog.Segment, error) {
		var s catalog.Segment
		if !ok {
			return s, fmt.Errorf("shard %q: its segments changed during a read: %w", shard, catalog.ErrConflict)
		}
		return s, json.Unmarshal(it.Value(), &s)
	}
	if !it.First() {
		return nil, it.Error()
	}
	first, err := decode(true)
	if err != nil {
		return nil, err
	}
	last, err := decode(it.Last())
	if err != nil {
		return nil, err
	}
	no, err := catalog.FindSegment(first.No, last.No, offset, func(no uint64) (catalog.Segment, error) {
		return decode(it.SeekGE(segKey(shard, no)))
	})
	if err != nil {
		return nil, err
	}
	var out []catalog.Segment
	for ok := it.SeekGE(segKey(shard, no)); ok && len(out) < max; ok = it.Next() {
		s, err := decode(true)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, it.Error()
}

func (c *Catalog) scan(prefix []byte, fn func(raw []byte) error) error {
	upper := append(append([]byte(nil), prefix...), 0xff)
	it, err := c.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// Roll seals the active segment with its final metadata and records the
// next one, starting at sealed.EndOffset+1, in one synced batch.
func (c *Catalog) Roll(sealed catalog.Segment, now time.Time) (catalog.Segment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var cur catalog.Segment
	if err := c.get(segKey(sealed.Shard, sealed.No), &cur); err != nil {
		return catalog.Segment{}, fmt.Errorf("roll %s segment %d: %w", sealed.Shard, sealed.No, err)
	}
	if cur.State != catalog.Active {
		return catalog.Segment{}, fmt.Errorf("roll %s segment %d: it is %s, not active: %w", sealed.Shard, sealed.No, cur.State, catalog.ErrConflict)
	}
	sealed.State = catalog.Sealed
	sealed.SealedAt = now.UTC()
	next := catalog.Segment{Shard: sealed.Shard, No: sealed.No + 1, State: catalog.Active, StartOffset: sealed.EndOffset + 1, Created: now.UTC()}
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, segKey(sealed.Shard, sealed.No), sealed); err != nil {
		return catalog.Segment{}, err
	}
	if err := put(b, segKey(next.Shard, next.No), next); err != nil {
		return catalog.Segment{}, err
	}
	return next, b.Commit(pebble.Sync)
}

// Transition moves a segment from one state to another, applying change to
// its record; it fails with catalog.ErrConflict if the segment is not in from.
func (c *Catalog) Transition(shard string, no uint64, from, to catalog.State, change func(*catalog.Segment)) (catalog.Segment, error) {
	if !catalog.CanTransition(from, to) {
		return catalog.Segment{}, fmt.Errorf("segment %s/%d: %s to %s is not a lifecycle step", shard, no, from, to)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var s catalog.Segment
	if err := c.get(segKey(shard, no), &s); err != nil {
		return catalog.Segment{}, fmt.Errorf("segment %s/%d: %w", shard, no, err)
	}
	if s.State != from {
		return catalog.Segment{}, fmt.Errorf("segment %s/%d is %s, not %s: %w", shard, no, s.State, from, catalog.ErrConflict)
	}
	if change != nil {
		change(&s)
	}
	s.State = to
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, segKey(shard, no), s); err != nil {
		return catalog.Segment{}, err
	}
	return s, b.Commit(pebble.Sync)
}

// Merge replaces remote segments nos with the one segment of their
// offsets (catalog.Merged), in one synced batch.
func (c *Catalog) Merge(shard string, nos []uint64, change func(*catalog.Segment)) (catalog.Segment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(nos) == 0 {
		return catalog.MergeOf(shard, nos, nil)
	}
	var segs []catalog.Segment
	if err := c.scan(segPrefix(shard), func(raw []byte) error {
		var s catalog.Segment
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		if s.No >= nos[0] && s.No <= nos[len(nos)-1] {
			segs = append(segs, s)
		}
		return nil
	}); err != nil {
		return catalog.Segment{}, err
	}
	m, err := catalog.MergeOf(shard, nos, segs)
	if err != nil {
		return catalog.Segment{}, err
	}
	if change != nil {
		change(&m)
	}
	m.State = catalog.Remote
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, segKey(shard, m.No), m); err != nil {
		return catalog.Segment{}, err
	}
	for _, no := range nos[1:] {
		if err := b.Delete(segKey(shard, no), nil); err != nil {
			return catalog.Segment{}, err
		}
	}
	return m, b.Commit(pebble.Sync)
}

// Restore records a shard and its segments as they were, in one synced
// batch: rebuilding a lost catalog from the bucket's manifests. It refuses a
// shard the catalog already has.
func (c *Catalog) Restore(sh catalog.Shard, segs []catalog.Segment) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var existing catalog.Shard
	if err := c.get(shardKey(sh.Name), &existing); err == nil {
		return fmt.Errorf("shard %q: %w", sh.Name, catalog.ErrExists)
	} else if !errors.Is(err, catalog.ErrNotFound) {
		return err
	}
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, shardKey(sh.Name), sh); err != nil {
		return err
	}
	for _, s := range segs {
		if s.Shard != sh.Name {
			return fmt.Errorf("restore %s: segment %d belongs to %q", sh.Name, s.No, s.Shard)
		}
		if err := put(b, segKey(sh.Name, s.No), s); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

// DeleteShard forgets a shard and its segments in one synced batch.
func (c *Catalog) DeleteShard(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.db.NewBatch()
	defer b.Close()
	if err := b.Delete(shardKey(name), nil); err != nil {
		return err
	}
	p := segPrefix(name)
	if err := b.DeleteRange(p, append(append([]byte(nil), p...), 0xff), nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// SetLowWatermark raises a shard's low watermark (never lowers it).
func (c *Catalog) SetLowWatermark(shard string, low uint64) (catalog.Shard, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s catalog.Shard
	if err := c.get(shardKey(shard), &s); err != nil {
		return catalog.Shard{}, fmt.Errorf("shard %q: %w", shard, err)
	}
	if low <= s.LowWatermark {
		return s, nil
	}
	s.LowWatermark = low
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, shardKey(shard), s); err != nil {
		return catalog.Shard{}, err
	}
	return s, b.Commit(pebble.Sync)
}

func topicKey(name string) []byte { return []byte("topic/" + name) }

// PutTopic writes a topic's record if it is still at t.Version.
func (c *Catalog) PutTopic(t catalog.Topic) (catalog.Topic, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var cur catalog.Topic
	err := c.get(topicKey(t.Name), &cur)
	if t, err = catalog.NextTopicVersion(t, cur, err); err != nil {
		return catalog.Topic{}, err
	}
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, topicKey(t.Name), t); err != nil {
		return catalog.Topic{}, err
	}
	return t, b.Commit(pebble.Sync)
}

// Topic returns a topic's record.
func (c *Catalog) Topic(name string) (catalog.Topic, error) {
	var t catalog.Topic
	if err := c.get(topicKey(name), &t); err != nil {
		return catalog.Topic{}, fmt.Errorf("topic %q: %w", name, err)
	}
	return t, nil
}

// Topics lists every topic record in name order.
func (c *Catalog) Topics() ([]catalog.Topic, error) {
	var out []catalog.Topic
	err := c.scan([]byte("topic/"), func(raw []byte) error {
		var t catalog.Topic
		if err := json.Unmarshal(raw, &t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

// DeleteTopic forgets a topic's record.
func (c *Catalog) DeleteTopic(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.db.Delete(topicKey(name), pebble.Sync)
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// producerIDsKey holds the start of the next block of producer ids not yet
// reserved (absent: 0).
var producerIDsKey = []byte("producer_ids")

// ReserveProducerIDs reserves the next count producer ids for this node
// (metadata.ProducerIDBlocks): the counter past them is synced before it
// returns, so a restart never hands out an id again.
func (c *Catalog) ReserveProducerIDs(_ context.Context, count int64) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next int64
	if err := c.get(producerIDsKey, &next); err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return 0, fmt.Errorf("catalog: reading the next producer id block: %w", err)
	}
	if count <= 0 || next < 0 || next > (1<<63-1)-count {
		return 0, fmt.Errorf("catalog: no block of %d producer ids from %d", count, next)
	}
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, producerIDsKey, next+count); err != nil {
		return 0, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("catalog: recording producer ids %d-%d: %w", next, next+count-1, err)
	}
	return next, nil
}
