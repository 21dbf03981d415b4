package tiering

import (
	"time"

	"strata/catalog"
)

// Policy says when segments move between tiers.
type Policy struct {
	// MinSealedAge: a sealed segment stays warm at least this long.
	MinSealedAge time.Duration
	// LocalBytes: while a shard's sealed, untiered segments add up to more,
	// the oldest are tiered whatever their age (0: no budget).
	LocalBytes int64
	// LocalRetention: a tiered segment's local copy is kept this long
	// after its upload is committed.
	LocalRetention time.Duration
	// StaleUpload: an upload recorded as started longer ago than this, by a
	// run that crashed, is started again (default 10m).
	StaleUpload time.Duration
	// StaleBefore, if set: an upload recorded as started before it is
	// started again at once. On one node, where runs do not overlap and no
	// one else uploads, that is every upload recorded before the run began
	// (a killed process's), which would otherwise hold the shard's later
	// segments and its table back for StaleUpload.
	StaleBefore time.Time
	// RemoteRetention: a remote segment whose newest record is older than
	// this is deleted from the bucket and its offsets from the shard
	// (0: kept forever).
	RemoteRetention time.Duration
	// RetentionMaxAge and RetentionMaxBytes bound the whole log, local and
	// cold together, as Kafka's retention.ms and retention.bytes do under
	// tiered storage (KIP-405): the oldest segments past either go from
	// every tier, whether or not they were uploaded (0: no bound).
	RetentionMaxAge   time.Duration
	RetentionMaxBytes int64
	// NoUpload keeps the shard's segments local: its topic says
	// remote.storage.enable=false. Retention still applies.
	NoUpload bool
	// LocalRetentionBytes: while the shard's local segments add up to
	// more, the oldest uploaded copies go whatever LocalRetention says
	// (Kafka's local.retention.bytes; 0: no bound).
	LocalRetentionBytes int64
	// Merging says which of the shard's small cold objects a run merges
	// (PlanMerges; on one node only, docs/compaction.md).
	Merging MergePolicy
	// LogStart is the shard's low watermark: its offsets below it are
	// deleted (DeleteRecords, a follower taking its leader's). A segment
	// wholly below it expires from every tier, uploaded or not, as Kafka
	// deletes the segments below the log start, remote ones too (KIP-405):
	// uploading it would tier deleted records, and in a cluster its seal
	// record is pruned, so a replica that had not tiered it yet could
	// never claim it and its later segments would wait behind it.
	LogStart uint64
}

// Plan is what one run does for one shard.
type Plan struct {
	// Upload lists the segments to convert and upload, oldest first.
	Upload []catalog.Segment
	// DropLocal lists cold segments whose local copy can go, oldest first:
	// always a prefix of the shard's local segments.
	DropLocal []catalog.Segment
	// Expire lists segments past retention, oldest first: always a prefix
	// of the shard's segments. Sealed and cold ones go from local disk,
	// cold and remote ones from the bucket.
	Expire []catalog.Segment
}

// PlanShard decides, from a shard's segments (in order) and the time, what
// to upload and which local copies to drop. It does no I/O.
func PlanShard(now time.Time, segs []catalog.Segment, p Policy) Plan {
	if p.StaleUpload <= 0 {
		p.StaleUpload = 10 * time.Minute
	}
	var plan Plan
	plan.Expire = expire(now, segs, p)
	expiring := map[uint64]bool{}
	for _, s := range plan.Expire {
		expiring[s.No] = true
	}
	var untiered int64
	for _, s := range segs {
		if s.State == catalog.Sealed && !expiring[s.No] {
			untiered += s.Size
		}
	}
	for _, s := range segs {
		if expiring[s.No] {
			continue
		}
		switch s.State {
		case catalog.Sealed:
			if p.NoUpload {
				continue
			}
			if now.Sub(s.SealedAt) >= p.MinSealedAge || (p.LocalBytes > 0 && untiered > p.LocalBytes) {
				plan.Upload = append(plan.Upload, s)
				untiered -= s.Size
			}
		case catalog.Uploading:
			if now.Sub(s.UploadStarted) >= p.StaleUpload || s.UploadStarted.Before(p.StaleBefore) {
				plan.Upload = append(plan.Upload, s)
			}
		}
	}
	// Local copies go oldest first and only while every older segment is
	// already remote, so the local segments stay one contiguous run.
	var local int64
	for _, s := range segs {
		if s.State.Local() && !expiring[s.No] {
			local += s.Size
		}
	}
	for _, s := range segs {
		if s.State == catalog.Remote || s.State == catalog.Deleted {
			continue
		}
		// An expiring local segment still holds its place until it is
		// gone: the job expires first and plans again.
		over := p.LocalRetentionBytes > 0 && local > p.LocalRetentionBytes
		if expiring[s.No] || s.State != catalog.Cold || (now.Sub(s.TieredAt) < p.LocalRetention && !over) {
			break
		}
		plan.DropLocal = append(plan.DropLocal, s)
		local -= s.Size
	}
	return plan
}

// expire picks the oldest segments past retention: past the whole log's
// age or byte bound in any tier, or, in the bucket only, past remote
// retention. It stops at the first segment that is not, and at the active
// segment or one being uploaded, so the offsets that remain stay contiguous.
func expire(now time.Time, segs []catalog.Segment, p Policy) []catalog.Segment {
	var total int64
	for _, s := range segs {
		if s.State != catalog.Deleted {
			total += s.Size
		}
	}
	var out []catalog.Segment
	for _, s := range segs {
		if s.State == catalog.Deleted {
			continue
		}
		// Uploading here is what a run that died mid-upload left (a node
		// runs one job at a time): it expires as a sealed segment does.
		// Stopping at it kept it and every later segment past retention
		// for good; in a cluster its re-upload can never be claimed below
		// the log start, whose seal records are pruned.
		if s.State != catalog.Sealed && s.State != catalog.Uploading && s.State != catalog.Cold && s.State != catalog.Remote {
			break
		}
		age := now.Sub(time.UnixMilli(s.MaxTimestamp))
		past := s.EndOffset < p.LogStart ||
			(p.RetentionMaxAge > 0 && age > p.RetentionMaxAge) ||
			(p.RetentionMaxBytes > 0 && total > p.RetentionMaxBytes) ||
			(s.State == catalog.Remote && p.RemoteRetention > 0 && age >= p.RemoteRetention)
		if !past {
			break
		}
		out = append(out, s)
		total -= s.Size
	}
	return out
}
