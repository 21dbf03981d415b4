package tiering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"strata/catalog"
	"strata/engine/segment"
	"strata/tiering/objstore"
)

// Listen returns the engine's listener that keeps the catalog in step with
// what the engine does (the engine publishes and never waits on it) and
// clears a deleted shard's objects from the bucket. Every handler is
// idempotent: ShardRecovered replays a shard's whole manifest at each start,
// so a change the catalog missed (a crash between the engine's write and
// the event) is made then. With no bucket (b nil), only the catalog listens.
func Listen(cat catalog.Catalog, b objstore.Bucket, prefix string, log *slog.Logger) segment.EventListener {
	return ListenTables(cat, b, prefix, log, nil)
}

// TableForgetter removes a deleted shard's partition from its topic's
// table (icetable's Tables).
type TableForgetter interface {
	Forget(ctx context.Context, shard string) error
}

// ListenTables is Listen, with a deleted shard's partition removed from its
// topic's table (tables, if not nil) before its objects leave the bucket,
// so no reader of the table is handed a file the deletion removed. A
// failure leaves the objects, and the deletion's retry forgets again.
func ListenTables(cat catalog.Catalog, b objstore.Bucket, prefix string, log *slog.Logger, tables TableForgetter) segment.EventListener {
	l := &listener{cat: cat, b: b, prefix: prefix, log: log}
	forget := func(context.Context, string) error { return nil }
	if b != nil {
		objects := ForgetShard(b, prefix, log)
		forget = objects
		if tables != nil {
			forget = func(ctx context.Context, shard string) error {
				if err := tables.Forget(ctx, shard); err != nil {
					return err
				}
				return objects(ctx, shard)
			}
		}
	}
	return segment.EventListener{
		ShardCreated:   l.shardCreated,
		SegmentSealed:  l.segmentSealed,
		SegmentDropped: l.segmentDropped,
		LowWatermark: func(shard string, low uint64) error {
			_, err := cat.SetLowWatermark(shard, low)
			return err
		},
		ShardRecovered: l.shardRecovered,
		ShardDeleted: func(ctx context.Context, shard string, created time.Time) error {
			cur, err := cat.Shard(shard)
			switch {
			case errors.Is(err, catalog.ErrNotFound):
			case err != nil:
				return err
			case !created.IsZero() && !cur.Created.Equal(created):
				// A retry of an earlier shard's deletion, and the name
				// lives again: its catalog entries and objects are the new
				// shard's (the old one's are left to the orphan sweep).
				log.Warn("a deleted shard's name is in use again; leaving the catalog and the bucket to the new one",
					"shard", shard, "deleted_created", created, "live_created", cur.Created)
				return nil
			default:
				if err := cat.DeleteShard(shard); err != nil && !errors.Is(err, catalog.ErrNotFound) {
					return err
				}
			}
			return forget(ctx, shard)
		},
	}
}

type listener struct {
	cat    catalog.Catalog
	b      objstore.Bucket
	prefix string
	log    *slog.Logger
}

func (l *listener) shardCreated(sh segment.ShardMeta, _ segment.SegmentMeta) error {
	if err := l.createShard(sh); err != nil {
		return err
	}
	// A shard made at a start offset (CreateShardAt): the offsets below it
	// are another node's, never this shard's to serve.
	if sh.LowWatermark > 0 {
		_, err := l.cat.SetLowWatermark(sh.Name, sh.LowWatermark)
		return err
	}
	return nil
}

func (l *listener) createShard(sh segment.ShardMeta) error {
	_, _, err := l.cat.CreateShard(sh.Name, sh.Created)
	if !errors.Is(err, catalog.ErrExists) {
		return err
	}
	old, err := l.cat.Shard(sh.Name)
	if err != nil || old.Created.Equal(sh.Created) {
		return err
	}
	// An earlier shard of the same name whose deletion the catalog never
	// heard of: the engine's is the one that exists.
	if err := l.cat.DeleteShard(sh.Name); err != nil {
		return err
	}
	_, _, err = l.cat.CreateShard(sh.Name, sh.Created)
	return err
}

func (l *listener) segmentSealed(sealed, next segment.SegmentMeta) error {
	_, err := l.cat.Roll(toCatalog(sealed), next.Created)
	if errors.Is(err, catalog.ErrConflict) {
		return nil // sealed already: this event was replayed
	}
	return err
}

// segmentDropped: after tiering the catalog already says remote (the job
// records it before the engine drops the file); after retention the
// segment is deleted in every tier that still has it.
func (l *listener) segmentDropped(s segment.SegmentMeta) error {
	to := catalog.Remote
	if s.State == segment.SegmentDeleted {
		to = catalog.Deleted
	}
	return l.moveTo(s.Shard, s.No, to)
}

func (l *listener) moveTo(shard string, no uint64, to catalog.State) error {
	segs, err := l.cat.Segments(shard)
	if err != nil {
		return err
	}
	for _, c := range segs {
		if c.No == no && c.State != to && catalog.CanTransition(c.State, to) {
			_, err := l.cat.Transition(shard, no, c.State, to, nil)
			return err
		}
	}
	return nil
}

// shardRecovered brings the catalog's view of a shard up to the engine's.
func (l *listener) shardRecovered(sh segment.ShardMeta, segs []segment.SegmentMeta) error {
	cur, err := l.cat.Shard(sh.Name)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return l.restore(sh, segs)
	case err != nil:
		return err
	case !cur.Created.Equal(sh.Created):
		if err := l.cat.DeleteShard(sh.Name); err != nil {
			return err
		}
		return l.restore(sh, segs)
	}
	known, err := l.cat.Segments(sh.Name)
	if err != nil {
		return err
	}
	state := map[uint64]catalog.State{}
	for _, c := range known {
		state[c.No] = c.State
	}
	for i, s := range segs {
		if s.State == segment.SegmentActive {
			break
		}
		if state[s.No] == catalog.Active { // the seal never reached the catalog
			next, err := l.cat.Roll(toCatalog(s), segs[i+1].Created)
			if err != nil {
				return err
			}
			state[s.No], state[next.No] = catalog.Sealed, catalog.Active
		}
		if s.State == segment.SegmentRemote && state[s.No] == catalog.Cold {
			if err := l.moveTo(sh.Name, s.No, catalog.Remote); err != nil {
				return err
			}
		}
	}
	// Sealed segments the engine no longer holds went by retention.
	held := map[uint64]bool{}
	for _, s := range segs {
		held[s.No] = true
	}
	for _, c := range known {
		if c.State == catalog.Sealed && !held[c.No] && len(segs) > 0 && c.No < segs[0].No {
			if err := l.moveTo(sh.Name, c.No, catalog.Deleted); err != nil {
				return err
			}
		}
	}
	if cur.LowWatermark < sh.LowWatermark {
		_, err = l.cat.SetLowWatermark(sh.Name, sh.LowWatermark)
	}
	return err
}

// restore records a shard the catalog does not have (its folder was lost or
// it predates the catalog): its tiered segments get their objects, as the
// shard's manifest in the bucket names them, or else their deterministic
// keys. Segments whose objects were merged (docs/compaction.md) become
// the one segment of the merged object, as the merge made them.
func (l *listener) restore(sh segment.ShardMeta, segs []segment.SegmentMeta) error {
	var m Manifest
	var loc Location
	if l.b != nil && slices.ContainsFunc(segs, func(s segment.SegmentMeta) bool { return s.State == segment.SegmentRemote }) {
		var err error
		if loc, err = LocationOf(sh.Name); err != nil {
			return err
		}
		if m, err = readManifest(context.Background(), l.b, loc.ManifestKey(l.prefix)); err != nil {
			return fmt.Errorf("shard %s: reading its manifest: %w", sh.Name, err)
		}
	}
	out := make([]catalog.Segment, 0, len(segs))
	var run []catalog.Segment // segments of one merged object, so far
	for _, s := range segs {
		c := toCatalog(s)
		if s.State != segment.SegmentRemote || l.b == nil {
			out = append(out, c)
			continue
		}
		i := slices.IndexFunc(m.Objects, func(e ManifestEntry) bool { return e.StartOffset <= s.StartOffset && s.EndOffset <= e.EndOffset })
		switch {
		case i >= 0 && (m.Objects[i].StartOffset != s.StartOffset || m.Objects[i].EndOffset != s.EndOffset):
			// A merged object's segments: they become the one segment the
			// merge made, as its entry describes it whole. The engine may
			// hold only its last ones, the first gone below the log start.
			e := m.Objects[i]
			if run = append(run, c); s.EndOffset < e.EndOffset {
				continue
			}
			merged := c
			merged.No, merged.StartOffset, merged.EndOffset = e.Segment, e.StartOffset, e.EndOffset
			merged.MinTimestamp, merged.MaxTimestamp, merged.Records, merged.Size = e.MinTimestamp, e.MaxTimestamp, e.Records, e.SegmentBytes
			merged.Checksum, merged.Created = e.SegmentChecksum, run[0].Created
			merged.ObjectKey, merged.ObjectSize, merged.TieredAt = e.Key, e.ObjectBytes, s.SealedAt
			out, run = append(out, merged), nil
			continue
		case i >= 0:
			c.ObjectKey, c.ObjectSize = m.Objects[i].Key, m.Objects[i].ObjectBytes
		default:
			c.ObjectKey = loc.ObjectKey(l.prefix, s.StartOffset, s.EndOffset)
			a, err := l.b.Stat(context.Background(), c.ObjectKey)
			if err != nil {
				return fmt.Errorf("shard %s: segment %d is tiered but its object %s: %w", sh.Name, s.No, c.ObjectKey, err)
			}
			c.ObjectSize = a.Size
		}
		c.TieredAt = s.SealedAt
		out = append(out, c)
	}
	if len(run) > 0 {
		return fmt.Errorf("shard %s: segments %d to %d are part of a merged object the engine does not hold the rest of", sh.Name, run[0].No, run[len(run)-1].No)
	}
	l.log.Warn("the catalog did not have a shard the engine holds; restored it from the engine's manifest", "shard", sh.Name, "segments", len(segs))
	return l.cat.Restore(catalog.Shard{Name: sh.Name, LowWatermark: sh.LowWatermark, Created: sh.Created}, out)
}

func toCatalog(s segment.SegmentMeta) catalog.Segment {
	state := catalog.Sealed
	switch s.State {
	case segment.SegmentActive:
		state = catalog.Active
	case segment.SegmentRemote:
		state = catalog.Remote
	case segment.SegmentDeleted:
		state = catalog.Deleted
	}
	return catalog.Segment{Shard: s.Shard, No: s.No, State: state, StartOffset: s.StartOffset, EndOffset: s.EndOffset,
		MinTimestamp: s.MinTimestamp, MaxTimestamp: s.MaxTimestamp, Records: s.Records, Size: s.Size, Checksum: s.Checksum,
		Created: s.Created, SealedAt: s.SealedAt}
}
