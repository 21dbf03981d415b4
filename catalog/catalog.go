// Package catalog is strata's meta-service: which shards exist, their
// segments, each segment's state in the tiering lifecycle, and where its
// bytes live. Catalog is the interface; catalog/pebblecat keeps it in Pebble
// on one node, and every implementation passes catalog/catalogtest's
// scripts (docs/catalog.md).
package catalog

import (
	"errors"
	"fmt"
	"slices"
	"time"
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
	Cold:      {Remote, Deleted, Cold},   // Cold, Remote: the object replaced (a retype)
	Remote:    {Deleted, Remote},
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

// Topic is a topic's record: its configs, the topic's own values over the
// broker's (strata/topicconfig says what each means). A topic that never
// had one has no record: it follows the broker's settings.
type Topic struct {
	Name    string            `json:"name"`
	Configs map[string]string `json:"configs,omitempty"`
	Created time.Time         `json:"created"`
	// Version counts the record's writes; PutTopic compares it.
	Version uint64 `json:"version"`
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
	// ErrMetadataFull: the meta-service refuses writes because it is out
	// of space (etcd's NOSPACE alarm, past its --quota-backend-bytes).
	// Stores wrap etcd's own error in it, so the Kafka front end can tell
	// a client why and not answer UNKNOWN_SERVER_ERROR (docs/cluster.md,
	// "When etcd is full").
	ErrMetadataFull = errors.New("the cluster's etcd is full (NOSPACE alarm): it refuses writes until space is freed (docs/cluster.md, \"When etcd is full\")")
)

// Catalog is the meta-service. Every change is atomic and durable when it
// returns; an implementation is safe for concurrent use.
type Catalog interface {
	// CreateShard records a new shard with an empty active segment 0;
	// ErrExists if it exists.
	CreateShard(name string, now time.Time) (Shard, Segment, error)
	// Shards lists every shard in name order.
	Shards() ([]Shard, error)
	// Shard returns one shard; ErrNotFound if it does not exist.
	Shard(name string) (Shard, error)
	// Segments lists a shard's segments in order.
	Segments(shard string) ([]Segment, error)
	// SegmentsFrom lists at most max of a shard's segments in order, from
	// the one holding offset: the last that starts at or before it (the
	// first segment when offset is below them all). Its cost does not grow
	// with the shard's history, which a cold read must not pay per read.
	SegmentsFrom(shard string, offset uint64, max int) ([]Segment, error)
	// Roll seals the active segment (its final record given as sealed)
	// and allocates the next one, starting after it; ErrConflict if the
	// segment is not the active one.
	Roll(sealed Segment, now time.Time) (Segment, error)
	// Transition moves a segment from one lifecycle state to another,
	// applying change to its record; ErrConflict if it is not in from, an
	// error if the step is not allowed (CanTransition).
	Transition(shard string, no uint64, from, to State, change func(*Segment)) (Segment, error)
	// Merge replaces remote segments nos (at least two, consecutive in
	// the shard, in order) with one remote segment numbered nos[0]
	// holding all their offsets (Merged), applying change to it: their
	// objects were merged into one in the bucket. ErrConflict if any of
	// them is gone or no longer remote.
	Merge(shard string, nos []uint64, change func(*Segment)) (Segment, error)
	// Restore replaces a shard and its segments with the ones given (a
	// catalog rebuilt from the bucket).
	Restore(sh Shard, segs []Segment) error
	// DeleteShard forgets a shard and its segments.
	DeleteShard(name string) error
	// SetLowWatermark raises a shard's low watermark (never lowers it).
	SetLowWatermark(shard string, low uint64) (Shard, error)
	// PutTopic writes a topic's record if it is still the one read: at
	// t.Version (0: there is none; ErrExists if there is), else
	// ErrConflict. It returns the record written, its Version one more.
	PutTopic(t Topic) (Topic, error)
	// Topic returns a topic's record; ErrNotFound if it has none.
	Topic(name string) (Topic, error)
	// Topics lists every topic record in name order.
	Topics() ([]Topic, error)
	// DeleteTopic forgets a topic's record (none is no error).
	DeleteTopic(name string) error
	Close() error
}

// NextTopicVersion is the rule every implementation's PutTopic follows: t
// is written only over the version it was read at (0: only if absent),
// given the stored record cur and the error reading it (ErrNotFound when
// there is none). It returns t at its next version, or why not.
func NextTopicVersion(t, cur Topic, readErr error) (Topic, error) {
	switch {
	case errors.Is(readErr, ErrNotFound):
		if t.Version != 0 {
			return Topic{}, fmt.Errorf("topic %q: version %d is gone: %w", t.Name, t.Version, ErrConflict)
		}
	case readErr != nil:
		return Topic{}, readErr
	case t.Version == 0:
		return Topic{}, fmt.Errorf("topic %q: %w", t.Name, ErrExists)
	case cur.Version != t.Version:
		return Topic{}, fmt.Errorf("topic %q is at version %d, not %d: %w", t.Name, cur.Version, t.Version, ErrConflict)
	}
	t.Version++
	t.Created = t.Created.UTC()
	return t, nil
}

// FindSegment is SegmentsFrom's search: the number of the last segment
// starting at or before offset among those numbered first..last (both in
// use; first when offset is below them all). Offsets grow with segment
// numbers, though numbers may have gaps, so it bisects the numbers with
// seek, which returns the first segment numbered at or after no.
func FindSegment(first, last, offset uint64, seek func(no uint64) (Segment, error)) (uint64, error) {
	found, lo, hi := first, first, last
	for lo <= hi {
		mid := lo + (hi-lo)/2
		s, err := seek(mid)
		if err != nil {
			return 0, err
		}
		switch {
		case s.No <= hi && s.StartOffset <= offset:
			found, lo = s.No, s.No+1
		case mid == 0:
			return found, nil
		default: // nothing in mid..hi starts at or before offset
			hi = mid - 1
		}
	}
	return found, nil
}

// MergeOf is Merge's rule for every implementation: the one segment
// made of segments nos of shard, given segs, every segment the shard has
// numbered from nos' first to its last, as read (ErrConflict unless they
// are exactly nos). See Merged.
func MergeOf(shard string, nos []uint64, segs []Segment) (Segment, error) {
	if len(nos) < 2 {
		return Segment{}, fmt.Errorf("merging %s segments %v: a merge takes at least two", shard, nos)
	}
	if len(segs) != len(nos) || slices.ContainsFunc(segs, func(s Segment) bool { return !slices.Contains(nos, s.No) }) {
		return Segment{}, fmt.Errorf("merging %s segments %v: the shard has %d segments from %d to %d: %w", shard, nos, len(segs), nos[0], nos[len(nos)-1], ErrConflict)
	}
	return Merged(segs)
}

// Merged is the one segment that Merge makes of segs: remote,
// consecutive offsets, at least two. It keeps the first one's number and
// creation, sums the records and sizes and spans the timestamps; the
// object's key, size and checksum are the caller's to set (Merge's
// change).
func Merged(segs []Segment) (Segment, error) {
	if len(segs) < 2 {
		return Segment{}, fmt.Errorf("a merge takes at least two segments, not %d", len(segs))
	}
	m := segs[0]
	for i, s := range segs {
		if s.State != Remote {
			return Segment{}, fmt.Errorf("segment %s/%d is %s, not remote: %w", s.Shard, s.No, s.State, ErrConflict)
		}
		if i == 0 {
			continue
		}
		prev := segs[i-1]
		if s.No <= prev.No || s.StartOffset != prev.EndOffset+1 {
			return Segment{}, fmt.Errorf("segments %s/%d (offsets %d to %d) and %d (from %d) do not follow each other", s.Shard, prev.No, prev.StartOffset, prev.EndOffset, s.No, s.StartOffset)
		}
		m.EndOffset = s.EndOffset
		m.MinTimestamp, m.MaxTimestamp = min(m.MinTimestamp, s.MinTimestamp), max(m.MaxTimestamp, s.MaxTimestamp)
		m.Records += s.Records
		m.Size += s.Size
		if s.SealedAt.After(m.SealedAt) {
			m.SealedAt = s.SealedAt
		}
	}
	m.Checksum, m.ObjectKey, m.ObjectSize = 0, "", 0
	return m, nil
}
