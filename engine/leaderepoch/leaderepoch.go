// Package leaderepoch is a shard's leader-epoch history (Kafka's
// leader-epoch checkpoint) as a value: its rules (Assign, the truncations,
// EndOffsetFor) and its one durable form, "SLEH" (docs/replication.md). The
// engines keep it (store.Epochs) and replica decides with it; both import
// this package, which imports nothing of ours but engine/store, so the rules
// and the bytes exist once.
package leaderepoch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strings"

	"strata/engine/integrity"
	"strata/engine/store"
)

// Undefined is Kafka's UNDEFINED_EPOCH (-1) and UNDEFINED_EPOCH_OFFSET (-1):
// what OffsetForLeaderEpoch answers for an epoch the history cannot place.
const Undefined = -1

// MaxStart is the largest start offset the encoding holds (an i64, as
// Kafka's offsets are).
const MaxStart = math.MaxInt64

// History is a shard's entries, oldest first: epochs strictly increasing,
// starts strictly increasing. Methods never change the receiver's backing
// array in place, so a History handed out stays as it was.
type History []store.EpochEntry

// Latest returns the newest entry, and false for an empty history.
func (h History) Latest() (store.EpochEntry, bool) {
	if len(h) == 0 {
		return store.EpochEntry{}, false
	}
	return h[len(h)-1], true
}

// Assign records that epoch's first record is at start, and returns the
// new history and whether it changed. The same epoch again at a later
// offset changes nothing (every batch of an epoch is appended with it). A
// newer epoch at the latest entry's start replaces that entry: the older
// epoch wrote nothing, and OffsetForLeaderEpoch answers the same either way
// (Kafka's assign does the same). Anything that would move the history
// backwards is refused (store.ErrEpochOrder), since a history out of order
// would answer wrong end offsets and make a follower keep records the
// leader does not have.
func (h History) Assign(epoch int32, start uint64) (History, bool, error) {
	if epoch < 0 {
		return h, false, fmt.Errorf("epoch history: epoch %d at offset %d: the epoch must be >= 0", epoch, start)
	}
	if start > MaxStart {
		return h, false, fmt.Errorf("epoch history: epoch %d at offset %d: the offset must be below 2^63", epoch, start)
	}
	last, ok := h.Latest()
	switch {
	case !ok:
	case epoch == last.Epoch:
		if start < last.Start {
			return h, false, orderErrorf("epoch history: epoch %d at offset %d: the epoch already starts at %d", epoch, start, last.Start)
		}
		return h, false, nil
	case epoch < last.Epoch:
		return h, false, orderErrorf("epoch history: epoch %d at offset %d: older than the latest epoch %d", epoch, start, last.Epoch)
	case start < last.Start:
		return h, false, orderErrorf("epoch history: epoch %d at offset %d: before epoch %d's start %d", epoch, start, last.Epoch, last.Start)
	case start == last.Start:
		h = h[:len(h)-1]
	}
	out := make(History, len(h), len(h)+1)
	copy(out, h)
	return append(out, store.EpochEntry{Epoch: epoch, Start: start}), true, nil
}

// orderError is a refused Assign: errors.Is(err, store.ErrEpochOrder), with
// a message that names both epochs and nothing else.
type orderError struct{ msg string }

func orderErrorf(format string, args ...any) error {
	return &orderError{fmt.Sprintf(format, args...)}
}

func (e *orderError) Error() string        { return e.msg }
func (e *orderError) Is(target error) bool { return target == store.ErrEpochOrder }

// EndOffsetFor answers OffsetForLeaderEpoch for epoch against a log ending at
// logEnd, as Kafka's LeaderEpochFileCache.endOffsetFor does: the largest
// known epoch <= epoch, and the start of the first epoch after it (logEnd
// for the latest epoch). An epoch older than the first known one answers
// (epoch, first start): the records before it are gone, and a follower must
// replicate from there. An epoch newer than the latest, a negative one, or
// an empty history, answers (Undefined, Undefined).
func (h History) EndOffsetFor(epoch int32, logEnd uint64) (int32, int64) {
	if len(h) == 0 || epoch < 0 {
		return Undefined, Undefined
	}
	last := h[len(h)-1]
	if epoch == last.Epoch {
		return epoch, int64(logEnd)
	}
	if epoch > last.Epoch {
		return Undefined, Undefined
	}
	// higher: the first entry with a larger epoch; it exists since epoch < last.Epoch.
	higher := 0
	for higher < len(h) && h[higher].Epoch <= epoch {
		higher++
	}
	if higher == 0 {
		return epoch, int64(h[0].Start)
	}
	return h[higher-1].Epoch, int64(h[higher].Start)
}

// EpochAt returns the epoch the record at offset was written under (the
// entry that covers it) and the offset where the next epoch starts, which
// no batch served with this epoch may reach (ok false: none starts later).
// An offset before the first entry, or an empty history, is Undefined up
// to the first entry's start.
func (h History) EpochAt(offset uint64) (epoch int32, next uint64, ok bool) {
	i := 0
	for i < len(h) && h[i].Start <= offset {
		i++
	}
	epoch = Undefined
	if i > 0 {
		epoch = h[i-1].Epoch
	}
	if i < len(h) {
		return epoch, h[i].Start, true
	}
	return epoch, 0, false
}

// TruncateFromEnd drops the epochs that start at or after end: what a
// replica does to its history when it truncates its log to end.
func (h History) TruncateFromEnd(end uint64) History {
	i := len(h)
	for i > 0 && h[i-1].Start >= end {
		i--
	}
	return h[:i:i]
}

// TruncateFromStart forgets what retention deleted below start, keeping the
// epoch that start falls in (moved to begin at start), so lookups of it and
// later epochs answer as before.
func (h History) TruncateFromStart(start uint64) History {
	i := 0
	for i < len(h) && h[i].Start <= start {
		i++
	}
	if i == 0 || (i == 1 && h[0].Start == start) {
		return h
	}
	keep := h[i-1]
	keep.Start = start
	return append(History{keep}, h[i:]...)
}

// String prints the history as "epoch@start ..." for logs and tests.
func (h History) String() string {
	if len(h) == 0 {
		return "empty"
	}
	parts := make([]string, len(h))
	for i, e := range h {
		parts[i] = fmt.Sprintf("%d@%d", e.Epoch, e.Start)
	}
	return strings.Join(parts, " ")
}

// The encoded history: big-endian like the segment format, a CRC32C over
// everything before it so a torn or flipped checkpoint is refused rather than
// trusted.
//
//	magic "SLEH" | version u8 = 1 | count u32 | count × (epoch i32, start i64) | crc32c u32
const (
	magic      = "SLEH"
	version    = 1
	headerSize = 4 + 1 + 4
	entrySize  = 4 + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the history's durable form.
func (h History) Encode() []byte {
	b := make([]byte, 0, headerSize+len(h)*entrySize+4)
	b = append(b, magic...)
	b = append(b, version)
	b = binary.BigEndian.AppendUint32(b, uint32(len(h)))
	for _, e := range h {
		b = binary.BigEndian.AppendUint32(b, uint32(e.Epoch))
		b = binary.BigEndian.AppendUint64(b, e.Start)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// ErrCorrupt wraps every error Decode returns; it answers
// integrity.IsCorruption.
var ErrCorrupt = integrity.Sentinel("corrupt leader-epoch history")

// Decode reads what Encode wrote, and refuses anything else: a wrong magic,
// version, length or checksum, or entries out of order.
func Decode(b []byte) (History, error) {
	bad := func(format string, args ...any) (History, error) {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if len(b) < headerSize+4 {
		return bad("%d bytes, fewer than the %d of an empty history", len(b), headerSize+4)
	}
	if string(b[:4]) != magic {
		return bad("magic %q, want %q", b[:4], magic)
	}
	if b[4] != version {
		return bad("version %d, want %d", b[4], version)
	}
	n := binary.BigEndian.Uint32(b[5:9])
	if want := uint64(headerSize) + uint64(n)*entrySize + 4; uint64(len(b)) != want {
		return bad("%d entries need %d bytes, have %d", n, want, len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return bad("checksum %08x, stored %08x", got, sum)
	}
	h := make(History, 0, n)
	for i := range int(n) {
		p := body[headerSize+i*entrySize:]
		e := store.EpochEntry{Epoch: int32(binary.BigEndian.Uint32(p)), Start: binary.BigEndian.Uint64(p[4:])}
		if e.Epoch < 0 || e.Start > MaxStart {
			return bad("entry %d: epoch %d at offset %d: the epoch must be >= 0 and the offset below 2^63", i, e.Epoch, e.Start)
		}
		if last, ok := h.Latest(); ok && (e.Epoch <= last.Epoch || e.Start <= last.Start) {
			return bad("entry %d: epoch %d at offset %d does not follow epoch %d at offset %d", i, e.Epoch, e.Start, last.Epoch, last.Start)
		}
		h = append(h, e)
	}
	return h, nil
}
