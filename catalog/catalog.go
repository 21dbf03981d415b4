// Package catalog is strata's meta-service on one node: which shards exist,
// their segments, each segment's state in the tiering lifecycle, and where
// its bytes live. It is a Pebble database; every change is one synced batch,
// so a restart resumes from the last recorded state (docs/catalog.md).
package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
)

// State is where a segment is in its lifecycle.
type State string

const (
	Active    State = "active"    // hot: being written, local
	Sealed    State = "sealed"    // warm: immutable, local, checksum known
	Uploading State = "uploading" // being converted and uploaded
	Cold      State = "cold"      // object committed; local copy still present
	Remote    State = "remote"    // object only; local copy deleted
	Deleted   State = "deleted"   // gone everywhere (retention)
)

var transitions = map[State][]State{
	Active:    {Sealed},
	Sealed:    {Uploading, Deleted},
	Uploading: {Cold, Sealed, Uploading}, // Sealed: abandoned; Uploading: restarted
	Cold:      {Remote, Deleted},
	Remote:    {Deleted},
}

// CanTransition says whether a segment may move from one state to another.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Local says whether the segment's file is on local disk.
func (s State) Local() bool { return s == Active || s == Sealed || s == Uploading || s == Cold }

// Shard is one topic-partition.
type Shard struct {
	Name string `json:"name"`
	// LowWatermark: offsets below it are deleted (DeleteRecords, retention).
	LowWatermark uint64    `json:"low_watermark"`
	Created      time.Time `json:"created"`
}

// Segment is one segment file and what is known about it.
type Segment struct {
	Shard string `json:"shard"`
	No    uint64 `json:"no"`
	State State  `json:"state"`
	// StartOffset is the first offset; EndOffset the last, once sealed.
	StartOffset uint64 `json:"start_offset"`
	EndOffset   uint64 `json:"end_offset"`
	// Times in ms since the epoch: min and max record timestamps, once sealed.
	MinTimestamp int64  `json:"min_timestamp"`
	MaxTimestamp int64  `json:"max_timestamp"`
	Records      uint64 `json:"records"`
	Size         int64  `json:"size"`
	// Checksum is the CRC-32C of the whole sealed file.
	Checksum uint32    `json:"checksum"`
	Created  time.Time `json:"created"`
	SealedAt time.Time `json:"sealed_at,omitzero"`
	// ObjectKey and ObjectSize name and size the Parquet object once
	// uploaded; TieredAt is when that upload was committed.
	ObjectKey  string    `json:"object_key,omitempty"`
	ObjectSize int64     `json:"object_size,omitempty"`
	TieredAt   time.Time `json:"tiered_at,omitzero"`
	// UploadStarted is when the current upload attempt began.
	UploadStarted time.Time `json:"upload_started,omitzero"`
}

var (
	ErrNotFound = errors.New("not in the catalog")
	ErrExists   = errors.New("already in the catalog")
	ErrConflict = errors.New("catalog changed underneath")
)

// Catalog is safe for concurrent use.
type Catalog struct {
	mu sync.Mutex
	db *pebble.DB
}

// Open opens (creating if needed) the catalog in dir.
func Open(dir string) (*Catalog, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
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
		return ErrNotFound
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
func (c *Catalog) CreateShard(name string, now time.Time) (Shard, Segment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var existing Shard
	if err := c.get(shardKey(name), &existing); err == nil {
		return Shard{}, Segment{}, fmt.Errorf("shard %q: %w", name, ErrExists)
	} else if !errors.Is(err, ErrNotFound) {
		return Shard{}, Segment{}, err
	}
	sh := Shard{Name: name, Created: now.UTC()}
	seg := Segment{Shard: name, No: 0, State: Active, Created: now.UTC()}
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, shardKey(name), sh); err != nil {
		return Shard{}, Segment{}, err
	}
	if err := put(b, segKey(name, 0), seg); err != nil {
		return Shard{}, Segment{}, err
	}
	return sh, seg, b.Commit(pebble.Sync)
}

// Shards lists every shard in name order.
func (c *Catalog) Shards() ([]Shard, error) {
	var out []Shard
	err := c.scan([]byte("shard/"), func(raw []byte) error {
		var s Shard
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// Shard returns one shard.
func (c *Catalog) Shard(name string) (Shard, error) {
	var s Shard
	if err := c.get(shardKey(name), &s); err != nil {
		return Shard{}, fmt.Errorf("shard %q: %w", name, err)
	}
	return s, nil
}

// Segments lists a shard's segments in order.
func (c *Catalog) Segments(shard string) ([]Segment, error) {
	var out []Segment
	err := c.scan(segPrefix(shard), func(raw []byte) error {
		var s Segment
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
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
func (c *Catalog) Roll(sealed Segment, now time.Time) (Segment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var cur Segment
	if err := c.get(segKey(sealed.Shard, sealed.No), &cur); err != nil {
		return Segment{}, fmt.Errorf("roll %s segment %d: %w", sealed.Shard, sealed.No, err)
	}
	if cur.State != Active {
		return Segment{}, fmt.Errorf("roll %s segment %d: it is %s, not active: %w", sealed.Shard, sealed.No, cur.State, ErrConflict)
	}
	sealed.State = Sealed
	sealed.SealedAt = now.UTC()
	next := Segment{Shard: sealed.Shard, No: sealed.No + 1, State: Active, StartOffset: sealed.EndOffset + 1, Created: now.UTC()}
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, segKey(sealed.Shard, sealed.No), sealed); err != nil {
		return Segment{}, err
	}
	if err := put(b, segKey(next.Shard, next.No), next); err != nil {
		return Segment{}, err
	}
	return next, b.Commit(pebble.Sync)
}

// Transition moves a segment from one state to another, applying change to
// its record; it fails with ErrConflict if the segment is not in from.
func (c *Catalog) Transition(shard string, no uint64, from, to State, change func(*Segment)) (Segment, error) {
	if !CanTransition(from, to) {
		return Segment{}, fmt.Errorf("segment %s/%d: %s to %s is not a lifecycle step", shard, no, from, to)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var s Segment
	if err := c.get(segKey(shard, no), &s); err != nil {
		return Segment{}, fmt.Errorf("segment %s/%d: %w", shard, no, err)
	}
	if s.State != from {
		return Segment{}, fmt.Errorf("segment %s/%d is %s, not %s: %w", shard, no, s.State, from, ErrConflict)
	}
	if change != nil {
		change(&s)
	}
	s.State = to
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, segKey(shard, no), s); err != nil {
		return Segment{}, err
	}
	return s, b.Commit(pebble.Sync)
}

// Restore records a shard and its segments as they were, in one synced
// batch: rebuilding a lost catalog from the bucket's manifests. It refuses a
// shard the catalog already has.
func (c *Catalog) Restore(sh Shard, segs []Segment) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var existing Shard
	if err := c.get(shardKey(sh.Name), &existing); err == nil {
		return fmt.Errorf("shard %q: %w", sh.Name, ErrExists)
	} else if !errors.Is(err, ErrNotFound) {
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
func (c *Catalog) SetLowWatermark(shard string, low uint64) (Shard, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s Shard
	if err := c.get(shardKey(shard), &s); err != nil {
		return Shard{}, fmt.Errorf("shard %q: %w", shard, err)
	}
	if low <= s.LowWatermark {
		return s, nil
	}
	s.LowWatermark = low
	b := c.db.NewBatch()
	defer b.Close()
	if err := put(b, shardKey(shard), s); err != nil {
		return Shard{}, err
	}
	return s, b.Commit(pebble.Sync)
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
