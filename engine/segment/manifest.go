package segment

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"

	"strata/engine/index"
	"strata/engine/sharedfile"
	"strata/engine/store"
)

// The manifest is the engine's own record of its shards and segments: what
// it needs to recover its files, and nothing about other tiers (that is the
// catalog's, which learns from the engine's events). It is a Pebble
// database of its own in Dir/manifest: the index beside it is derived from
// the segment files and can be rebuilt; the manifest cannot (docs/engine.md).

// SegmentState is where a segment's bytes are, as the engine sees it.
type SegmentState string

const (
	SegmentActive SegmentState = "active" // being written
	SegmentSealed SegmentState = "sealed" // immutable, checksum known, file local
	// SegmentRemote: the local file is gone after tiering; its offsets
	// are read through the ColdSource.
	SegmentRemote SegmentState = "remote"
	// SegmentDeleted is only ever in a SegmentDropped event: retention
	// removed the segment and its offsets.
	SegmentDeleted SegmentState = "deleted"
)

// ShardMeta is a shard as the manifest records it.
type ShardMeta struct {
	Name string `json:"name"`
	// Created tells incarnations of one name apart.
	Created      time.Time `json:"created"`
	LowWatermark uint64    `json:"low_watermark"`
	// Model is the shard's file model: "" (the partition model) or
	// ModelShared; ID is a shared shard's number in chunk headers, from a
	// manifest counter, never reused.
	Model string `json:"model,omitempty"`
	ID    uint64 `json:"id,omitempty"`
	// FromFile is the shared-file number the shard was created at: its
	// chunks are all in that file or later ones.
	FromFile uint64 `json:"from_file,omitempty"`
}

// SegmentMeta is a segment as the manifest records it and events carry it.
type SegmentMeta struct {
	Shard        string       `json:"shard"`
	No           uint64       `json:"no"`
	State        SegmentState `json:"state"`
	StartOffset  uint64       `json:"start_offset"`
	EndOffset    uint64       `json:"end_offset"` // once sealed
	MinTimestamp int64        `json:"min_timestamp"`
	MaxTimestamp int64        `json:"max_timestamp"`
	Records      uint64       `json:"records"`
	Size         int64        `json:"size"`
	Checksum     uint32       `json:"checksum"` // CRC-32C of the sealed file
	Created      time.Time    `json:"created"`
	SealedAt     time.Time    `json:"sealed_at,omitzero"`
	// FirstFile and LastFile bound the shared files a shared shard's
	// segment has chunks in (0: none): a file goes once no segment's
	// range holds it.
	FirstFile uint64 `json:"first_file,omitempty"`
	LastFile  uint64 `json:"last_file,omitempty"`
	// Cleaned counts the cleanings that rewrote the segment: its file is
	// {no}.{cleaned}.msg (clean.go), and its offsets have gaps.
	// FirstCleaned is when the first did (delete.retention.ms counts from
	// it); Reindex: its index entries may still be the previous file's,
	// so recovery rebuilds them.
	Cleaned      uint64    `json:"cleaned,omitempty"`
	FirstCleaned time.Time `json:"first_cleaned,omitzero"`
	Reindex      bool      `json:"reindex,omitempty"`
}

// Manifest key kinds, laid out as the index's keys are (engine/index): one
// key per shard, one per segment ordered by number.
const (
	kindShard   = 'M'
	kindSegment = 'S'
)

func shardKey(name string) []byte { return index.Prefix(kindShard, name) }

func segmentKey(name string, no uint64) []byte {
	return binary.BigEndian.AppendUint64(index.Prefix(kindSegment, name), no)
}

func putShard(b *pebble.Batch, m ShardMeta) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return b.Set(shardKey(m.Name), v, nil)
}

func putSegment(b *pebble.Batch, m SegmentMeta) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return b.Set(segmentKey(m.Shard, m.No), v, nil)
}

// loadShards reads every shard of the manifest, in name order.
func loadShards(db *pebble.DB) ([]ShardMeta, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindShard}, UpperBound: []byte{kindShard + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []ShardMeta
	for it.First(); it.Valid(); it.Next() {
		var m ShardMeta
		if err := json.Unmarshal(it.Value(), &m); err != nil {
			return nil, fmt.Errorf("engine manifest: shard entry %q: %w", it.Key(), err)
		}
		out = append(out, m)
	}
	return out, it.Error()
}

// loadSegments reads a shard's segments from the manifest, oldest first.
func loadSegments(db *pebble.DB, name string) ([]SegmentMeta, error) {
	p := index.Prefix(kindSegment, name)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: index.UpperBound(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []SegmentMeta
	for it.First(); it.Valid(); it.Next() {
		var m SegmentMeta
		if err := json.Unmarshal(it.Value(), &m); err != nil {
			return nil, fmt.Errorf("engine manifest: shard %s: segment entry: %w", name, err)
		}
		out = append(out, m)
	}
	return out, it.Error()
}

// meta is what the manifest says of a local segment.
func (s *segment) meta(shard string, state SegmentState) SegmentMeta {
	m := SegmentMeta{Shard: shard, No: s.no, State: state, StartOffset: s.start, Created: s.created, SealedAt: s.sealedAt,
		FirstFile: s.firstFile.Load(), LastFile: s.lastFile.Load(), Cleaned: s.cleaned, FirstCleaned: s.firstCleaned}
	if state != SegmentActive {
		m.EndOffset, m.MinTimestamp, m.MaxTimestamp = s.next-1, s.minTS, s.maxTS
		m.Records, m.Size, m.Checksum = s.count, s.size, s.crc
	}
	return m
}

// Segments lists what the engine's manifest holds of a shard: its local
// segments and the tiered ones whose offsets are still readable.
func (e *Engine) Segments(name string) ([]SegmentMeta, error) {
	if _, err := e.shard(name); err != nil {
		return nil, err
	}
	return loadSegments(e.manifest, name)
}

// Shard returns what the manifest holds of a shard.
func (e *Engine) Shard(name string) (ShardMeta, error) {
	sh, err := e.shard(name)
	if err != nil {
		return ShardMeta{}, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.meta(sh.low), nil
}

// Restore adopts a shard the engine does not hold from what another record
// of it says: the bucket's manifests after a lost disk (tiered segments,
// remote, and an empty active segment after them), or the catalog of a
// data folder from before the engine kept its own manifest (whose segment
// files are in place). It refuses a shard that exists.
func (e *Engine) Restore(sh ShardMeta, segs []SegmentMeta) error {
	if err := store.ValidateShard(sh.Name); err != nil {
		return err
	}
	if len(segs) == 0 || segs[len(segs)-1].State != SegmentActive {
		return fmt.Errorf("restore shard %s: the last segment must be the active one", sh.Name)
	}
	local := false
	for _, s := range segs[:len(segs)-1] {
		if s.State != SegmentRemote && s.State != SegmentSealed {
			return fmt.Errorf("restore shard %s: segment %d is %s; only sealed and remote segments come before the active one", sh.Name, s.No, s.State)
		}
		local = local || s.State == SegmentSealed
	}
	// A shard restored from the bucket (remote segments, an empty active
	// one) keeps its topic's file model; one adopted with segment files in
	// place (a data folder from before the manifest) is in the partition
	// model, whose files those are.
	if sh.Model == "" && !local && e.cfg.FileModel != nil {
		if tp, _ := store.ParseShard(sh.Name); e.cfg.FileModel(tp.Topic) == ModelShared {
			sh.Model = ModelShared
		}
	}
	var d *sharedfile.Dir
	if sh.Model == ModelShared {
		if local {
			return fmt.Errorf("restore shard %s: a shard in the shared files is restored from remote segments only, not sealed local ones", sh.Name)
		}
		// Opened before e.mu, as CreateShardAt does.
		var err error
		if d, err = e.openShared(); err != nil {
			return fmt.Errorf("restore shard %s: %w", sh.Name, err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return store.ErrClosed
	}
	if _, ok := e.shards[sh.Name]; ok {
		return fmt.Errorf("shard %q: %w", sh.Name, store.ErrShardExists)
	}
	if _, ok := e.deleting[sh.Name]; ok {
		return fmt.Errorf("shard %q is being deleted", sh.Name)
	}
	if _, ok := e.creating[sh.Name]; ok {
		return fmt.Errorf("shard %q (being created): %w", sh.Name, store.ErrShardExists)
	}
	b := e.manifest.NewBatch()
	defer b.Close()
	if d != nil {
		id, err := readCounter(e.manifest, "shard-id")
		if err != nil {
			return err
		}
		sh.ID, sh.FromFile = id+1, d.FirstOpen()
		if err := b.Set(counterKey("shard-id"), binary.BigEndian.AppendUint64(nil, id+1), nil); err != nil {
			return err
		}
	}
	if err := putShard(b, sh); err != nil {
		return err
	}
	for _, s := range segs {
		s.Shard = sh.Name
		if err := putSegment(b, s); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	if d != nil {
		for i := range segs {
			segs[i].Shard = sh.Name
		}
		if err := e.recoverSharedShard(sh, segs, sharedStartOfSegments(sh, segs, nil), nil); err != nil {
			return err
		}
	} else if err := e.recoverShard(sh); err != nil {
		return err
	}
	if f := e.cfg.Events.ShardRecovered; f != nil {
		e.events.post("shard restored", func() error { return f(sh, segs) })
	}
	return nil
}
