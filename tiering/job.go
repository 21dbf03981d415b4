package tiering

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"strata/catalog"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/parquet"
	"strata/tiering/objstore"
)

// Job is the tiering pipeline. Run does one pass; cmd runs it on a
// cron schedule. One pass runs at a time.
type Job struct {
	Engine  *segment.Engine
	Catalog catalog.Catalog
	Bucket  objstore.Bucket
	// Prefix is prepended to every object key (may be empty).
	Prefix  string
	Policy  Policy
	Parquet parquet.Options
	// PolicyFor and ParquetFor, if set, give a shard its topic's own
	// policy and Parquet options (its topic configs), asked at every pass
	// so a change applies at the next one; else Policy and Parquet.
	PolicyFor  func(shard string) Policy
	ParquetFor func(shard string) parquet.Options
	// Concurrency bounds shards worked on at once (2).
	Concurrency int
	// BytesPerSecond caps upload bandwidth across the run (0: no cap).
	BytesPerSecond int64
	// OrphanGrace: an object no catalog entry names is deleted once it is
	// this old (1h); younger ones may belong to an upload in flight.
	OrphanGrace time.Duration
	// TypedErr, if set, says why ParquetFor(shard) has no typed columns
	// the shard's topic asks for (a registry or table error), for Retype's
	// answer.
	TypedErr func(shard string) error
	// RetiredGrace: a retype's old object stays this long after its swap
	// (1m; negative: none), for the cold reads begun before it; Hive-style
	// readers of the bucket see both copies meanwhile (docs/typed.md).
	RetiredGrace time.Duration
	Log          *slog.Logger
	Now          func() time.Time

	// Replicas picks the copy of a sealed segment to convert (the local
	// one by default; replication adds remote replicas here).
	Replicas Replicas

	// Claims, in a cluster, makes sure one node at a time tiers a segment
	// several nodes hold; nil on a single node, where there is no one to
	// share with.
	Claims Claims

	// Tables, if set, commits what the run tiered to the topics' Iceberg
	// tables (docs/iceberg.md) once every shard's uploads are done.
	Tables TableCommitter

	running    sync.Mutex
	closing    sync.Once
	mu         sync.Mutex
	history    []RunSummary
	failed     map[Step]uint64 // every error since the start, by step
	claimsLost atomic.Uint64
	// merges counts the merges done since the start, the objects they
	// merged and the bytes they wrote.
	merges, mergedObjects, mergedBytes atomic.Uint64
	// logStarts is, by shard, the log start last recorded in its manifest.
	logStarts map[string]uint64
	// waitWarned is, by shard, the start of the segment whose long wait
	// for a claim was last logged.
	waitWarned map[string]uint64
	// undecoded counts the records uploaded whose value (or key) did not
	// decode into its typed column, by shard and column.
	undecoded map[TypedColumn]uint64
}

// TypedColumn names one typed column of one shard's objects.
type TypedColumn struct{ Shard, Column string }

// Undecoded is, by shard and typed column, how many records uploaded
// since the start kept only their bytes: their value (or key) did not
// decode (docs/typed.md).
func (j *Job) Undecoded() map[TypedColumn]uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.undecoded)
}

// claimWaitWarn is how long after its seal a segment may go unclaimed
// before the job says so: in a cluster the claim waits for the segment's
// seal record (docs/replication.md, "Seal agreement"), and the shard's
// later segments wait with it.
const claimWaitWarn = 5 * time.Minute

// RunSummary is what one pass did.
type RunSummary struct {
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished"`
	Uploaded []UploadSummary `json:"uploaded"`
	// Adopted lists segments whose object was already in the bucket, made
	// by another node from an identical copy: recorded, not uploaded.
	Adopted []UploadSummary `json:"adopted,omitempty"`
	// ClaimsLost counts shards whose next segment another node was tiering
	// (claimed): they wait for the next run.
	ClaimsLost     int   `json:"claims_lost,omitempty"`
	Bytes          int64 `json:"bytes"`
	DroppedLocal   int   `json:"dropped_local"`
	Expired        int   `json:"expired"`
	OrphansDeleted int   `json:"orphans_deleted"`
	// Merges lists the small cold objects merged into one (at most one
	// merge per shard a run).
	Merges []MergeProgress `json:"merges,omitempty"`
	Errors []RunError      `json:"errors"`
}

// Step names the part of a run a failure happened in.
type Step string

const (
	StepPlan      Step = "plan"       // reading a shard's segments
	StepUpload    Step = "upload"     // convert, upload, verify, commit
	StepDropLocal Step = "drop_local" // removing a tiered segment's local copy
	StepExpire    Step = "expire"     // retention
	StepSweep     Step = "sweep"      // orphaned objects and staged uploads
	StepTable     Step = "table"      // the topics' Iceberg table commits
	StepReconcile Step = "reconcile"  // following a retype's or merge's swap (retype.go)
	StepMerge     Step = "merge"      // merging small cold objects (mergejob.go)
)

// TableCommitter commits tiered objects to tables over them (icetable's
// Tables). CommitTables is given every shard of the run, with its log
// start (0 when the run could not read it), and reads what was tiered from
// the shards' manifests, so an object whose commit failed or never started
// (the process died) is committed by a later run. RemoveBelow is called
// before the objects of segments below a new log start leave the bucket
// (retention, DeleteRecords): the table stops naming them first, so no
// reader of the table's current snapshot is handed a removed file, and
// its history drops the snapshots that name them (deleting those it
// can). Referenced names the objects a kept snapshot still names, which
// retention and the orphan sweep spare until the tables let go.
type TableCommitter interface {
	CommitTables(ctx context.Context, shards map[string]uint64) error
	RemoveBelow(ctx context.Context, shard string, logStart uint64) error
	Referenced(ctx context.Context, topics []string) (map[string]bool, error)
	// Replace swaps each of the shard's objects named in swaps for the
	// one its entry names (a retype), where its table holds it.
	Replace(ctx context.Context, shard string, swaps map[string]ManifestEntry) error
}

// RunError is one failure of a run, with the shard and segment it concerns
// (none for a sweep). It unwraps to the cause.
type RunError struct {
	Step    Step   `json:"step"`
	Shard   string `json:"shard,omitempty"`
	Segment uint64 `json:"segment"`
	Message string `json:"error"`
	Err     error  `json:"-"`
}

// Error uses Message, so a RunError read back from /v1/tiering/jobs says
// the same as the one the run made.
func (e RunError) Error() string {
	switch {
	case e.Shard == "":
		return fmt.Sprintf("tiering %s: %s", e.Step, e.Message)
	case e.Step == StepPlan:
		return fmt.Sprintf("tiering %s of %s: %s", e.Step, e.Shard, e.Message)
	}
	return fmt.Sprintf("tiering %s of %s segment %d: %s", e.Step, e.Shard, e.Segment, e.Message)
}

func (e RunError) Unwrap() error { return e.Err }

// UploadSummary is one segment moved to the cold tier.
type UploadSummary struct {
	Shard       string `json:"shard"`
	Segment     uint64 `json:"segment"`
	Key         string `json:"key"`
	Records     uint64 `json:"records"`
	ObjectBytes int64  `json:"object_bytes"`
}

// Replicas finds the copy of a sealed segment to read, once the segment is
// claimed. The job checks the copy's bytes against Copy.Checksum while
// converting it, so a replica whose copy has rotted publishes nothing.
type Replicas interface {
	SegmentCopy(ctx context.Context, shard string, s catalog.Segment) (Copy, error)
}

// Copy is the copy of a sealed segment an upload reads.
type Copy struct {
	// Checksum is the CRC-32C the copy's bytes must have: the segment's own
	// for this node's copy; for another node's, the one the cluster sealed
	// the segment with (this node's own copy did not agree, so its catalog
	// checksum is not the segment's).
	Checksum uint32
	// Remote: another node's copy. Its bytes are fetched only if the
	// segment is not in the bucket already (Open).
	Remote bool
	// Open makes the copy readable as a local file.
	Open func(ctx context.Context) (CopyFile, error)
}

// CopyFile is an opened copy: this node's segment, read through the
// engine (Scan), or a file in strata's record format (Path: another
// node's copy rebuilt here).
type CopyFile struct {
	Path string
	// Size and Records are the file's; for a remote copy they are what was
	// rebuilt, not what this node's catalog says of its own copy.
	Size    int64
	Records uint64
	// Remove, if set, deletes the file once the upload is done (a remote
	// copy's temporary file).
	Remove func()
	// Scan, if set, reads the copy instead of Path: the engine streams its
	// segment's records, from the segment's file or out of the shared
	// files (strata.file.model=shared), so the job need not know which.
	// It returns the CRC-32C and length of the record bytes, as ScanFile.
	Scan func(fn func(*record.Record) error) (crc uint32, size int64, err error)
}

// LocalReplica is this node's own copy.
type LocalReplica struct{ Engine *segment.Engine }

// SegmentCopy reads the engine's segment with ScanSegment, whichever file
// model the shard has (its own segment files or the shared files).
func (l LocalReplica) SegmentCopy(ctx context.Context, shard string, s catalog.Segment) (Copy, error) {
	if _, _, err := l.Engine.Watermarks(ctx, shard); err != nil {
		return Copy{}, err
	}
	return Copy{Checksum: s.Checksum, Open: func(context.Context) (CopyFile, error) {
		return CopyFile{Size: s.Size, Records: s.Records, Scan: func(fn func(*record.Record) error) (uint32, int64, error) {
			return l.Engine.ScanSegment(shard, s.No, fn)
		}}, nil
	}}, nil
}

func (j *Job) replicas() Replicas {
	if j.Replicas != nil {
		return j.Replicas
	}
	return LocalReplica{j.Engine}
}

// Claims makes sure one node at a time tiers a segment that several nodes
// hold: after a leadership move or with replication, identical copies of
// one sealed segment sit on several nodes that share the bucket. A segment
// is named by its shard and offsets, not its number, which each node gives
// its own segments.
type Claims interface {
	// Claim takes the segment for this node; ok is false while another
	// node holds it. release gives it back. A claim is held under the
	// claimant's lease, so a node that dies loses its claims when its
	// lease expires.
	Claim(ctx context.Context, shard string, startOffset, endOffset uint64) (release func(), ok bool, err error)
}

// errClaimedElsewhere: another node is tiering the segment; it is not an
// error of this node's run.
var errClaimedElsewhere = errors.New("the segment is claimed by another node")

// ErrCopiesDiffer is wrapped by the error of a segment whose offsets the
// bucket already holds, made from a copy with other bytes than this node's:
// two nodes' copies of one offset range disagree, which replication must
// never let happen. The job neither uses that object nor uploads over it.
var ErrCopiesDiffer = errors.New("copies of the segment differ")

// ClaimsLost counts, since the start, the segments this node left to the
// node that had claimed them.
func (j *Job) ClaimsLost() uint64 { return j.claimsLost.Load() }

// ErrRunning is returned by Run while another pass is in progress.
var ErrRunning = errors.New("a tiering run is already in progress")

func (j *Job) now() time.Time {
	if j.Now != nil {
		return j.Now()
	}
	return time.Now()
}

func (j *Job) log() *slog.Logger {
	if j.Log != nil {
		return j.Log
	}
	return slog.Default()
}

// Failures counts every error of every run since the start, by step.
func (j *Job) Failures() map[Step]uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[Step]uint64{}
	for k, v := range j.failed {
		out[k] = v
	}
	return out
}

// History returns the most recent runs, newest last.
func (j *Job) History() []RunSummary {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]RunSummary(nil), j.history...)
}

// Run does one pass over every shard: upload what is due, drop local
// copies past retention, sweep orphaned objects. A failure with one segment
// is recorded and the pass goes on with the others.
// Close waits for a run in progress to end and refuses later ones
// (ErrRunning): the storage a run uses can then be closed under it.
// It may be called more than once.
func (j *Job) Close() { j.closing.Do(j.running.Lock) }

func (j *Job) Run(ctx context.Context) (RunSummary, error) {
	if !j.running.TryLock() {
		return RunSummary{}, ErrRunning
	}
	defer j.running.Unlock()
	sum := RunSummary{Started: j.now()}
	var mu sync.Mutex
	record := func(f func()) { mu.Lock(); f(); mu.Unlock() }
	failed := func(step Step, shard string, no uint64, err error) {
		e := RunError{Step: step, Shard: shard, Segment: no, Message: err.Error(), Err: err}
		j.log().Error("tiering step failed", "step", step, "shard", shard, "segment", no, "err", err)
		record(func() { sum.Errors = append(sum.Errors, e) })
	}
	var limiter *rate.Limiter
	if j.BytesPerSecond > 0 {
		limiter = rate.NewLimiter(rate.Limit(j.BytesPerSecond), int(min(j.BytesPerSecond, 1<<20)))
	}
	j.Engine.SyncEvents() // the catalog has heard of every roll so far
	shards, err := j.Engine.Shards(ctx)
	if err != nil {
		return sum, err
	}
	g, gctx := errgroup.WithContext(ctx)
	limit := j.Concurrency
	if limit <= 0 {
		limit = 2
	}
	g.SetLimit(limit)
	for _, shard := range shards {
		g.Go(func() error {
			segs, err := j.Catalog.Segments(shard)
			if err != nil {
				failed(StepPlan, shard, 0, err)
				return nil
			}
			n, reconcileErr := j.reconcile(gctx, shard)
			if reconcileErr != nil {
				failed(StepReconcile, shard, 0, reconcileErr) // the shard's tiering goes on
			} else if n > 0 {
				if segs, err = j.Catalog.Segments(shard); err != nil {
					failed(StepPlan, shard, 0, err)
					return nil
				}
			}
			if no, err := j.catchUp(gctx, shard, segs); err != nil {
				failed(StepDropLocal, shard, no, err)
				return nil
			}
			policy := j.policyFor(shard)
			if j.Claims == nil {
				// One node: runs do not overlap, so no upload recorded
				// before this one began is still going.
				policy.StaleBefore = sum.Started
			}
			if policy.LogStart, _, err = j.Engine.Watermarks(gctx, shard); err != nil {
				failed(StepPlan, shard, 0, err)
				return nil
			}
			plan := PlanShard(j.now(), segs, policy)
			if reconcileErr != nil {
				// Retention waits for the catalog to follow the manifest:
				// expiring segments whose objects a merge or a retype
				// replaced would leave the new object in the manifest for
				// offsets no longer in the log.
				plan.Expire = nil
			}
			for _, s := range plan.Upload {
				up, adopted, err := j.upload(gctx, shard, s, limiter)
				if errors.Is(err, errClaimedElsewhere) {
					// The claimant uploads it (the next run finds its object
					// in the manifest and records it), or its seal for the
					// cluster is still to come: each run asks again. Later
					// segments wait.
					j.claimsLost.Add(1)
					j.claimWaits(shard, s)
					record(func() { sum.ClaimsLost++ })
					break
				}
				if err != nil {
					failed(StepUpload, shard, s.No, err)
					break // later segments wait, so the cold tier stays contiguous
				}
				record(func() {
					if adopted {
						sum.Adopted = append(sum.Adopted, up)
						return
					}
					sum.Uploaded = append(sum.Uploaded, up)
					sum.Bytes += up.ObjectBytes
				})
			}
			replan := func() bool { // what a step just changed may make more due
				if segs, err = j.Catalog.Segments(shard); err != nil {
					failed(StepPlan, shard, 0, err)
					return false
				}
				plan = PlanShard(j.now(), segs, policy)
				return true
			}
			if len(plan.Upload) > 0 && !replan() {
				return nil
			}
			// Expiry first: a local copy goes only once every older
			// segment has left local disk.
			if n, no, err := j.expireAll(gctx, shard, plan.Expire); err != nil {
				record(func() { sum.Expired += n })
				failed(StepExpire, shard, no, err)
				return nil
			}
			record(func() { sum.Expired += len(plan.Expire) })
			if len(plan.Expire) > 0 && !replan() {
				return nil
			}
			for _, s := range plan.DropLocal {
				if err := j.dropLocal(gctx, shard, s); err != nil {
					failed(StepDropLocal, shard, s.No, err)
					break
				}
				record(func() { sum.DroppedLocal++ })
			}
			if j.Claims == nil {
				// In a cluster a node's log start is its own copy's (a
				// shard split across nodes at a leadership move), not the
				// shard's.
				if err := j.recordLogStart(gctx, shard); err != nil {
					failed(StepExpire, shard, 0, err)
				}
			}
			return nil
		})
	}
	g.Wait()
	if j.Tables != nil {
		// Each shard's log start as the run left it (expiry raises it).
		logStarts := make(map[string]uint64, len(shards))
		for _, shard := range shards {
			logStarts[shard], _, _ = j.Engine.Watermarks(ctx, shard)
		}
		if err := j.Tables.CommitTables(ctx, logStarts); err != nil {
			failed(StepTable, "", 0, err)
		}
	}
	if j.Claims == nil {
		// After the tables took the run's objects, one shard at a time:
		// each merge is its own replace snapshot of its topic's table.
		for _, shard := range shards {
			p, err := j.mergeDue(ctx, shard, limiter)
			if err != nil {
				failed(StepMerge, shard, 0, err)
			} else if p.Key != "" {
				sum.Merges = append(sum.Merges, p)
			}
		}
	}
	n, err := j.sweepOrphans(ctx)
	sum.OrphansDeleted = n
	if err != nil {
		failed(StepSweep, "", 0, err)
	}
	sum.Finished = j.now()
	j.mu.Lock()
	if j.failed == nil {
		j.failed = map[Step]uint64{}
	}
	for _, e := range sum.Errors {
		j.failed[e.Step]++
	}
	j.history = append(j.history, sum)
	if len(j.history) > 20 {
		j.history = j.history[len(j.history)-20:]
	}
	j.mu.Unlock()
	j.log().Info("tiering run", "uploaded", len(sum.Uploaded), "adopted", len(sum.Adopted), "claims_lost", sum.ClaimsLost,
		"bytes", sum.Bytes, "dropped_local", sum.DroppedLocal, "merges", len(sum.Merges),
		"orphans_deleted", sum.OrphansDeleted, "errors", len(sum.Errors), "took", sum.Finished.Sub(sum.Started))
	return sum, nil
}

// claimWaits logs a segment the job could not claim: at Warn, once per
// segment, when it has waited past claimWaitWarn since its seal, since the
// shard's later segments stay local meanwhile.
func (j *Job) claimWaits(shard string, s catalog.Segment) {
	waited := j.now().Sub(s.SealedAt)
	j.mu.Lock()
	warn := waited > claimWaitWarn && !s.SealedAt.IsZero() && (j.waitWarned[shard] != s.StartOffset+1)
	if warn {
		if j.waitWarned == nil {
			j.waitWarned = map[string]uint64{}
		}
		j.waitWarned[shard] = s.StartOffset + 1 // +1: offset 0 is a start too
	}
	j.mu.Unlock()
	if warn {
		j.log().Warn("tiering: a sealed segment is still not claimable, and the shard's later segments wait for it: another node's claim, or no seal record for the cluster yet (strata_replica_unsealed_segments)",
			"shard", shard, "segment", s.No, "start_offset", s.StartOffset, "end_offset", s.EndOffset, "sealed_ago", waited.Round(time.Second))
		return
	}
	j.log().Debug("segment not claimed here; it waits for the next run", "shard", shard,
		"segment", s.No, "start_offset", s.StartOffset, "end_offset", s.EndOffset)
}

// convertAhead bounds how far conversion runs ahead of the upload: one
// default S3 part (16 MiB), so a part is converted while the previous one
// is sent; it adds that much memory per upload in flight.
const convertAhead = 16 << 20

// Metadata keys strata adds to each object's footer for verification.
const (
	MetaShard          = "strata.shard"
	MetaSegment        = "strata.segment"
	MetaSegmentCRC32C  = "strata.segment_crc32c"
	MetaSegmentRecords = "strata.segment_records"
)

// upload converts one sealed segment, uploads it under its deterministic
// key, verifies the object, records it in the bucket manifest and commits
// it in the catalog. Until the commit the segment is not cold: a crash at
// any step leaves it sealed or uploading, and the next run does it again
// over the same key. In a cluster it first claims the segment
// (errClaimedElsewhere if another node has), and an object another node
// already tiered from an identical copy is adopted instead (adopted true).
func (j *Job) upload(ctx context.Context, shard string, s catalog.Segment, limiter *rate.Limiter) (up UploadSummary, adopted bool, err error) {
	loc, err := LocationOf(shard)
	if err != nil {
		return UploadSummary{}, false, err
	}
	key := loc.ObjectKey(j.Prefix, s.StartOffset, s.EndOffset)
	mkey := loc.ManifestKey(j.Prefix)
	if e, ok, err := j.headOf(ctx, shard, s, mkey); err != nil || ok {
		if err != nil {
			return UploadSummary{}, false, err
		}
		// Only the object's records from the log start on are ever read;
		// the catalog's entry describes the whole object, as for any
		// segment DeleteRecords cut into.
		whole := s
		whole.StartOffset, whole.Checksum, whole.Size, whole.Records = e.StartOffset, e.SegmentChecksum, e.SegmentBytes, e.Records
		up, err := j.adopt(ctx, shard, whole, mkey, e)
		return up, true, err
	}
	if j.Claims != nil {
		release, ok, err := j.Claims.Claim(ctx, shard, s.StartOffset, s.EndOffset)
		if err != nil {
			return UploadSummary{}, false, fmt.Errorf("claiming offsets %d to %d: %w", s.StartOffset, s.EndOffset, err)
		}
		if !ok {
			return UploadSummary{}, false, errClaimedElsewhere
		}
		defer release() // after the manifest and the catalog say where the object is
	}
	cp, err := j.replicas().SegmentCopy(ctx, shard, s)
	if err != nil {
		return UploadSummary{}, false, fmt.Errorf("finding a copy of offsets %d to %d: %w", s.StartOffset, s.EndOffset, err)
	}
	// Another node may have tiered its copy of these offsets already (or
	// this node's run died after its manifest write).
	m, err := readManifest(ctx, j.Bucket, mkey)
	if err != nil {
		return UploadSummary{}, false, err
	}
	if e, ok := m.entry(s.StartOffset, s.EndOffset); ok {
		if cp.Remote && e.SegmentChecksum == cp.Checksum {
			// Made from a copy the cluster sealed: this node's own copy is
			// not, so the object describes the segment, not this node's file.
			s.Checksum, s.Size, s.Records = e.SegmentChecksum, e.SegmentBytes, e.Records
		}
		up, err := j.adopt(ctx, shard, s, mkey, e)
		return up, true, err
	}
	f, err := cp.Open(ctx)
	if err != nil {
		return UploadSummary{}, false, fmt.Errorf("reading a copy of offsets %d to %d: %w", s.StartOffset, s.EndOffset, err)
	}
	if f.Remove != nil {
		defer f.Remove()
	}
	if cp.Remote {
		// What is uploaded, listed and verified is the rebuilt copy.
		s.Checksum, s.Size, s.Records = cp.Checksum, f.Size, f.Records
	}
	if s.State == catalog.Uploading {
		// A run died mid-upload: drop any parts it left before trying again
		// (a failure here only leaves parts behind; the upload goes on).
		if _, err := j.Bucket.AbortIncomplete(ctx, key, 0); err != nil {
			j.log().Warn("aborting an interrupted upload's parts", "key", key, "err", err)
		}
	}
	if _, err := j.Catalog.Transition(shard, s.No, s.State, catalog.Uploading, func(c *catalog.Segment) {
		c.ObjectKey, c.UploadStarted = key, j.now().UTC()
	}); err != nil {
		return UploadSummary{}, false, err
	}
	abandon := func(err error) (UploadSummary, bool, error) {
		if _, terr := j.Catalog.Transition(shard, s.No, catalog.Uploading, catalog.Sealed, nil); terr != nil {
			err = errors.Join(err, fmt.Errorf("returning the segment to sealed: %w", terr))
		}
		return UploadSummary{}, false, err
	}

	if err := j.put(ctx, shard, key, s, f, cp.Remote, limiter); err != nil {
		return abandon(err)
	}
	size, err := j.verify(ctx, key, s)
	if err != nil {
		if derr := j.Bucket.Delete(ctx, key); derr != nil {
			err = errors.Join(err, fmt.Errorf("deleting the object that failed verification: %w", derr))
		}
		return abandon(err)
	}
	if err := j.addToManifest(ctx, shard, loc, key, s, size); err != nil {
		return abandon(err)
	}
	if _, err := j.Catalog.Transition(shard, s.No, catalog.Uploading, catalog.Cold, func(c *catalog.Segment) {
		c.ObjectKey, c.ObjectSize, c.TieredAt = key, size, j.now().UTC()
		c.Checksum, c.Size, c.Records = s.Checksum, s.Size, s.Records // the object's source, if not this node's copy
	}); err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			// The shard was deleted while its segment was on the way up: what
			// this upload wrote must not outlive it. Only its own entry leaves
			// the manifest: others may be other nodes'.
			j.Bucket.Delete(ctx, key)
			updateManifest(ctx, j.Bucket, mkey, func(m *Manifest) (bool, error) { return m.remove(key), nil })
		}
		return UploadSummary{}, false, err
	}
	j.log().Info("segment tiered", "shard", shard, "segment", s.No, "key", key, "records", s.Records, "bytes", size)
	return UploadSummary{Shard: shard, Segment: s.No, Key: key, Records: s.Records, ObjectBytes: size}, false, nil
}

// headOf finds the object already tiered for the whole of a segment of
// which this node holds only the tail: a copy refilled from the leader's
// log start, when DeleteRecords left that start inside a segment, begins
// its first segment there and ends it where the leader's ended. The
// cluster sealed and tiered the whole segment, so no seal ever names this
// node's part, and tiering the part would put a second object over the
// same offsets; every later segment of the shard would wait behind it.
// Its records below the log start are never read, so the object serves
// the part as it is.
func (j *Job) headOf(ctx context.Context, shard string, s catalog.Segment, mkey string) (ManifestEntry, bool, error) {
	low, _, err := j.Engine.Watermarks(ctx, shard)
	if err != nil || s.StartOffset > low { // readable offsets below it: not the head
		return ManifestEntry{}, false, err
	}
	m, err := readManifest(ctx, j.Bucket, mkey)
	if err != nil {
		return ManifestEntry{}, false, err
	}
	for _, e := range m.Objects {
		if e.StartOffset < s.StartOffset && e.EndOffset == s.EndOffset {
			return e, true, nil
		}
	}
	return ManifestEntry{}, false, nil
}

// adopt records as the segment's cold copy the object the manifest lists
// for exactly its offsets, made from another copy of it (another node's,
// or this node's in a run that died before its catalog commit): nothing is
// converted or uploaded. The copies must be the same bytes: the entry's
// checksum, size and record count must be this segment's, and the object's
// footer must describe it (as after an upload).
func (j *Job) adopt(ctx context.Context, shard string, s catalog.Segment, mkey string, e ManifestEntry) (UploadSummary, error) {
	if e.SegmentChecksum != s.Checksum || e.SegmentBytes != s.Size || e.Records != s.Records {
		return UploadSummary{}, fmt.Errorf("manifest %s lists %s for offsets %d to %d, made from a copy of %d bytes, %d records, crc32c %08x; "+
			"this node's copy was sealed with %d bytes, %d records, crc32c %08x: the copies differ, so this node neither uses that object nor uploads over it: %w",
			mkey, e.Key, e.StartOffset, e.EndOffset, e.SegmentBytes, e.Records, e.SegmentChecksum, s.Size, s.Records, s.Checksum, ErrCopiesDiffer)
	}
	size, err := j.verify(ctx, e.Key, s)
	if err != nil {
		return UploadSummary{}, fmt.Errorf("the object %s already tiered for these offsets: %w", e.Key, err)
	}
	if _, err := j.Catalog.Transition(shard, s.No, s.State, catalog.Uploading, func(c *catalog.Segment) {
		c.ObjectKey, c.UploadStarted = e.Key, j.now().UTC()
	}); err != nil {
		return UploadSummary{}, err
	}
	if _, err := j.Catalog.Transition(shard, s.No, catalog.Uploading, catalog.Cold, func(c *catalog.Segment) {
		c.ObjectKey, c.ObjectSize, c.TieredAt = e.Key, size, j.now().UTC()
		// A head's entry names its object's first offset (headOf), below this node's log start.
		c.StartOffset, c.Checksum, c.Size, c.Records = s.StartOffset, s.Checksum, s.Size, s.Records
	}); err != nil {
		if _, terr := j.Catalog.Transition(shard, s.No, catalog.Uploading, catalog.Sealed, nil); terr != nil && !errors.Is(terr, catalog.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("returning the segment to sealed: %w", terr))
		}
		return UploadSummary{}, err
	}
	j.log().Info("segment already tiered from an identical copy; its object recorded", "shard", shard, "segment", s.No,
		"key", e.Key, "records", s.Records, "bytes", size)
	return UploadSummary{Shard: shard, Segment: s.No, Key: e.Key, Records: s.Records, ObjectBytes: size}, nil
}

// convert streams the copy (its file, or its Scan) into Parquet, and fails
// (so the upload publishes nothing) unless the bytes read match the sealed
// checksum (s's, which for a remote copy is the cluster's).
// put converts segment s from its copy cf and uploads it under key, the
// converter running up to a part ahead of the upload so it works while a
// part is on its way. It returns once the converter is done with cf.
func (j *Job) put(ctx context.Context, shard, key string, s catalog.Segment, cf CopyFile, remote bool, limiter *rate.Limiter) error {
	pipe := newAheadPipe(convertAhead)
	converted := make(chan struct{})
	var typed []parquet.TypedColumn
	var sum parquet.Summary
	go func() {
		defer close(converted)
		var err error
		typed, sum, err = j.convert(shard, s, cf, remote, pipe)
		pipe.CloseWithError(err)
	}()
	var body io.Reader = pipe
	if limiter != nil {
		body = &limitedReader{ctx: ctx, r: pipe, l: limiter}
	}
	err := j.Bucket.Upload(ctx, key, body)
	pipe.CloseReader(err) // stops the converter if the upload gave up first
	<-converted           // and lets it finish before its file may go (cf.Remove)
	if err != nil {
		return fmt.Errorf("upload %s: %w", key, err)
	}
	j.recordUndecoded(shard, typed, sum)
	return nil
}

// recordUndecoded counts an uploaded object's records whose typed
// columns did not decode (Undecoded).
func (j *Job) recordUndecoded(shard string, typed []parquet.TypedColumn, sum parquet.Summary) {
	j.mu.Lock()
	for i, c := range typed {
		if n := sum.TypedErrors[i]; n > 0 {
			if j.undecoded == nil {
				j.undecoded = map[TypedColumn]uint64{}
			}
			j.undecoded[TypedColumn{shard, c.Name}] += uint64(n)
		}
	}
	j.mu.Unlock()
}

func (j *Job) convert(shard string, s catalog.Segment, cf CopyFile, remote bool, out io.Writer) ([]parquet.TypedColumn, parquet.Summary, error) {
	opts := j.Parquet
	if j.ParquetFor != nil {
		opts = j.ParquetFor(shard)
	}
	opts.Metadata = map[string]string{
		MetaShard:          shard,
		MetaSegment:        strconv.FormatUint(s.No, 10),
		MetaSegmentCRC32C:  strconv.FormatUint(uint64(s.Checksum), 10),
		MetaSegmentRecords: strconv.FormatUint(s.Records, 10),
	}
	w, err := parquet.NewWriter(out, opts)
	if err != nil {
		return nil, parquet.Summary{}, err
	}
	scan := cf.Scan
	if scan == nil {
		scan = func(fn func(*record.Record) error) (uint32, int64, error) { return segment.ScanFile(cf.Path, fn) }
	}
	crc, size, err := scan(func(r *record.Record) error { return w.Write(r) })
	if err != nil {
		return nil, parquet.Summary{}, err
	}
	if crc != s.Checksum || size != s.Size {
		which := "local copy"
		if remote {
			which = "copy read from another replica"
		}
		return nil, parquet.Summary{}, fmt.Errorf("%s of %s segment %d has %d bytes with crc32c %08x; it was sealed with %d bytes and %08x: %w",
			which, shard, s.No, size, crc, s.Size, s.Checksum, record.ErrCorrupt)
	}
	sum, err := w.Close()
	return opts.Typed, sum, err
}

// verify reads the uploaded object's footer back with ranged reads and
// checks it describes exactly the sealed segment.
func (j *Job) verify(ctx context.Context, key string, s catalog.Segment) (int64, error) {
	a, err := j.Bucket.Stat(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("verify %s: %w", key, err)
	}
	if _, _, err := j.openVerified(ctx, key, a.Size, s); err != nil {
		return 0, err
	}
	return a.Size, nil
}

// openVerified opens an object of size bytes by its ends (readEnds) and
// checks that its footer describes exactly segment s: its rows, offsets
// and sealed CRC-32C. A footer describing another segment wraps
// errDescribesOther.
func (j *Job) openVerified(ctx context.Context, key string, size int64, s catalog.Segment) (*parquet.File, *endsReader, error) {
	r, err := readEnds(ctx, j.Bucket, key, size, s.Size)
	if err != nil {
		return nil, r, fmt.Errorf("verify %s: %w", key, err)
	}
	f, err := parquet.Open(r, size)
	if err != nil {
		return nil, r, fmt.Errorf("verify %s: %w", key, err)
	}
	last, _ := f.Lookup(parquet.MetaLastOffset)
	crc, _ := f.Lookup(MetaSegmentCRC32C)
	switch {
	case f.Rows() != int64(s.Records):
		return nil, r, fmt.Errorf("verify %s: %d rows, the segment has %d records: %w", key, f.Rows(), s.Records, errDescribesOther)
	case f.FirstOffset() != s.StartOffset || last != strconv.FormatUint(s.EndOffset, 10):
		return nil, r, fmt.Errorf("verify %s: offsets %d to %s, the segment has %d to %d: %w", key, f.FirstOffset(), last, s.StartOffset, s.EndOffset, errDescribesOther)
	case crc != strconv.FormatUint(uint64(s.Checksum), 10):
		return nil, r, fmt.Errorf("verify %s: made from a segment with crc32c %s, want %d: %w", key, crc, s.Checksum, errDescribesOther)
	}
	return f, r, nil
}

// entryOf is the manifest entry of segment s's object at key, of size bytes.
func entryOf(key string, s catalog.Segment, size int64) ManifestEntry {
	return ManifestEntry{Key: key, Segment: s.No, StartOffset: s.StartOffset, EndOffset: s.EndOffset,
		MinTimestamp: s.MinTimestamp, MaxTimestamp: s.MaxTimestamp, Records: s.Records,
		SegmentBytes: s.Size, SegmentChecksum: s.Checksum, ObjectBytes: size}
}

// addToManifest records the object in the shard's manifest, beside the
// entries other nodes write at the same time (updateManifest).
func (j *Job) addToManifest(ctx context.Context, shard string, loc Location, key string, s catalog.Segment, size int64) error {
	e := entryOf(key, s, size)
	return updateManifest(ctx, j.Bucket, loc.ManifestKey(j.Prefix), func(m *Manifest) (bool, error) {
		m.Version, m.Shard, m.Topic, m.Partition = 1, shard, loc.Topic, loc.Partition
		m.put(e)
		return true, nil
	})
}

// catchUp finishes what a crash interrupted after the catalog changed and
// before the engine did: local copies of segments the catalog holds as
// remote or deleted go, oldest first.
func (j *Job) catchUp(ctx context.Context, shard string, segs []catalog.Segment) (uint64, error) {
	state := map[uint64]catalog.Segment{}
	for _, s := range segs {
		state[s.No] = s
	}
	for {
		no, sealed, err := j.Engine.OldestLocal(shard)
		if err != nil || !sealed {
			return no, err
		}
		s := state[no]
		switch s.State {
		case catalog.Deleted:
			if err := j.Engine.DeleteBefore(ctx, shard, s.EndOffset+1); err != nil {
				return no, err
			}
		case catalog.Remote:
		default:
			return no, nil
		}
		j.log().Warn("finishing an interrupted drop of a local copy", "shard", shard, "segment", no, "state", s.State)
		if err := j.Engine.DropLocal(ctx, shard, no); err != nil {
			return no, err
		}
	}
}

// dropLocal records the segment as remote, then deletes the local file; a
// crash in between leaves a file the next run's catchUp deletes.
func (j *Job) dropLocal(ctx context.Context, shard string, s catalog.Segment) error {
	// Only the oldest local segment may go: once the catalog says remote,
	// a start deletes the file, and a local segment older than it would
	// leave a hole in the local log.
	if no, sealed, err := j.Engine.OldestLocal(shard); err != nil {
		return err
	} else if no != s.No || !sealed {
		return fmt.Errorf("segment %d is not the oldest sealed local segment (%d is)", s.No, no)
	}
	if _, err := j.Catalog.Transition(shard, s.No, catalog.Cold, catalog.Remote, nil); err != nil {
		return err
	}
	return j.Engine.DropLocal(ctx, shard, s.No)
}

// expire ends a segment's life in every tier: its offsets leave the shard
// (the low watermark rises past them, durably, first), then its topic's
// table (Tables) stops naming its object, then the catalog records it
// deleted, then its local file, its object and its manifest entry go. A
// crash between steps is finished by recovery (the local file), the next
// run (a failed table commit leaves the segment to expire again) or the
// orphan sweep (the object).
func (j *Job) expire(ctx context.Context, shard string, s catalog.Segment) error {
	_, _, err := j.expireAll(ctx, shard, []catalog.Segment{s})
	return err
}

// expireAll expires the shard's segments segs (the oldest, in order): the
// log start is raised past the last of them and the tables commit the
// removal once, before any object goes; then each leaves the catalog, the
// local disk and the bucket. It returns how many were expired and, on an
// error, the segment it stopped at.
func (j *Job) expireAll(ctx context.Context, shard string, segs []catalog.Segment) (int, uint64, error) {
	if len(segs) == 0 {
		return 0, 0, nil
	}
	last := segs[len(segs)-1]
	if err := j.Engine.DeleteBefore(ctx, shard, last.EndOffset+1); err != nil {
		return 0, segs[0].No, err
	}
	// A dead run's upload may have reached the manifest, and the tables
	// take what the manifests list.
	var kept map[string]bool
	if loc, err := LocationOf(shard); err == nil && j.Tables != nil && slices.ContainsFunc(segs, func(s catalog.Segment) bool {
		return s.State == catalog.Cold || s.State == catalog.Remote || s.State == catalog.Uploading
	}) {
		// The log start itself, which DeleteRecords may have put past
		// the segments: one commit removes what is below it.
		start, _, err := j.Engine.Watermarks(ctx, shard)
		if err != nil {
			return 0, segs[0].No, err
		}
		if err := j.Tables.RemoveBelow(ctx, shard, max(start, last.EndOffset+1)); err != nil {
			return 0, segs[0].No, err
		}
		if kept, err = j.Tables.Referenced(ctx, []string{loc.Topic}); err != nil {
			return 0, segs[0].No, fmt.Errorf("the objects the table's kept snapshots name: %w", err)
		}
	}
	for i, s := range segs {
		if err := j.expireOne(ctx, shard, s, kept); err != nil {
			return i, s.No, err
		}
	}
	return len(segs), 0, nil
}

// expireOne removes one segment below the log start from every tier.
func (j *Job) expireOne(ctx context.Context, shard string, s catalog.Segment, kept map[string]bool) error {
	if s.State == catalog.Uploading {
		// A dead run's upload: what it left at its key goes first (its
		// offsets are deleted in every tier, whoever uploaded there), so a
		// crash after the catalog changes leaves nothing the catalog no
		// longer names; then it is abandoned (the catalog moves an upload
		// only to cold or back to sealed) and deleted as a sealed segment.
		if _, err := j.Bucket.AbortIncomplete(ctx, s.ObjectKey, 0); err != nil {
			j.log().Warn("aborting an expired upload's parts", "shard", shard, "segment", s.No, "key", s.ObjectKey, "err", err)
		}
		if err := j.releaseObject(ctx, shard, s.ObjectKey, kept); err != nil {
			return err
		}
		if _, err := j.Catalog.Transition(shard, s.No, catalog.Uploading, catalog.Sealed, nil); err != nil {
			return err
		}
	}
	if _, err := j.Catalog.Transition(shard, s.No, state(s), catalog.Deleted, nil); err != nil {
		return err
	}
	if s.State.Local() {
		if err := j.Engine.DropLocal(ctx, shard, s.No); err != nil {
			return err
		}
	}
	if s.State == catalog.Cold || s.State == catalog.Remote {
		if err := j.releaseObject(ctx, shard, s.ObjectKey, kept); err != nil {
			return err
		}
	}
	j.log().Info("segment expired by retention", "shard", shard, "segment", s.No, "state", s.State, "end_offset", s.EndOffset)
	return nil
}

// recordLogStart writes the shard's log start in its manifest once it has
// moved inside or past the first object listed (Manifest.LogStart), so a
// catalog rebuilt from the bucket never serves records deleted before.
func (j *Job) recordLogStart(ctx context.Context, shard string) error {
	start, _, err := j.Engine.Watermarks(ctx, shard)
	if err != nil {
		return err
	}
	j.mu.Lock()
	done := j.logStarts[shard] >= start
	j.mu.Unlock()
	loc, lerr := LocationOf(shard)
	if done || start == 0 || lerr != nil {
		return nil
	}
	err = updateManifest(ctx, j.Bucket, loc.ManifestKey(j.Prefix), func(m *Manifest) (bool, error) {
		if len(m.Objects) == 0 || start <= m.Objects[0].StartOffset || start <= m.LogStart {
			return false, nil
		}
		m.LogStart = start
		return true, nil
	})
	if err == nil {
		j.mu.Lock()
		if j.logStarts == nil {
			j.logStarts = map[string]uint64{}
		}
		j.logStarts[shard] = start
		j.mu.Unlock()
	}
	return err
}

// releaseObject lets go of an expired segment's object: the object goes,
// unless a kept snapshot of its topic's table still names it (kept, from
// TableCommitter.Referenced: an expiry that failed), and its manifest
// entry goes; a kept object waits for the table's next expiry, or the
// orphan sweep once no kept snapshot names it. An empty key: none.
func (j *Job) releaseObject(ctx context.Context, shard, key string, kept map[string]bool) error {
	if key == "" {
		return nil
	}
	if !kept[key] {
		if err := j.Bucket.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
	}
	loc, err := LocationOf(shard)
	if err != nil {
		return err
	}
	return updateManifest(ctx, j.Bucket, loc.ManifestKey(j.Prefix), func(m *Manifest) (bool, error) {
		return m.remove(key), nil
	})
}

// topicOfKey is the topic of an object key under prefix
// ({prefix}topic={topic}/partition={p}/...).
func topicOfKey(key, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(key, prefix), "topic=")
	if !ok {
		return "", false
	}
	topic, _, ok := strings.Cut(rest, "/")
	return topic, ok
}

// state is the catalog state expire moves s from: an upload is abandoned
// to sealed first.
func state(s catalog.Segment) catalog.State {
	if s.State == catalog.Uploading {
		return catalog.Sealed
	}
	return s.State
}

// sweepOrphans deletes Parquet objects under the prefix that neither a
// catalog entry nor a manifest names and that are older than the grace
// period: the leftovers of an upload whose run died before it recorded the
// object. The manifests count because, in a cluster, this node's catalog
// holds only its own segments, and the bucket is every node's.
func (j *Job) sweepOrphans(ctx context.Context) (int, error) {
	grace := j.OrphanGrace
	if grace <= 0 {
		grace = time.Hour
	}
	known := map[string]bool{}
	shards, err := j.Catalog.Shards()
	if err != nil {
		return 0, err
	}
	for _, sh := range shards {
		segs, err := j.Catalog.Segments(sh.Name)
		if err != nil {
			return 0, err
		}
		for _, s := range segs {
			if s.ObjectKey != "" && s.State != catalog.Deleted {
				known[s.ObjectKey] = true
			}
		}
	}
	prefix := ""
	if j.Prefix != "" {
		prefix = strings.TrimSuffix(j.Prefix, "/") + "/"
	}
	var candidates, young, manifests []string
	err = j.Bucket.List(ctx, prefix, func(a objstore.Attrs) error {
		switch {
		case strings.HasSuffix(a.Name, "/"+manifestName):
			manifests = append(manifests, a.Name)
		case strings.Contains(a.Name, "/_"):
			// A folder whose name starts with "_" is another writer's, as
			// Hive-style discovery skips it: a topic's Iceberg table keeps
			// its position-delete files (Parquet) in _iceberg/.
		case strings.HasSuffix(a.Name, ".parquet") && !known[a.Name] && j.now().Sub(a.ModTime) > grace:
			candidates = append(candidates, a.Name)
		case strings.HasSuffix(a.Name, ".parquet") && !known[a.Name]:
			young = append(young, a.Name) // a retype's old copy goes by its retired grace
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(candidates) > 0 || len(young) > 0 {
		// Read after the listing: an object listed as unknown that a
		// manifest took in meanwhile is then known.
		for _, mkey := range manifests {
			m, err := readManifest(ctx, j.Bucket, mkey)
			if err != nil {
				return 0, err
			}
			for _, e := range m.Objects {
				known[e.Key] = true
			}
			// A retype's old object, for the reads begun before its swap
			// and the nodes whose catalogs have not followed it yet.
			for _, r := range m.Retired {
				if j.now().Sub(r.At) <= j.retiredGrace() {
					known[r.Key] = true
				} else if slices.Contains(young, r.Key) {
					candidates = append(candidates, r.Key)
				}
			}
		}
	}
	var orphans []string
	topics := map[string]bool{}
	for _, c := range candidates {
		if !known[c] {
			orphans = append(orphans, c)
			if topic, ok := topicOfKey(c, prefix); ok {
				topics[topic] = true
			}
		}
	}
	if j.Tables != nil && len(orphans) > 0 {
		// Retention's objects wait for the tables' snapshots to let go.
		kept, err := j.Tables.Referenced(ctx, slices.Sorted(maps.Keys(topics)))
		if err != nil {
			return 0, fmt.Errorf("the objects the tables' kept snapshots name: %w", err)
		}
		orphans = slices.DeleteFunc(orphans, func(o string) bool { return kept[o] })
	}
	for _, o := range orphans {
		if err := j.Bucket.Delete(ctx, o); err != nil {
			return 0, err
		}
		j.log().Warn("orphaned object deleted", "key", o)
	}
	// File-system backends stage uploads; a crash mid-upload leaves them.
	n, err := j.Bucket.SweepTemp(ctx, grace)
	if err != nil {
		return len(orphans), err
	}
	if n > 0 {
		j.log().Warn("abandoned staged uploads deleted", "files", n)
	}
	return len(orphans) + n, nil
}

// limitedReader holds an upload to the bandwidth limit.
type limitedReader struct {
	ctx context.Context
	r   io.Reader
	l   *rate.Limiter
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if len(p) > l.l.Burst() {
		p = p[:l.l.Burst()]
	}
	n, err := l.r.Read(p)
	if n > 0 {
		if werr := l.l.WaitN(l.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// endsReader serves an object's first bytes (the magic) and its tail (the
// footer and the page index before it) from two ranged reads made at once,
// and anything else with a ranged read of its own (a footer or page index
// larger than the tail fetched extends it). parquet.Open reads the
// footer in many small pieces: straight from the bucket, verifying the
// object of a 64 MiB segment took 16-176 ms on loopback MinIO.
type endsReader struct {
	objectReader
	head, tail []byte
	tailAt     int64
	// extra serves bytes a caller fetched already (the cold scrub's row
	// group, for parquet-go's row reader).
	extra []span
	// read counts the bytes fetched from the bucket.
	read atomic.Int64
}

// span is bytes of an object from at on.
type span struct {
	at  int64
	buf []byte
}

// fetched is how many of the object's bytes r read from the bucket.
func (r *endsReader) fetched() int64 {
	if r == nil {
		return 0
	}
	return r.read.Load()
}

func readEnds(ctx context.Context, b objstore.Bucket, key string, size, segmentSize int64) (*endsReader, error) {
	r := &endsReader{objectReader: objectReader{ctx, b, key}}
	n := footerGuess(size, segmentSize)
	r.tailAt, r.tail = size-n, make([]byte, n)
	r.head = make([]byte, min(4, size))
	g, gctx := errgroup.WithContext(ctx)
	for _, sp := range []struct {
		buf []byte
		at  int64
	}{{r.tail, r.tailAt}, {r.head, 0}} {
		g.Go(func() error {
			n, err := b.ReadAt(gctx, key, sp.buf, sp.at)
			r.read.Add(int64(n))
			if err != nil && !(errors.Is(err, io.EOF) && n == len(sp.buf)) {
				return fmt.Errorf("bytes %d-%d: %w", sp.at, sp.at+int64(len(sp.buf)), err)
			}
			return nil
		})
	}
	return r, g.Wait()
}

func (r *endsReader) ReadAt(p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	if off >= 0 && end <= int64(len(r.head)) {
		return copy(p, r.head[off:]), nil
	}
	for _, x := range r.extra {
		if off >= x.at && end <= x.at+int64(len(x.buf)) {
			return copy(p, x.buf[off-x.at:]), nil
		}
	}
	if tailEnd := r.tailAt + int64(len(r.tail)); off >= 0 && off < r.tailAt && end > r.tailAt-parquet.MaxFooterBytes && end <= tailEnd {
		// The footer or the page index begins before the tail fetched.
		// Fetch twice what is missing from here to the end: the page
		// index, right before the footer, is about the footer's size, so a
		// footer read brings the page index along.
		from := max(0, off-(tailEnd-off), tailEnd-parquet.MaxFooterBytes)
		more := make([]byte, r.tailAt-from, tailEnd-from)
		n, err := r.objectReader.ReadAt(more, from)
		r.read.Add(int64(n))
		if err != nil && !(errors.Is(err, io.EOF) && n == len(more)) {
			return 0, err
		}
		r.tail, r.tailAt = append(more, r.tail...), from
	}
	if off >= r.tailAt && end <= r.tailAt+int64(len(r.tail)) {
		return copy(p, r.tail[off-r.tailAt:]), nil
	}
	n, err := r.objectReader.ReadAt(p, off)
	r.read.Add(int64(n))
	return n, err
}

// ObjectReader adapts one object to io.ReaderAt for the Parquet reader.
func ObjectReader(ctx context.Context, b objstore.Bucket, key string) io.ReaderAt {
	return objectReader{ctx, b, key}
}

type objectReader struct {
	ctx context.Context
	b   objstore.Bucket
	key string
}

func (o objectReader) ReadAt(p []byte, off int64) (int, error) {
	return o.b.ReadAt(o.ctx, o.key, p, off)
}
