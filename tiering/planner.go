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
	// RemoteRetention: a remote segment whose newest record is older than
	// this is deleted from the bucket and its offsets from the shard
	// (0: kept forever).
	RemoteRetention time.Duration
}

// Plan is what one run does for one shard.
type Plan struct {
	// Upload lists the segments to convert and upload, oldest first.
	Upload []catalog.Segment
	// DropLocal lists cold segments whose local copy can go, oldest first:
	// always a prefix of the shard's local segments.
	DropLocal []catalog.Segment
	// Expire lists remote segments past remote retention, oldest first:
	// always a prefix of the shard's segments.
	Expire []catalog.Segment
}

// PlanShard decides, from a shard's segments (in order) and the time, what
// to upload and which local copies to drop. It does no I/O.
func PlanShard(now time.Time, segs []catalog.Segment, p Policy) Plan {
	if p.StaleUpload <= 0 {
		p.StaleUpload = 10 * time.Minute
	}
	var plan Plan
	var untiered int64
	for _, s := range segs {
		if s.State == catalog.Sealed {
			untiered += s.Size
		}
	}
	for _, s := range segs {
		switch s.State {
		case catalog.Sealed:
			if now.Sub(s.SealedAt) >= p.MinSealedAge || (p.LocalBytes > 0 && untiered > p.LocalBytes) {
				plan.Upload = append(plan.Upload, s)
				untiered -= s.Size
			}
		case catalog.Uploading:
			if now.Sub(s.UploadStarted) >= p.StaleUpload {
				plan.Upload = append(plan.Upload, s)
			}
		}
	}
	// Local copies go oldest first and only while every older segment is
	// already remote, so the local segments stay one contiguous run.
	for _, s := range segs {
		if s.State == catalog.Remote || s.State == catalog.Deleted {
			continue
		}
		if s.State != catalog.Cold || now.Sub(s.TieredAt) < p.LocalRetention {
			break
		}
		plan.DropLocal = append(plan.DropLocal, s)
	}
	for _, s := range segs {
		if s.State == catalog.Deleted {
			continue
		}
		if s.State != catalog.Remote || p.RemoteRetention <= 0 || now.Sub(time.UnixMilli(s.MaxTimestamp)) < p.RemoteRetention {
			break
		}
		plan.Expire = append(plan.Expire, s)
	}
	return plan
}
