package tiering

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"

	"golang.org/x/time/rate"

	"strata/catalog"
	"strata/engine/record"
	"strata/parquet"
)

// MergeProgress is one merge done, for Merge's progress.
type MergeProgress struct {
	Shard   string   `json:"shard"`
	Merge   int      `json:"merge"`
	Of      int      `json:"of"`
	Objects []string `json:"objects"`
	Key     string   `json:"key"`
	Bytes   int64    `json:"bytes"`
}

// MergeSummary is what Merge did to one shard.
type MergeSummary struct {
	Merges  int   `json:"merges"`
	Objects int   `json:"objects"` // the small objects merged
	Bytes   int64 `json:"bytes"`   // of the objects written
}

// Merge merges a shard's small cold objects (PlanMerges with its
// policy's Merging) until none is due: each run of them is read, written
// again as one object under the key of its whole offset range, checked to
// hold the same records, and swapped in. The commit point is the shard's
// manifest, where the run's entries become the new object's and the old
// objects are listed as retired (kept RetiredGrace, for the reads begun
// before); the topic's table and this node's catalog follow (reconcile,
// which every run does too, so a crash after the manifest's swap is
// finished there). A kill at any point leaves every offset in exactly one
// object the manifest names. It waits for a tiering run to end and lets
// one go between merges; it goes at BytesPerSecond like tiering. A
// tiering run merges too, once per shard (Run). docs/compaction.md,
// "Small-file merging".
func (j *Job) Merge(ctx context.Context, shard string, progress func(MergeProgress)) (MergeSummary, error) {
	var sum MergeSummary
	var limiter *rate.Limiter
	if j.BytesPerSecond > 0 {
		limiter = rate.NewLimiter(rate.Limit(j.BytesPerSecond), int(min(j.BytesPerSecond, 1<<20)))
	}
	for {
		if err := j.lockRun(ctx); err != nil {
			return sum, err
		}
		p, err := j.mergeDue(ctx, shard, limiter)
		j.running.Unlock()
		if err != nil || p.Key == "" {
			return sum, err
		}
		sum.Merges++
		sum.Objects += len(p.Objects)
		sum.Bytes += p.Bytes
		p.Merge = sum.Merges
		p.Of += sum.Merges - 1
		if progress != nil {
			progress(p)
		}
	}
}

// mergeDue does the first merge of the shard that is due, if one is;
// Of is how many are. The run's lock is held.
func (j *Job) mergeDue(ctx context.Context, shard string, limiter *rate.Limiter) (MergeProgress, error) {
	policy := j.policyFor(shard).Merging
	if policy.TargetBytes <= 0 {
		return MergeProgress{}, nil
	}
	if j.Claims != nil {
		// Another node's catalog holds the same segments, some of them
		// still with local copies it has not dropped: it cannot follow a
		// merge yet.
		return MergeProgress{}, errors.New("merging cold objects is for one node: a cluster's replicas cannot follow a merge yet")
	}
	j.parquetFor(shard) // asks the registry for the typed columns: TypedErr says how it went
	if j.TypedErr != nil {
		if err := j.TypedErr(shard); err != nil {
			// Its typed columns would be written null (with the reason)
			// for every record, the ones that decoded before too.
			j.log().Warn("merging waits: the topic's typed columns cannot be made now", "shard", shard, "err", err)
			return MergeProgress{}, nil
		}
	}
	if _, err := j.reconcile(ctx, shard); err != nil {
		return MergeProgress{}, err
	}
	segs, err := j.Catalog.Segments(shard)
	if err != nil {
		return MergeProgress{}, err
	}
	if policy.LogStart, _, err = j.Engine.Watermarks(ctx, shard); err != nil {
		return MergeProgress{}, err
	}
	merges := PlanMerges(j.now(), segs, policy)
	if len(merges) == 0 {
		return MergeProgress{}, nil
	}
	m := merges[0]
	key, size, err := j.mergeOne(ctx, shard, m, limiter)
	if errors.Is(err, errMergeWaits) {
		j.log().Warn("merging waits", "shard", shard, "why", err)
		return MergeProgress{}, nil
	}
	if err != nil {
		return MergeProgress{}, fmt.Errorf("merging %s %s: %w", shard, m, err)
	}
	j.merges.Add(1)
	j.mergedObjects.Add(uint64(len(m.Objects)))
	j.mergedBytes.Add(uint64(size))
	return MergeProgress{Shard: shard, Merge: 1, Of: len(merges), Objects: m.Objects, Key: key, Bytes: size}, nil
}

// Merged is how many merges were done since the start, how many small
// objects they merged and how many bytes they wrote.
func (j *Job) Merged() (merges, objects, bytes uint64) {
	return j.merges.Load(), j.mergedObjects.Load(), j.mergedBytes.Load()
}

// policyFor is the shard's tiering policy.
func (j *Job) policyFor(shard string) Policy {
	if j.PolicyFor != nil {
		return j.PolicyFor(shard)
	}
	return j.Policy
}

// errMergeWaits says a merge is not to be done now: it would lose what
// its objects hold.
var errMergeWaits = errors.New("merging waits")

// mergedKey names the object of a merge: the deterministic key of its
// whole offset range, which no single segment's object has, so a merge
// retried after a crash writes the same key again.
func (j *Job) mergedKey(shard string, m Merge) (string, error) {
	loc, err := LocationOf(shard)
	if err != nil {
		return "", err
	}
	return loc.ObjectKey(j.Prefix, m.Segments[0].StartOffset, m.Segments[len(m.Segments)-1].EndOffset), nil
}

// mergeOne writes merge m's object, checks it holds the same records as
// the objects it replaces, and swaps it in.
func (j *Job) mergeOne(ctx context.Context, shard string, m Merge, limiter *rate.Limiter) (string, int64, error) {
	loc, err := LocationOf(shard)
	if err != nil {
		return "", 0, err
	}
	key, err := j.mergedKey(shard, m)
	if err != nil {
		return "", 0, err
	}
	merged, err := catalog.Merged(m.Segments)
	if err != nil {
		return "", 0, err
	}
	opts := j.parquetFor(shard)
	srcs := make([]*parquet.File, len(m.Segments))
	for i, s := range m.Segments {
		if _, _, err := j.openVerified(ctx, s.ObjectKey, s.ObjectSize, s); err != nil {
			return "", 0, err
		}
		if srcs[i], err = parquet.Open(ObjectReader(ctx, j.Bucket, s.ObjectKey), s.ObjectSize); err != nil {
			return "", 0, fmt.Errorf("opening %s: %w", s.ObjectKey, err)
		}
		for _, col := range srcs[i].TypedColumns() {
			if !slices.ContainsFunc(opts.Typed, func(c parquet.TypedColumn) bool { return c.Name == col }) {
				// The topic asks for the column, or did, but it cannot be
				// made now (no registry, or none that answers): merged
				// without it, the values decoded before would be gone.
				return "", 0, fmt.Errorf("%s has the typed column %s, which the topic's objects are written without now: %w", s.ObjectKey, col, errMergeWaits)
			}
		}
	}
	// The merged object's checksum is the CRC-32C of all its records'
	// encodings, as a segment's is of its file: the same value the
	// segments' files would give one after the other.
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var wrote uint64
	opts.Metadata = map[string]string{MetaShard: shard, MetaSegment: strconv.FormatUint(merged.No, 10),
		MetaSegmentRecords: strconv.FormatUint(merged.Records, 10)}
	psum, err := j.writeObject(ctx, key, opts, limiter, func(w *parquet.Writer) error {
		for i, src := range srcs {
			n, err := eachRecord(src, crc, func(r *record.Record) error { wrote++; return w.Write(r) })
			if err != nil {
				return err
			}
			if n != m.Segments[i].Checksum {
				return fmt.Errorf("%s reads back records whose checksum is %d, its segment's is %d", m.Segments[i].ObjectKey, n, m.Segments[i].Checksum)
			}
		}
		merged.Checksum = crc.Sum32()
		w.SetMetadata(MetaSegmentCRC32C, strconv.FormatUint(uint64(merged.Checksum), 10))
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	if wrote != merged.Records {
		return "", 0, fmt.Errorf("the objects of %s hold %d records, their segments %d", m, wrote, merged.Records)
	}
	size, err := j.verify(ctx, key, merged)
	if err != nil {
		return "", 0, err
	}
	if err := j.readBack(ctx, key, size, merged.Checksum); err != nil {
		return "", 0, fmt.Errorf("%w: the records of %s", err, m)
	}
	// The commit point: the manifest names the new object for the whole
	// run of offsets, and the old ones as retired.
	if err := j.swapIn(ctx, loc, key, m.Objects, func(ManifestEntry) ManifestEntry { return entryOf(key, merged, size) }); err != nil {
		return "", 0, err
	}
	j.recordUndecoded(shard, opts.Typed, psum)
	if _, err := j.reconcile(ctx, shard); err != nil {
		return "", 0, err
	}
	j.log().Info("cold objects merged", "shard", shard, "objects", len(m.Objects), "start_offset", merged.StartOffset,
		"end_offset", merged.EndOffset, "key", key, "bytes", size)
	return key, size, nil
}
