package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// Undefined is Kafka's UNDEFINED_EPOCH (-1) and UNDEFINED_EPOCH_OFFSET (-1):
// what OffsetForLeaderEpoch answers for an epoch the history cannot place.
const Undefined = -1

// EpochEntry is one leader epoch and the first offset written in it.
type EpochEntry struct {
	Epoch int32
	Start int64
}

// EpochHistory is a shard's leader-epoch history (Kafka's leader-epoch
// checkpoint): epochs strictly increasing, starts strictly increasing. It is
// what lets a follower find where its log and a new leader's part ways
// without trusting a high watermark (KIP-101), so it is durable: Encode and
// DecodeEpochHistory are its on-disk form (docs/replication.md).
//
// The zero value is an empty history.
type EpochHistory struct {
	entries []EpochEntry
}

// Entries returns a copy of the history, oldest first.
func (h *EpochHistory) Entries() []EpochEntry {
	return append([]EpochEntry(nil), h.entries...)
}

// Latest returns the newest entry, and false for an empty history.
func (h *EpochHistory) Latest() (EpochEntry, bool) {
	if len(h.entries) == 0 {
		return EpochEntry{}, false
	}
	return h.entries[len(h.entries)-1], true
}

// Append records that epoch's first record is at start. The same epoch again
// at a later offset changes nothing (every batch of an epoch is appended with
// it). A newer epoch at the latest entry's start replaces that entry: the
// older epoch wrote nothing, and OffsetForLeaderEpoch answers the same either
// way (Kafka's assign does the same). Anything that would move the history
// backwards is refused, since a history out of order would answer wrong end
// offsets and make a follower keep records the leader does not have.
func (h *EpochHistory) Append(epoch int32, start int64) error {
	if epoch < 0 || start < 0 {
		return fmt.Errorf("replica: epoch history: epoch %d at offset %d: both must be >= 0", epoch, start)
	}
	last, ok := h.Latest()
	switch {
	case !ok:
	case epoch == last.Epoch:
		if start < last.Start {
			return fmt.Errorf("replica: epoch history: epoch %d at offset %d: the epoch already starts at %d", epoch, start, last.Start)
		}
		return nil
	case epoch < last.Epoch:
		return fmt.Errorf("replica: epoch history: epoch %d at offset %d: older than the latest epoch %d", epoch, start, last.Epoch)
	case start < last.Start:
		return fmt.Errorf("replica: epoch history: epoch %d at offset %d: before epoch %d's start %d", epoch, start, last.Epoch, last.Start)
	case start == last.Start:
		h.entries = h.entries[:len(h.entries)-1]
	}
	h.entries = append(h.entries, EpochEntry{Epoch: epoch, Start: start})
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
	return endOffsetFor(h.entries, epoch, logEnd)
}

func endOffsetFor(entries []EpochEntry, epoch int32, logEnd int64) (int32, int64) {
	if len(entries) == 0 || epoch < 0 {
		return Undefined, Undefined
	}
	last := entries[len(entries)-1]
	if epoch == last.Epoch {
		return epoch, logEnd
	}
	if epoch > last.Epoch {
		return Undefined, Undefined
	}
	// higher: the first entry with a larger epoch; it exists since epoch < last.Epoch.
	higher := 0
	for higher < len(entries) && entries[higher].Epoch <= epoch {
		higher++
	}
	if higher == 0 {
		return epoch, entries[0].Start
	}
	return entries[higher-1].Epoch, entries[higher].Start
}

// TruncateFromEnd drops the epochs that start at or after end: what a
// replica does to its history when it truncates its log to end.
func (h *EpochHistory) TruncateFromEnd(end int64) {
	i := len(h.entries)
	for i > 0 && h.entries[i-1].Start >= end {
		i--
	}
	h.entries = h.entries[:i]
}

// TruncateFromStart forgets what retention deleted below start, keeping the
// epoch that start falls in (moved to begin at start), so lookups of it and
// later epochs answer as before.
func (h *EpochHistory) TruncateFromStart(start int64) {
	i := 0
	for i < len(h.entries) && h.entries[i].Start <= start {
		i++
	}
	if i == 0 {
		return
	}
	keep := h.entries[i-1]
	keep.Start = start
	h.entries = append([]EpochEntry{keep}, h.entries[i:]...)
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
	mine := h.entries
	for {
		for len(mine) > 0 && mine[len(mine)-1].Start >= end {
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
		e2, o2 := endOffsetFor(mine, le, end)
		if e2 == le {
			return min(lo, o2, end), nil
		}
		end = min(o2, end)
	}
}

// The encoded history: big-endian like the segment format, a CRC32C over
// everything before it so a torn or flipped checkpoint is refused rather than
// trusted.
//
//	magic "SLEH" | version u8 = 1 | count u32 | count × (epoch i32, start i64) | crc32c u32
const (
	epochMagic   = "SLEH"
	epochVersion = 1
	epochHeader  = 4 + 1 + 4
	epochEntry   = 4 + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the history's durable form.
func (h *EpochHistory) Encode() []byte {
	b := make([]byte, 0, epochHeader+len(h.entries)*epochEntry+4)
	b = append(b, epochMagic...)
	b = append(b, epochVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(h.entries)))
	for _, e := range h.entries {
		b = binary.BigEndian.AppendUint32(b, uint32(e.Epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.Start))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// ErrCorruptHistory wraps every error DecodeEpochHistory returns.
var ErrCorruptHistory = errors.New("replica: corrupt epoch history")

// DecodeEpochHistory reads what Encode wrote, and refuses anything else: a
// wrong magic, version, length or checksum, or entries out of order.
func DecodeEpochHistory(b []byte) (*EpochHistory, error) {
	bad := func(format string, args ...any) (*EpochHistory, error) {
		return nil, fmt.Errorf("%w: %s", ErrCorruptHistory, fmt.Sprintf(format, args...))
	}
	if len(b) < epochHeader+4 {
		return bad("%d bytes, fewer than the %d of an empty history", len(b), epochHeader+4)
	}
	if string(b[:4]) != epochMagic {
		return bad("magic %q, want %q", b[:4], epochMagic)
	}
	if b[4] != epochVersion {
		return bad("version %d, want %d", b[4], epochVersion)
	}
	n := binary.BigEndian.Uint32(b[5:9])
	if want := uint64(epochHeader) + uint64(n)*epochEntry + 4; uint64(len(b)) != want {
		return bad("%d entries need %d bytes, have %d", n, want, len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return bad("checksum %08x, stored %08x", got, sum)
	}
	h := &EpochHistory{entries: make([]EpochEntry, 0, n)}
	for i := range int(n) {
		p := body[epochHeader+i*epochEntry:]
		e := EpochEntry{Epoch: int32(binary.BigEndian.Uint32(p)), Start: int64(binary.BigEndian.Uint64(p[4:]))}
		if e.Epoch < 0 || e.Start < 0 {
			return bad("entry %d: epoch %d at offset %d: both must be >= 0", i, e.Epoch, e.Start)
		}
		if last, ok := h.Latest(); ok && (e.Epoch <= last.Epoch || e.Start <= last.Start) {
			return bad("entry %d: epoch %d at offset %d does not follow epoch %d at offset %d", i, e.Epoch, e.Start, last.Epoch, last.Start)
		}
		h.entries = append(h.entries, e)
	}
	return h, nil
}

// String prints the history as "epoch@start ..." for logs and tests.
func (h *EpochHistory) String() string {
	if len(h.entries) == 0 {
		return "empty"
	}
	parts := make([]string, len(h.entries))
	for i, e := range h.entries {
		parts[i] = fmt.Sprintf("%d@%d", e.Epoch, e.Start)
	}
	return strings.Join(parts, " ")
}
