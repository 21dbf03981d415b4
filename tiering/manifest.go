package tiering

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"strata/tiering/objstore"
)

// Manifest lists a shard's committed objects, beside them in the bucket, so
// the catalog can be rebuilt from the bucket alone (docs/tiering.md).
type Manifest struct {
	Version   int             `json:"version"`
	Shard     string          `json:"shard"`
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Objects   []ManifestEntry `json:"objects"`
	// Retired are objects a retype or a merge replaced (retype.go,
	// mergejob.go), kept a while.
	Retired []Retired `json:"retired,omitempty"`
	// LogStart is the shard's log start as a tiering run last saw it
	// above its first object's start (DeleteRecords or retention cut
	// into it): a catalog rebuilt from the bucket starts there, so no
	// deleted record comes back.
	LogStart uint64 `json:"log_start,omitempty"`
}

// ManifestEntry is one committed segment object.
type ManifestEntry struct {
	Key             string `json:"key"`
	Segment         uint64 `json:"segment"`
	StartOffset     uint64 `json:"start_offset"`
	EndOffset       uint64 `json:"end_offset"`
	MinTimestamp    int64  `json:"min_timestamp"`
	MaxTimestamp    int64  `json:"max_timestamp"`
	Records         uint64 `json:"records"`
	SegmentBytes    int64  `json:"segment_bytes"`
	SegmentChecksum uint32 `json:"segment_crc32c"`
	ObjectBytes     int64  `json:"object_bytes"`
}

// ReadManifest reads a shard's manifest (Location.ManifestKey); an empty
// one when there is none. The Iceberg tables (icetable) are planned from it.
func ReadManifest(ctx context.Context, b objstore.Bucket, key string) (Manifest, error) {
	return readManifest(ctx, b, key)
}

// readManifest reads a shard's manifest; an empty one when there is none.
func readManifest(ctx context.Context, b objstore.Bucket, key string) (Manifest, error) {
	m, _, err := readManifestVersion(ctx, b, key)
	return m, err
}

// readManifestVersion also returns the version read, for a conditional
// write of a changed manifest (objstore.Absent when there is none yet).
func readManifestVersion(ctx context.Context, b objstore.Bucket, key string) (Manifest, objstore.Version, error) {
	raw, v, err := b.ReadVersioned(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return Manifest{Version: 1}, objstore.Absent, nil
	}
	if err != nil {
		return Manifest{}, "", err
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return Manifest{}, "", fmt.Errorf("manifest %s: %w", key, err)
	}
	return m, v, nil
}

// manifestAttempts bounds how often one change is re-read and re-applied
// after other writers changed the manifest first: they are the few nodes
// holding a shard's segments, and a bound turns a livelock into an error.
const manifestAttempts = 20

// updateManifest read-modify-writes a shard's manifest as a compare-and-
// swap: change is applied to the manifest as read and written only if
// nobody wrote it since; otherwise it is read again and change applied to
// what another node wrote, until it lands. Several nodes tier segments of
// one shard (its log split across them, or copies of one segment), and a
// plain write would lose the entries of whoever wrote in between. change
// says whether it changed anything (nothing is written otherwise); it may
// run several times and must be idempotent.
func updateManifest(ctx context.Context, b objstore.Bucket, key string, change func(*Manifest) (bool, error)) error {
	delay := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		m, v, err := readManifestVersion(ctx, b, key)
		if err != nil {
			return err
		}
		changed, err := change(&m)
		if err != nil || !changed {
			return err
		}
		raw, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return err
		}
		err = b.UploadIf(ctx, key, bytes.NewReader(raw), v)
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return err
		}
		if attempt == manifestAttempts {
			return fmt.Errorf("manifest %s: other writers changed it before each of %d attempts to update it: %w", key, attempt, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay/2 + rand.N(delay/2+1)):
		}
		delay = min(2*delay, time.Second)
	}
}

// entry finds the object for exactly the offsets start to end.
func (m *Manifest) entry(start, end uint64) (ManifestEntry, bool) {
	for _, e := range m.Objects {
		if e.StartOffset == start && e.EndOffset == end {
			return e, true
		}
	}
	return ManifestEntry{}, false
}

// mergedFrom finds the entry of a merged object starting at start: one
// holding more than the segment starting there.
func (m *Manifest) mergedFrom(start uint64) (ManifestEntry, bool) {
	for _, e := range m.Objects {
		if e.StartOffset == start {
			return e, true
		}
	}
	return ManifestEntry{}, false
}

// put adds or replaces the entry for e.Key and keeps entries in offset order.
func (m *Manifest) put(e ManifestEntry) {
	for i := range m.Objects {
		if m.Objects[i].Key == e.Key {
			m.Objects[i] = e
			return
		}
	}
	m.Objects = append(m.Objects, e)
	sort.Slice(m.Objects, func(i, j int) bool { return m.Objects[i].StartOffset < m.Objects[j].StartOffset })
}

// remove drops the entry for key, reporting whether there was one.
func (m *Manifest) remove(key string) bool {
	for i := range m.Objects {
		if m.Objects[i].Key == key {
			m.Objects = append(m.Objects[:i], m.Objects[i+1:]...)
			return true
		}
	}
	return false
}
