package replica

import (
	"errors"
	"fmt"

	"strata/engine/leaderepoch"
	"strata/engine/store"
)

// Undefined is Kafka's UNDEFINED_EPOCH (-1) and UNDEFINED_EPOCH_OFFSET (-1):
// what OffsetForLeaderEpoch answers for an epoch the history cannot place.
const Undefined = leaderepoch.Undefined

// EpochEntry is one leader epoch and the first offset written in it.
type EpochEntry struct {
	Epoch int32
	Start int64
}

// EpochHistory is a shard's leader-epoch history (Kafka's leader-epoch
// checkpoint): epochs strictly increasing, starts strictly increasing. It is
// what lets a follower find where its log and a new leader's part ways
// without trusting a high watermark (KIP-101). The engines keep it durably
// (store.Epochs); its rules and its on-disk form are engine/leaderepoch's,
// which this wraps with Kafka's signed offsets.
//
// The zero value is an empty history.
type EpochHistory struct {
	h leaderepoch.History
}

// HistoryOf is the history an engine keeps (store.Epochs.LeaderEpochs).
func HistoryOf(entries []store.EpochEntry) *EpochHistory {
	return &EpochHistory{h: append(leaderepoch.History(nil), entries...)}
}

// Engine returns the history as the engines keep it, oldest first.
func (h *EpochHistory) Engine() []store.EpochEntry {
	return append([]store.EpochEntry(nil), h.h...)
}

// Entries returns a copy of the history, oldest first.
func (h *EpochHistory) Entries() []EpochEntry {
	out := make([]EpochEntry, len(h.h))
	for i, e := range h.h {
		out[i] = EpochEntry{Epoch: e.Epoch, Start: int64(e.Start)}
	}
	return out
}

// Latest returns the newest entry, and false for an empty history.
func (h *EpochHistory) Latest() (EpochEntry, bool) {
	e, ok := h.h.Latest()
	return EpochEntry{Epoch: e.Epoch, Start: int64(e.Start)}, ok
}

// Append records that epoch's first record is at start, with
// leaderepoch.History.Assign's rules: the same epoch later is a no-op, a
// newer epoch at the latest start replaces it, anything backwards is
// refused.
func (h *EpochHistory) Append(epoch int32, start int64) error {
	if epoch < 0 || start < 0 {
		return fmt.Errorf("replica: epoch history: epoch %d at offset %d: both must be >= 0", epoch, start)
	}
	next, _, err := h.h.Assign(epoch, uint64(start))
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	h.h = next
	return nil
}

// EndOffsetFor answers OffsetForLeaderEpoch for epoch against a log ending at
// logEnd, as Kafka's LeaderEpochFileCache.endOffsetFor does: the largest
// known epoch <= epoch, and the start of the first epoch after it (logEnd
// for the latest epoch). An epoch older than the first known one answers
// (epoch, first start): the records before it are gone, and a follower must
// replicate from there. An epoch newer than the latest, or an empty history,
// answers (Undefined, Undefined).
func (h *EpochHistory) EndOffsetFor(epoch int32, logEnd int64) (int32, int64) {
	return h.h.EndOffsetFor(epoch, uint64(max(logEnd, 0)))
}

// TruncateFromEnd drops the epochs that start at or after end: what a
// replica does to its history when it truncates its log to end.
func (h *EpochHistory) TruncateFromEnd(end int64) {
	h.h = h.h.TruncateFromEnd(uint64(max(end, 0)))
}

// TruncateFromStart forgets what retention deleted below start, keeping the
// epoch that start falls in (moved to begin at start), so lookups of it and
// later epochs answer as before.
func (h *EpochHistory) TruncateFromStart(start int64) {
	h.h = h.h.TruncateFromStart(uint64(max(start, 0)))
}

// ErrNoCommonEpoch is returned by TruncationPoint when the follower holds
// records but no epoch for them, so the histories cannot say where they
// agree; the caller falls back to truncating to its high watermark, as
// Kafka does.
var ErrNoCommonEpoch = errors.New("replica: the follower's records below its log end have no leader epoch")

// TruncationPoint returns where a follower with this history and log end
// must truncate before fetching from a leader with leader's history and log
// end, so that the two never hold different records at one offset (KIP-101
// with KIP-279's rounds). Each round the follower asks the leader for the end
// of its own latest epoch; if the leader answers an older epoch (it never had
// the follower's), the follower cuts back to the end of that older epoch in
// its own log and asks again. It never returns more than followerEnd.
func (h *EpochHistory) TruncationPoint(followerEnd int64, leader *EpochHistory, leaderEnd int64) (int64, error) {
	end := followerEnd
	mine := h.h
	for {
		for len(mine) > 0 && int64(mine[len(mine)-1].Start) >= end {
			mine = mine[:len(mine)-1]
		}
		if end == 0 {
			return 0, nil
		}
		if len(mine) == 0 {
			return 0, ErrNoCommonEpoch
		}
		fe := mine[len(mine)-1].Epoch
		le, lo := leader.EndOffsetFor(fe, leaderEnd)
		if le == Undefined {
			return 0, fmt.Errorf("replica: the follower's epoch %d is newer than the leader's latest: the leader is stale", fe)
		}
		if le == fe {
			return min(lo, end), nil
		}
		// The leader never had epoch fe: everything the follower wrote from
		// its first epoch after le on is suspect, and within le the leader's
		// lo bounds what can agree.
		e2, o2 := mine.EndOffsetFor(le, uint64(end))
		if e2 == le {
			return min(lo, o2, end), nil
		}
		end = min(o2, end)
	}
}

// Encode returns the history's durable form (leaderepoch's "SLEH").
func (h *EpochHistory) Encode() []byte { return h.h.Encode() }

// ErrCorruptHistory wraps every error DecodeEpochHistory returns.
var ErrCorruptHistory = leaderepoch.ErrCorrupt

// DecodeEpochHistory reads what Encode wrote, and refuses anything else: a
// wrong magic, version, length or checksum, or entries out of order.
func DecodeEpochHistory(b []byte) (*EpochHistory, error) {
	h, err := leaderepoch.Decode(b)
	if err != nil {
		return nil, err
	}
	return &EpochHistory{h: h}, nil
}

// String prints the history as "epoch@start ..." for logs and tests.
func (h *EpochHistory) String() string { return h.h.String() }
