package tiering

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"regexp"
	"slices"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"strata/catalog"
	"strata/engine/record"
	"strata/parquet"
)

// Retype rewrites a shard's cold objects that lack the typed columns its
// Parquet options now ask for (a topic given strata.value.schema after it
// tiered): object by object, each record read from the object and
// written again with the columns, under a new key. Each swap's commit
// point is the shard's manifest, whose entry moves to the new object
// while the old one is listed as retired; the topic's table and this
// node's catalog follow (Reconcile does it too, on every node, so a crash
// after the manifest's swap finishes there). The old object stays
// RetiredGrace, for the reads begun before the swap. A kill at any point leaves every
// offset in exactly one object the manifest names, old or new. It waits
// for a tiering run to end, and lets one go between objects; it goes at
// BytesPerSecond like tiering; progress, if set, hears of each object.
// docs/typed.md, "Backfill".
func (j *Job) Retype(ctx context.Context, shard string, progress func(RetypeProgress)) (RetypeSummary, error) {
	if err := j.lockRun(ctx); err != nil {
		return RetypeSummary{}, err
	}
	locked := true
	defer func() {
		if locked {
			j.running.Unlock()
		}
	}()
	var limiter *rate.Limiter
	if j.BytesPerSecond > 0 {
		limiter = rate.NewLimiter(rate.Limit(j.BytesPerSecond), int(min(j.BytesPerSecond, 1<<20)))
	}
	if _, err := j.reconcile(ctx, shard); err != nil {
		return RetypeSummary{}, err
	}
	segs, err := j.Catalog.Segments(shard)
	if err != nil {
		return RetypeSummary{}, err
	}
	want := j.parquetFor(shard).Typed
	if len(want) == 0 {
		why := error(errors.New("strata.value.schema and strata.key.schema are none"))
		if j.TypedErr != nil {
			if err := j.TypedErr(shard); err != nil {
				why = err
			}
		}
		return RetypeSummary{}, fmt.Errorf("%w: %s: %w", ErrNoTypedColumns, shard, why)
	}
	var sum RetypeSummary
	var todo []catalog.Segment
	for _, s := range segs {
		if (s.State == catalog.Cold || s.State == catalog.Remote) && s.ObjectKey != "" {
			todo = append(todo, s)
		}
	}
	sum.Objects = len(todo)
	for i, s := range todo {
		if i > 0 {
			// Between objects a tiering run may go: a long retype must not
			// hold up uploads (and local disk) for hours.
			j.running.Unlock()
			locked = false
			if err := j.lockRun(ctx); err != nil {
				return sum, err
			}
			locked = true
			now, err := j.Catalog.SegmentsFrom(shard, s.StartOffset, 1)
			if err != nil {
				return sum, err
			}
			if len(now) == 0 || now[0].No != s.No || now[0].State != catalog.Cold && now[0].State != catalog.Remote {
				continue // gone meanwhile (retention)
			}
			s = now[0]
		}
		has, err := j.hasTyped(ctx, s, want)
		if err != nil {
			return sum, err
		}
		p := RetypeProgress{Shard: shard, Object: i + 1, Of: len(todo), Key: s.ObjectKey}
		if has {
			sum.Skipped++
			p.Skipped = true
		} else {
			key, size, err := j.retypeOne(ctx, shard, s, limiter)
			if err != nil {
				return sum, fmt.Errorf("retyping %s segment %d (%s): %w", shard, s.No, s.ObjectKey, err)
			}
			sum.Rewritten++
			sum.Bytes += size
			p.Key, p.Bytes = key, size
		}
		if progress != nil {
			progress(p)
		}
	}
	return sum, nil
}

// ErrNoTypedColumns says a retype has no typed column to write: the topic
// asks for none, or they cannot be made now (the error says why).
var ErrNoTypedColumns = errors.New("retype: no typed column to write")

// errGone says an object a retype rewrote left its manifest meanwhile.
var errGone = errors.New("gone")

// lockRun waits for the job to be free of runs (Run, Retype), as long as
// ctx lets it.
func (j *Job) lockRun(ctx context.Context) error {
	for !j.running.TryLock() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// RetypeProgress is one object's part in a Retype.
type RetypeProgress struct {
	Shard   string `json:"shard"`
	Object  int    `json:"object"`
	Of      int    `json:"of"`
	Key     string `json:"key"` // the new object's, or the one left as it was
	Bytes   int64  `json:"bytes"`
	Skipped bool   `json:"skipped"` // it had the columns already
}

// RetypeSummary is what a Retype did.
type RetypeSummary struct {
	Objects   int   `json:"objects"`
	Rewritten int   `json:"rewritten"`
	Skipped   int   `json:"skipped"`
	Bytes     int64 `json:"bytes"`
}

func (j *Job) parquetFor(shard string) parquet.Options {
	if j.ParquetFor != nil {
		return j.ParquetFor(shard)
	}
	return j.Parquet
}

// hasTyped says whether segment s's object carries every typed column of
// want (none wanted: it has them all).
func (j *Job) hasTyped(ctx context.Context, s catalog.Segment, want []parquet.TypedColumn) (bool, error) {
	if len(want) == 0 {
		return true, nil
	}
	f, _, err := j.openVerified(ctx, s.ObjectKey, s.ObjectSize, s)
	if err != nil {
		return false, err
	}
	for _, c := range want {
		if !slices.Contains(f.TypedColumns(), c.Name) {
			return false, nil
		}
	}
	return true, nil
}

// retypedName is an object's key with its retype generation: the first
// retype of …-{end}.parquet is …-{end}.r1.parquet, the next .r2.
var retypedName = regexp.MustCompile(`^(.*?)(?:\.r(\d+))?\.parquet$`)

func retypedKey(key string) string {
	m := retypedName.FindStringSubmatch(key)
	gen, _ := strconv.Atoi(m[2])
	return fmt.Sprintf("%s.r%d.parquet", m[1], gen+1)
}

// retypeOne rewrites segment s's object with the typed columns under a
// new key, checks the new object holds the same records, and swaps it in:
// the manifest (the commit point), the table, the catalog.
func (j *Job) retypeOne(ctx context.Context, shard string, s catalog.Segment, limiter *rate.Limiter) (string, int64, error) {
	loc, err := LocationOf(shard)
	if err != nil {
		return "", 0, err
	}
	old, key := s.ObjectKey, retypedKey(s.ObjectKey)
	if j.Claims != nil {
		// One node at a time writes the new key, as one uploads a segment.
		release, ok, err := j.Claims.Claim(ctx, shard, s.StartOffset, s.EndOffset)
		if err != nil {
			return "", 0, fmt.Errorf("claiming offsets %d to %d: %w", s.StartOffset, s.EndOffset, err)
		}
		if !ok {
			return "", 0, fmt.Errorf("offsets %d to %d: another node is retyping or tiering them; run the retype again later", s.StartOffset, s.EndOffset)
		}
		defer release()
	}
	src, _, err := j.openVerified(ctx, old, s.ObjectSize, s)
	if err != nil {
		return "", 0, err
	}
	opts := j.parquetFor(shard)
	opts.Metadata = map[string]string{}
	for _, k := range []string{MetaShard, MetaSegment, MetaSegmentCRC32C, MetaSegmentRecords} {
		opts.Metadata[k], _ = src.Lookup(k)
	}
	full := ObjectReader(ctx, j.Bucket, old)
	src, err = parquet.Open(full, s.ObjectSize)
	if err != nil {
		return "", 0, fmt.Errorf("opening %s: %w", old, err)
	}
	// The records' digest, written and read back: the new object holds
	// the old one's records byte for byte.
	var wrote uint32
	sum, err := j.writeObject(ctx, key, opts, limiter, func(w *parquet.Writer) (err error) {
		wrote, err = eachRecord(src, nil, w.Write)
		return err
	})
	if err != nil {
		return "", 0, err
	}
	size, err := j.verify(ctx, key, s)
	if err != nil {
		return "", 0, err
	}
	if err := j.readBack(ctx, key, size, wrote); err != nil {
		return "", 0, fmt.Errorf("%w: the records of %s", err, old)
	}
	// The commit point: the manifest names the new object for the
	// segment's offsets, and the old one as retired.
	if err := j.swapIn(ctx, loc, key, []string{old}, func(e ManifestEntry) ManifestEntry {
		e.Key, e.ObjectBytes = key, size
		return e
	}); err != nil {
		return "", 0, err
	}
	j.recordUndecoded(shard, opts.Typed, sum)
	if _, err := j.reconcile(ctx, shard); err != nil {
		return "", 0, err
	}
	j.log().Info("cold object rewritten with typed columns", "shard", shard, "segment", s.No, "old", old, "key", key, "bytes", size)
	return key, size, nil
}

// writeObject uploads the Parquet object fill writes at key, converting
// as it uploads (at the limiter's rate, if set): a retype's or a merge's
// new object.
func (j *Job) writeObject(ctx context.Context, key string, opts parquet.Options, limiter *rate.Limiter, fill func(*parquet.Writer) error) (parquet.Summary, error) {
	pipe := newAheadPipe(convertAhead)
	done := make(chan struct{})
	var sum parquet.Summary
	go func() {
		defer close(done)
		w, err := parquet.NewWriter(pipe, opts)
		if err == nil {
			err = fill(w)
		}
		if err == nil {
			sum, err = w.Close()
		}
		pipe.CloseWithError(err)
	}()
	var body io.Reader = pipe
	if limiter != nil {
		body = &limitedReader{ctx: ctx, r: pipe, l: limiter}
	}
	err := j.Bucket.Upload(ctx, key, body)
	pipe.CloseReader(err)
	<-done
	if err != nil {
		return sum, fmt.Errorf("upload %s: %w", key, err)
	}
	return sum, nil
}

// readBack reads the object at key of size bytes back whole and checks
// its records' CRC-32C is want; an object that does not is deleted, no
// one's yet.
func (j *Job) readBack(ctx context.Context, key string, size int64, want uint32) error {
	dst, err := parquet.Open(ObjectReader(ctx, j.Bucket, key), size)
	if err != nil {
		return fmt.Errorf("reading %s back: %w", key, err)
	}
	read, err := eachRecord(dst, nil, func(*record.Record) error { return nil })
	if err != nil || read != want {
		j.Bucket.Delete(ctx, key)
		return errors.Join(fmt.Errorf("%s does not read back as written", key), err)
	}
	return nil
}

// swapIn is a rewrite's commit point: in the shard's manifest the entries
// of the objects olds give way to one entry for the new object at key
// (entry makes it from the first of theirs), and olds are listed as
// retired, kept for the reads begun before. A manifest that no longer
// lists one of olds refuses the swap for sure, and the new object, no
// one's, is deleted.
func (j *Job) swapIn(ctx context.Context, loc Location, key string, olds []string, entry func(first ManifestEntry) ManifestEntry) error {
	err := updateManifest(ctx, j.Bucket, loc.ManifestKey(j.Prefix), func(m *Manifest) (bool, error) {
		var first ManifestEntry
		for i, old := range olds {
			e, ok := m.byKey(old)
			if !ok {
				return false, fmt.Errorf("the manifest no longer lists %s (retention, or the topic's deletion, took it): %w", old, errGone)
			}
			if i == 0 {
				first = e
			}
		}
		m.Objects = slices.DeleteFunc(m.Objects, func(e ManifestEntry) bool { return slices.Contains(olds, e.Key) })
		m.put(entry(first))
		for _, old := range olds {
			m.Retired = append(m.Retired, Retired{Key: old, By: key, At: j.now().UTC()})
		}
		return true, nil
	})
	if errors.Is(err, errGone) {
		if derr := j.Bucket.Delete(ctx, key); derr != nil {
			err = errors.Join(err, fmt.Errorf("deleting %s: %w", key, derr))
		}
	}
	return err
}

// eachRecord calls fn with every record of f, in order, and returns the
// CRC-32C of their encodings; also, if set, gets each encoding too.
func eachRecord(f *parquet.File, also io.Writer, fn func(*record.Record) error) (uint32, error) {
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var buf []byte
	for g := range f.Groups() {
		recs, err := f.ReadGroup(g)
		if err != nil {
			return 0, err
		}
		for i := range recs {
			if buf, err = record.Append(buf[:0], &recs[i]); err != nil {
				return 0, err
			}
			crc.Write(buf)
			if also != nil {
				also.Write(buf)
			}
			if err := fn(&recs[i]); err != nil {
				return 0, err
			}
		}
	}
	return crc.Sum32(), nil
}

// Retired is an object a retype replaced: kept RetiredGrace from At, for
// the reads begun before its swap, then left to the orphan sweep (which
// also keeps it while a kept snapshot of the topic's table names it).
// Another node's catalog that still names it moves to By at its next run,
// or when its cold reader finds it gone (Reconcile).
type Retired struct {
	Key string    `json:"key"`
	By  string    `json:"by"`
	At  time.Time `json:"at"`
	// InTable says the topic's table names By in Key's place (or has
	// no table to).
	InTable bool `json:"in_table,omitempty"`
}

// Reconcile is reconcile for the cold reader, which finds an object
// gone: a retype on another node replaced it, and this node's catalog has
// not followed yet.
func (j *Job) Reconcile(ctx context.Context, shard string) error {
	_, err := j.reconcile(ctx, shard)
	return err
}

// reconcile moves this node's catalog, and the topic's table, to the
// objects the shard's manifest names where a retype replaced the ones
// they name (a retype's swap on another node, or one that died after its
// manifest's), and drops retired entries past the orphan grace. It
// returns how many segments moved.
func (j *Job) reconcile(ctx context.Context, shard string) (int, error) {
	loc, err := LocationOf(shard)
	if err != nil {
		return 0, nil
	}
	m, err := readManifest(ctx, j.Bucket, loc.ManifestKey(j.Prefix))
	if err != nil {
		return 0, err
	}
	segs, err := j.Catalog.Segments(shard)
	if err != nil {
		return 0, err
	}
	moved := 0
	// The table first, once for every swap it has not followed: it is the
	// bucket's, every node's, and the manifest records it followed.
	swaps := map[string]ManifestEntry{}
	for _, r := range m.Retired {
		if e, ok := m.byKey(r.By); ok && !r.InTable && j.Tables != nil {
			swaps[r.Key] = e
		}
	}
	if len(swaps) > 0 {
		if err := j.Tables.Replace(ctx, shard, swaps); err != nil {
			return 0, fmt.Errorf("replacing %d retyped objects in the topic's table: %w", len(swaps), err)
		}
		if err := updateManifest(ctx, j.Bucket, loc.ManifestKey(j.Prefix), func(m *Manifest) (bool, error) {
			changed := false
			for i, r := range m.Retired {
				if _, ok := swaps[r.Key]; ok && !r.InTable {
					m.Retired[i].InTable, changed = true, true
				}
			}
			return changed, nil
		}); err != nil {
			return 0, err
		}
	}
	// This node's catalog: a segment whose object the manifest no longer
	// lists, where it lists another for exactly its offsets, moves to it
	// once its footer says it is the segment's.
	listed := map[string]bool{}
	for _, e := range m.Objects {
		listed[e.Key] = true
	}
	for i := 0; i < len(segs); i++ {
		s := segs[i]
		if s.State != catalog.Cold && s.State != catalog.Remote || s.ObjectKey == "" || listed[s.ObjectKey] {
			continue
		}
		e, ok := m.entry(s.StartOffset, s.EndOffset)
		if !ok {
			if e, ok = m.mergedFrom(s.StartOffset); ok {
				n, err := j.followMerge(ctx, shard, segs[i:], e, listed)
				if err != nil {
					return moved, err
				}
				i += max(n, 1) - 1
				moved += n
			}
			continue
		}
		size, err := j.verify(ctx, e.Key, s)
		if errors.Is(err, errDescribesOther) {
			// Another copy's object for these offsets, not a retype of
			// this segment's: not this node's to take.
			j.log().Warn("the manifest lists another object for a segment's offsets, made from another copy; the segment keeps its own",
				"shard", shard, "segment", s.No, "key", s.ObjectKey, "listed", e.Key, "err", err)
			continue
		}
		if err != nil {
			return moved, err
		}
		if _, err := j.Catalog.Transition(shard, s.No, s.State, s.State, func(c *catalog.Segment) {
			c.ObjectKey, c.ObjectSize, c.TieredAt = e.Key, size, j.now().UTC()
		}); err != nil {
			return moved, err
		}
		j.log().Info("segment moved to the object a retype made", "shard", shard, "segment", s.No, "old", s.ObjectKey, "key", e.Key)
		moved++
	}
	grace := j.orphanGrace()
	if slices.ContainsFunc(m.Retired, func(r Retired) bool { return r.InTable && j.now().Sub(r.At) > grace }) {
		err = updateManifest(ctx, j.Bucket, loc.ManifestKey(j.Prefix), func(m *Manifest) (bool, error) {
			n := len(m.Retired)
			m.Retired = slices.DeleteFunc(m.Retired, func(r Retired) bool { return r.InTable && j.now().Sub(r.At) > grace })
			return len(m.Retired) != n, nil
		})
	}
	return moved, err
}

// followMerge moves this node's catalog to a merged object e, which
// holds the offsets of the first segments of segs: those are made one
// segment (catalog.Merge) once the object's footer says it holds exactly
// them. It returns how many segments it merged (0: none, as when one of
// them still has its local copy here, to follow once it has gone).
func (j *Job) followMerge(ctx context.Context, shard string, segs []catalog.Segment, e ManifestEntry, listed map[string]bool) (int, error) {
	var run []catalog.Segment
	for _, s := range segs {
		if s.StartOffset > e.EndOffset {
			break
		}
		run = append(run, s)
	}
	last := run[len(run)-1]
	if len(run) < 2 || last.EndOffset != e.EndOffset || slices.ContainsFunc(run, func(s catalog.Segment) bool {
		return s.State != catalog.Remote || listed[s.ObjectKey]
	}) {
		j.log().Warn("the manifest lists a merged object this node's segments cannot follow yet", "shard", shard,
			"key", e.Key, "start_offset", e.StartOffset, "end_offset", e.EndOffset, "segments", len(run))
		return 0, nil
	}
	merged, err := catalog.Merged(run)
	if err != nil {
		return 0, err
	}
	merged.Checksum = e.SegmentChecksum
	size, err := j.verify(ctx, e.Key, merged)
	if err != nil {
		return 0, err
	}
	nos := make([]uint64, len(run))
	for i, s := range run {
		nos[i] = s.No
	}
	if _, err := j.Catalog.Merge(shard, nos, func(c *catalog.Segment) {
		c.ObjectKey, c.ObjectSize, c.Checksum, c.TieredAt = e.Key, size, e.SegmentChecksum, j.now().UTC()
	}); err != nil {
		return 0, err
	}
	j.log().Info("segments merged into the object a merge made", "shard", shard, "segments", nos, "key", e.Key)
	return len(run), nil
}

// retiredGrace is how long a retype's old object stays once replaced.
func (j *Job) retiredGrace() time.Duration {
	if j.RetiredGrace != 0 {
		return max(j.RetiredGrace, 0)
	}
	return time.Minute
}

func (j *Job) orphanGrace() time.Duration {
	if j.OrphanGrace > 0 {
		return j.OrphanGrace
	}
	return time.Hour
}

// byKey finds the entry of the object at key.
func (m *Manifest) byKey(key string) (ManifestEntry, bool) {
	for _, e := range m.Objects {
		if e.Key == key {
			return e, true
		}
	}
	return ManifestEntry{}, false
}
