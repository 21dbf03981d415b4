package tiering

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"strata/catalog"
	"strata/engine/integrity"
	"strata/engine/record"
	"strata/parquet"
	"strata/tiering/objstore"
)

// The cold scrub reads the objects the bucket holds for this node's shards
// back, one at a time and held to a byte rate, and checks each against what
// its shard's manifest (and this node's catalog) says it is: present, of
// the recorded size, a footer describing the segment, and records whose
// encoding has the sealed segment's CRC-32C. The upload's verify reads only
// the footer (the converter checked the pages as it wrote them); the bytes
// a bucket keeps for months get no such check unless something reads them
// all. An object found wrong is uploaded again from this node's good local
// copy, through the upload's own steps (convert against the sealed
// checksum, upload under the same key, verify); one with no good copy here
// is reported, since its offsets are then lost (docs/tiering.md, "The cold
// scrub").

// ErrColdObjectLost is wrapped by a cold read of an object that is not in
// the bucket or is cut short: the offsets it held cannot be served. It
// answers integrity.IsCorruption, as a damaged object's errors do, so a
// Kafka fetch of those offsets answers KAFKA_STORAGE_ERROR.
var ErrColdObjectLost = integrity.Sentinel("the cold object is missing or cut short")

// ColdProblem is what a cold scrub found wrong with an object.
type ColdProblem string

const (
	ColdMissing  ColdProblem = "missing"  // not in the bucket
	ColdSize     ColdProblem = "size"     // another size than the manifest (or catalog) records
	ColdDamaged  ColdProblem = "damaged"  // its footer or its records do not verify
	ColdUnlisted ColdProblem = "unlisted" // this node's catalog names it, its shard's manifest does not
)

// What became of a finding.
const (
	ColdRepaired     = "repaired"     // uploaded again from a good copy (or listed again)
	ColdUnrepairable = "unrepairable" // no good copy here: its offsets are lost unless an operator restores the object
	ColdRetry        = "retry"        // the repair failed or had to wait (a tiering run in progress); the next scrub tries again
)

// ColdFinding is one object the cold scrub found wrong.
type ColdFinding struct {
	Shard       string      `json:"shard"`
	Key         string      `json:"key"`
	StartOffset uint64      `json:"start_offset"`
	EndOffset   uint64      `json:"end_offset"`
	Problem     ColdProblem `json:"problem"`
	Error       string      `json:"error"`
	Found       time.Time   `json:"found"`
	State       string      `json:"state"`
	// Detail says how it was repaired, or why it could not be.
	Detail string `json:"detail,omitempty"`
}

// ColdScrubSummary is what one cold scrub run did.
type ColdScrubSummary struct {
	Started  time.Time     `json:"started"`
	Finished time.Time     `json:"finished"`
	Checked  int           `json:"checked"`    // objects checked
	Bytes    int64         `json:"bytes_read"` // object bytes read
	Findings []ColdFinding `json:"findings"`
	// Complete: the run checked every object, from the first to the
	// last. A run stopped by its byte budget, or resumed after one, is not
	// complete; the next run goes on after the last object checked.
	Complete bool `json:"complete"`
	// Errors are shards or objects that could not be checked (the bucket
	// did not answer): not findings, tried again next run.
	Errors []string `json:"errors,omitempty"`
}

// ColdScrubber checks the objects of this node's shards; Job gives it the
// bucket, the catalog, the engine and the upload path.
type ColdScrubber struct {
	Job *Job
	// BytesPerSecond holds the reads (and a repair's upload) to this rate,
	// so a scrub never takes the bandwidth produce and cold reads need
	// (0: no bound).
	BytesPerSecond int64
	// BudgetBytes ends a run once it has read this many bytes (0: no
	// bound); the next run begins after the last object checked.
	BudgetBytes int64
	// Scrubs, if set, picks the shards this node checks: in a cluster the
	// ones it leads, so the nodes that hold copies of a partition do not
	// all read its objects. nil: every shard of this node.
	Scrubs func(shard string) bool

	running sync.Mutex
	cursor  struct{ shard, key string } // the last object checked, when a run stopped at its budget
}

// ErrColdScrubRunning is returned by Run while another run is in progress.
var ErrColdScrubRunning = errors.New("a cold scrub is already in progress")

// coldTarget is one object and what it should be.
type coldTarget struct {
	shard  string
	key    string
	entry  ManifestEntry    // what the manifest says (listed), or the catalog's description
	seg    *catalog.Segment // this node's catalog entry for the object, if any
	listed bool             // in the manifest
	loc    Location
}

// Run checks every object of the shards it scrubs, from where the last
// run stopped, until its budget is spent.
func (c *ColdScrubber) Run(ctx context.Context) (ColdScrubSummary, error) {
	if !c.running.TryLock() {
		return ColdScrubSummary{}, ErrColdScrubRunning
	}
	defer c.running.Unlock()
	j := c.Job
	sum := ColdScrubSummary{Started: j.now()}
	var limiter *rate.Limiter
	if c.BytesPerSecond > 0 {
		limiter = rate.NewLimiter(rate.Limit(c.BytesPerSecond), int(min(c.BytesPerSecond, 1<<20)))
	}
	j.Engine.SyncEvents()
	shards, err := j.Engine.Shards(ctx)
	if err != nil {
		return sum, err
	}
	slices.Sort(shards)
	from := c.cursor
	c.cursor = struct{ shard, key string }{}
	// Complete only if this run began at the first object: one resumed
	// after a budget's stop did not check those before it.
	sum.Complete = from == c.cursor
	for _, shard := range shards {
		if shard < from.shard || (c.Scrubs != nil && !c.Scrubs(shard)) {
			continue
		}
		targets, err := c.targets(ctx, shard)
		if err != nil {
			if ctx.Err() != nil {
				return sum, ctx.Err()
			}
			sum.Errors = append(sum.Errors, fmt.Sprintf("shard %s: %v", shard, err))
			continue
		}
		for _, t := range targets {
			if shard == from.shard && t.key <= from.key {
				continue
			}
			if c.BudgetBytes > 0 && sum.Bytes >= c.BudgetBytes {
				sum.Complete = false
				sum.Finished = j.now()
				return sum, nil
			}
			f, read, err := c.check(ctx, t, limiter)
			sum.Bytes += read
			if ctx.Err() != nil {
				return sum, ctx.Err()
			}
			if err != nil {
				sum.Errors = append(sum.Errors, fmt.Sprintf("object %s: %v", t.key, err))
				continue
			}
			sum.Checked++
			c.cursor = struct{ shard, key string }{shard, t.key}
			if f != nil && c.repair(ctx, t, f, limiter) {
				sum.Findings = append(sum.Findings, *f)
			}
		}
	}
	c.cursor = struct{ shard, key string }{}
	sum.Finished = j.now()
	return sum, nil
}

// targets lists a shard's objects in key order: every manifest entry, and
// every object this node's catalog holds cold or remote that the manifest
// does not list.
func (c *ColdScrubber) targets(ctx context.Context, shard string) ([]coldTarget, error) {
	j := c.Job
	loc, err := LocationOf(shard)
	if err != nil {
		return nil, nil // not a topic's partition: never tiered
	}
	m, err := readManifest(ctx, j.Bucket, loc.ManifestKey(j.Prefix))
	if err != nil {
		return nil, err
	}
	segs, err := j.Catalog.Segments(shard)
	if err != nil {
		return nil, err
	}
	byKey := map[string]*catalog.Segment{}
	for i := range segs {
		if s := &segs[i]; s.ObjectKey != "" && (s.State == catalog.Cold || s.State == catalog.Remote) {
			byKey[s.ObjectKey] = s
		}
	}
	var out []coldTarget
	for _, e := range m.Objects {
		out = append(out, coldTarget{shard: shard, key: e.Key, entry: e, seg: byKey[e.Key], listed: true, loc: loc})
		delete(byKey, e.Key)
	}
	for key, s := range byKey {
		out = append(out, coldTarget{shard: shard, key: key, entry: entryOf(key, *s, s.ObjectSize), seg: s, loc: loc})
	}
	slices.SortFunc(out, func(a, b coldTarget) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// check reads one object whole and says what is wrong with it (nil: it
// verifies). err is a failure to check (the bucket did not answer), not a
// finding.
func (c *ColdScrubber) check(ctx context.Context, t coldTarget, limiter *rate.Limiter) (f *ColdFinding, read int64, err error) {
	j := c.Job
	found := func(p ColdProblem, cause error) (*ColdFinding, int64, error) {
		return &ColdFinding{Shard: t.shard, Key: t.key, StartOffset: t.entry.StartOffset, EndOffset: t.entry.EndOffset,
			Problem: p, Error: cause.Error(), Found: j.now().UTC()}, read, nil
	}
	a, err := j.Bucket.Stat(ctx, t.key)
	if errors.Is(err, objstore.ErrNotFound) {
		return found(ColdMissing, fmt.Errorf("object %s (offsets %d to %d) is not in the bucket", t.key, t.entry.StartOffset, t.entry.EndOffset))
	}
	if err != nil {
		return nil, 0, err
	}
	switch {
	case t.entry.ObjectBytes > 0 && a.Size != t.entry.ObjectBytes:
		return found(ColdSize, fmt.Errorf("object %s has %d bytes, its manifest entry records %d", t.key, a.Size, t.entry.ObjectBytes))
	case t.seg != nil && t.seg.ObjectSize > 0 && a.Size != t.seg.ObjectSize:
		return found(ColdSize, fmt.Errorf("object %s has %d bytes, this node's catalog records %d", t.key, a.Size, t.seg.ObjectSize))
	}
	want := catalog.Segment{StartOffset: t.entry.StartOffset, EndOffset: t.entry.EndOffset, Records: t.entry.Records,
		Size: t.entry.SegmentBytes, Checksum: t.entry.SegmentChecksum}
	pf, r, err := j.openVerified(ctx, t.key, a.Size, want)
	read += r.fetched()
	if err != nil {
		if !damage(err) {
			return nil, read, err
		}
		return found(ColdDamaged, err)
	}
	n, err := c.checkRecords(ctx, t.key, pf, r, want, limiter)
	read += n
	if err != nil {
		if !damage(err) {
			return nil, read, err
		}
		return found(ColdDamaged, err)
	}
	if !t.listed {
		return found(ColdUnlisted, fmt.Errorf("this node's catalog holds %s as segment %d's object, its shard's manifest does not list it", t.key, t.seg.No))
	}
	return nil, read, nil
}

// damage tells an object whose bytes are wrong from a read that failed: a
// short object, or one whose footer or pages do not verify.
func damage(err error) bool {
	return integrity.IsCorruption(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errDescribesOther)
}

// errDescribesOther is under a footer that describes another segment.
var errDescribesOther = errors.New("the object describes another segment")

// checkRecords reads every row group (one ranged read each, held to the
// limiter), decodes it, and checks that the records, encoded as the
// segment stored them, have the sealed segment's size, count and CRC-32C.
func (c *ColdScrubber) checkRecords(ctx context.Context, key string, pf *parquet.File, ends *endsReader, want catalog.Segment, limiter *rate.Limiter) (read int64, err error) {
	var sum record.Sum
	for gi, g := range pf.Groups() {
		buf := make([]byte, g.End-g.Start)
		for at := 0; at < len(buf); {
			chunk := len(buf) - at
			if limiter != nil {
				chunk = min(chunk, limiter.Burst())
				if err := limiter.WaitN(ctx, chunk); err != nil {
					return read, err
				}
			}
			got, err := c.Job.Bucket.ReadAt(ctx, key, buf[at:at+chunk], g.Start+int64(at))
			read += int64(got)
			if err != nil && !(errors.Is(err, io.EOF) && got == chunk) {
				return read, fmt.Errorf("object %s row group %d bytes %d-%d: %w", key, gi, g.Start+int64(at), g.Start+int64(at+chunk), err)
			}
			at += chunk
		}
		recs, err := pf.DecodeRows(gi, 0, g.Rows, spanBytes([]parquet.Span{{Start: g.Start, End: g.End}}, [][]byte{buf}))
		if errors.Is(err, parquet.ErrNoFastPath) {
			ends.extra = append(ends.extra[:0], span{g.Start, buf})
			recs, err = pf.ReadGroup(gi)
		}
		if err != nil {
			return read, fmt.Errorf("object %s row group %d: %w", key, gi, err)
		}
		for i := range recs {
			if _, err := sum.Add(&recs[i]); err != nil {
				return read, fmt.Errorf("object %s offset %d: %w", key, recs[i].Offset, err)
			}
		}
	}
	if sum.Checksum() != want.Checksum || sum.Bytes != want.Size || sum.Records != want.Records {
		return read, fmt.Errorf("object %s holds %d records encoding to %d bytes with crc32c %08x; the segment was sealed with %d records, %d bytes, crc32c %08x: %w",
			key, sum.Records, sum.Bytes, sum.Checksum(), want.Records, want.Size, want.Checksum, record.ErrCorrupt)
	}
	return read, nil
}

// repair uploads the object again from this node's good copy of its
// segment, or relists it, and records the outcome in f. false: the object
// left the shard's manifest and this node's catalog since it was checked
// (retention expired it, its topic was deleted): no finding.
func (c *ColdScrubber) repair(ctx context.Context, t coldTarget, f *ColdFinding, limiter *rate.Limiter) bool {
	j := c.Job
	log := j.log().With("shard", t.shard, "key", t.key, "start_offset", t.entry.StartOffset, "end_offset", t.entry.EndOffset, "problem", f.Problem)
	// A tiering run changes the catalog and the manifests (expiry, drops,
	// uploads); a repair waits until none is running, so that it never
	// writes an object a run has just expired.
	if !j.running.TryLock() {
		f.State, f.Detail = ColdRetry, "a tiering run was in progress; the next scrub repairs it"
		log.Warn("cold scrub: an object is wrong; its repair waits for the next scrub (a tiering run is in progress)", "err", f.Error)
		return true
	}
	defer j.running.Unlock()
	// The check ran beside tiering runs: one may have expired the object
	// (catalog, then object, then manifest entry) while it was read.
	if gone, err := c.gone(ctx, t); err != nil {
		f.State, f.Detail = ColdRetry, "reading its manifest again: "+err.Error()
		return true
	} else if gone {
		return false
	}
	if f.Problem == ColdUnlisted {
		if err := j.addToManifest(ctx, t.shard, t.loc, t.key, *t.seg, t.seg.ObjectSize); err != nil {
			f.State, f.Detail = ColdRetry, "listing it in the manifest again: "+err.Error()
			log.Error("cold scrub: an object the manifest lost could not be listed again", "err", err)
			return true
		}
		f.State, f.Detail = ColdRepaired, "listed in the manifest again"
		log.Warn("cold scrub: an object missing from its shard's manifest was listed again", "err", f.Error)
		return true
	}
	s, why := c.localCopy(t)
	if why != "" {
		c.lost(t, f, why)
		return true
	}
	err := c.reupload(ctx, t, s, limiter)
	switch {
	case err == nil:
		f.State, f.Detail = ColdRepaired, fmt.Sprintf("uploaded again from this node's local copy of segment %d", s.No)
		log.Warn("cold scrub: a wrong object was uploaded again from the local copy", "segment", s.No, "err", f.Error)
	case integrity.IsCorruption(err):
		c.lost(t, f, fmt.Sprintf("this node's local copy of segment %d is damaged too: %v", s.No, err))
	default:
		f.State, f.Detail = ColdRetry, "uploading it again: "+err.Error()
		log.Error("cold scrub: uploading a wrong object again failed; the next scrub tries again", "segment", s.No, "err", err)
	}
	return true
}

// gone says whether the object left its shard since it was listed: the
// manifest no longer lists it (a listed object), or this node's catalog
// no longer holds it cold or remote (an unlisted one).
func (c *ColdScrubber) gone(ctx context.Context, t coldTarget) (bool, error) {
	j := c.Job
	if t.listed {
		m, err := readManifest(ctx, j.Bucket, t.loc.ManifestKey(j.Prefix))
		if err != nil {
			return false, err
		}
		_, ok := m.entry(t.entry.StartOffset, t.entry.EndOffset)
		return !ok, nil
	}
	segs, err := j.Catalog.Segments(t.shard)
	if errors.Is(err, catalog.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	for _, s := range segs {
		if s.ObjectKey == t.key && (s.State == catalog.Cold || s.State == catalog.Remote) {
			return false, nil
		}
	}
	return true, nil
}

// localCopy finds this node's local copy of the object's segment: the same
// offsets, sealed with the same checksum, size and records, its file still
// here (cold). why says why there is none.
func (c *ColdScrubber) localCopy(t coldTarget) (catalog.Segment, string) {
	segs, err := c.Job.Catalog.Segments(t.shard)
	if err != nil {
		return catalog.Segment{}, "reading the catalog: " + err.Error()
	}
	for _, s := range segs {
		if s.StartOffset != t.entry.StartOffset || s.EndOffset != t.entry.EndOffset {
			continue
		}
		switch {
		case s.State != catalog.Cold:
			return catalog.Segment{}, fmt.Sprintf("this node's segment %d holding these offsets is %s: no local copy", s.No, s.State)
		case s.Checksum != t.entry.SegmentChecksum || s.Size != t.entry.SegmentBytes || s.Records != t.entry.Records:
			return catalog.Segment{}, fmt.Sprintf("this node's segment %d holding these offsets was sealed with crc32c %08x, %d bytes, %d records; the object was made from %08x, %d bytes, %d records",
				s.No, s.Checksum, s.Size, s.Records, t.entry.SegmentChecksum, t.entry.SegmentBytes, t.entry.Records)
		}
		return s, ""
	}
	return catalog.Segment{}, "this node holds no segment with exactly these offsets"
}

// reupload converts segment s from its local copy (checked against its
// sealed checksum on the way), uploads it under the object's key and
// verifies the footer, as an upload does. The manifest entry and the
// catalog already name the key and its size, which the rebuilt object
// must have.
func (c *ColdScrubber) reupload(ctx context.Context, t coldTarget, s catalog.Segment, limiter *rate.Limiter) error {
	j := c.Job
	cp, err := LocalReplica{j.Engine}.SegmentCopy(ctx, t.shard, s)
	if err != nil {
		return err
	}
	// Readers open an object by its recorded size (the catalog, the
	// Iceberg table's data file): one rebuilt to another size (the topic's
	// Parquet options changed since its upload) must not replace even a
	// damaged object, so it is sized before anything is written.
	cf, err := cp.Open(ctx)
	if err != nil {
		return err
	}
	var n countingWriter
	if _, _, err := j.convert(t.shard, s, cf, false, &n); err != nil {
		return err
	}
	if int64(n) != t.entry.ObjectBytes {
		return fmt.Errorf("rebuilt from the local copy it would be %d bytes, its manifest entry records %d: the topic's Parquet options changed since its upload, "+
			"and the catalog and any Iceberg table name the old size", n, t.entry.ObjectBytes)
	}
	if cf, err = cp.Open(ctx); err != nil {
		return err
	}
	if err := j.put(ctx, t.shard, t.key, s, cf, false, limiter); err != nil {
		return err
	}
	_, err = j.verify(ctx, t.key, s)
	return err
}

// countingWriter counts what is written to it and keeps nothing.
type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// lost reports an object no good copy here can replace.
func (c *ColdScrubber) lost(t coldTarget, f *ColdFinding, why string) {
	f.State, f.Detail = ColdUnrepairable, why
	c.Job.log().Error("cold scrub: an object is missing or damaged and no good copy is here to upload again: offsets "+
		fmt.Sprintf("%d to %d of %s cannot be read", t.entry.StartOffset, t.entry.EndOffset, t.shard)+
		"; restore the object at its key from a backup or from another node's local copy (the manifest entry gives its crc32c, records and size), "+
		"or, if the records are gone for good, DeleteRecords past the end offset lets consumers move on",
		"shard", t.shard, "key", t.key, "start_offset", t.entry.StartOffset, "end_offset", t.entry.EndOffset,
		"records", t.entry.Records, "problem", f.Problem, "err", f.Error, "why", why)
}
