// Package store is the contract every storage engine meets (docs/design.md's
// Storage Adapter): the segment engine, the memory engine and the Pebble
// engine all implement Store and pass the suite in store/storetest.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"strata/engine/record"
)

// Store is a set of shards, each an append-only log of records.
type Store interface {
	// CreateShard makes an empty shard; ErrShardExists if it exists.
	CreateShard(ctx context.Context, shard string) error
	// Append assigns the records contiguous offsets in order, starting at
	// the shard's next offset, makes them durable as the engine's policy
	// says, and returns the first offset assigned.
	Append(ctx context.Context, shard string, recs []record.Record) (base uint64, err error)
	// Read returns records from offset on, within the budget. The first
	// record is returned even when larger than MaxBytes.
	Read(ctx context.Context, shard string, offset uint64, b Budget) ([]record.Record, error)
	// OffsetForTime returns the first offset below the high watermark whose
	// record's timestamp is at or after ts (ms), or the high watermark if
	// there is none.
	OffsetForTime(ctx context.Context, shard string, ts int64) (uint64, error)
	// ReadByKey and ReadByTag return records with the key or tag, from
	// offset on, in offset order.
	ReadByKey(ctx context.Context, shard string, key []byte, from uint64, b Budget) ([]record.Record, error)
	ReadByTag(ctx context.Context, shard string, tag string, from uint64, b Budget) ([]record.Record, error)
	// Watermarks returns the readable range [low, high): high is the high
	// watermark, which is the log end (the next offset to be written) until
	// the shard's high watermark is managed (Replica.SetHighWatermark).
	Watermarks(ctx context.Context, shard string) (low, high uint64, err error)
	// DeleteBefore makes offsets below offset unreadable (Kafka's
	// DeleteRecords): the low watermark becomes offset.
	DeleteBefore(ctx context.Context, shard string, offset uint64) error
	// Shards lists every shard in name order.
	Shards(ctx context.Context) ([]string, error)
	// DeleteShard removes a shard and all its records.
	DeleteShard(ctx context.Context, shard string) error
	Close() error
}

// Replica is the seam replication builds on (docs/engine.md, "Log end and
// high watermark"). A shard has two upper marks:
//
//   - the log end: the next offset to be written;
//   - the high watermark: below it every record is replicated (committed).
//     Read, ReadByKey, ReadByTag, OffsetForTime and Watermarks never show a
//     record at or above it.
//
// Until a shard's first SetHighWatermark, its high watermark follows its
// log end, as on one node: every acknowledged record is readable. The first
// SetHighWatermark makes it managed, for good (kept across a restart by the
// durable engines): from then on it moves only when SetHighWatermark says.
// All three engines implement Replica.
type Replica interface {
	// LogEnd returns the next offset to be written.
	LogEnd(ctx context.Context, shard string) (uint64, error)
	// SetHighWatermark raises the shard's high watermark to hw and makes it
	// managed. It never moves back: an hw at or below the current one
	// leaves it (and, on the first call, a shard whose high watermark
	// followed its log end keeps it there). An hw past the log end is
	// refused (ErrPastLogEnd). The durable engines keep it across a
	// restart, possibly a little behind after a machine crash (never ahead).
	SetHighWatermark(ctx context.Context, shard string, hw uint64) error
	// ReadToLogEnd reads as Read does but up to the log end, not the high
	// watermark: what a leader serves to the followers copying it.
	ReadToLogEnd(ctx context.Context, shard string, offset uint64, b Budget) ([]record.Record, error)
	// AppendAt appends records that carry their offsets (a follower copying
	// its leader): the first must be the log end, the rest follow it.
	AppendAt(ctx context.Context, shard string, recs []record.Record) error
	// TruncateTo removes every record at or after end, durably: the log
	// end becomes end (a follower whose log diverged from its new leader's
	// cuts it at the leader's epoch end offset, as Kafka's truncateTo).
	// An end below the high watermark is refused (ErrCommitted): committed
	// records are never cut. An end at or past the log end changes nothing.
	TruncateTo(ctx context.Context, shard string, end uint64) error
}

// EpochEntry is one leader epoch of a shard and the first offset written
// under it.
type EpochEntry struct {
	Epoch int32
	Start uint64
}

// Epochs is the seam for a shard's leader-epoch history (Kafka's
// leader-epoch checkpoint, docs/replication.md): the (epoch, first offset)
// entries that record batches carry, OffsetForLeaderEpoch answers from and a
// follower truncates by. Epochs and starts strictly increase. The history
// follows the log: TruncateTo drops the entries that start at or after the
// new end (even when no record is cut), retention (DeleteBefore, evictions,
// dropped segments) forgets the epochs wholly below the low watermark,
// keeping the one that covers it, moved to start there, and DeleteShard
// removes it. The durable engines keep it across a restart.
// All three engines and the adapter implement Epochs.
type Epochs interface {
	// AssignEpoch durably records that the records from start on are written
	// under leader epoch. The same epoch again (at any start at or after its
	// own) changes nothing; a newer epoch at the latest entry's start
	// replaces that entry (the older epoch wrote nothing); a newer epoch
	// later is added. An older epoch, or a start before the latest entry's,
	// is refused (ErrEpochOrder, naming both), and so is a start past the
	// log end (ErrPastLogEnd) or a negative epoch.
	AssignEpoch(ctx context.Context, shard string, epoch int32, start uint64) error
	// LeaderEpochs is the shard's history, oldest first; empty (nil) when
	// no epoch was ever assigned, as on a single node.
	LeaderEpochs(ctx context.Context, shard string) ([]EpochEntry, error)
}

// Starter is how a node takes over a partition whose earlier offsets
// another node holds: when leadership moves at a segment roll, the new
// leader's shard begins where the old leader's log stopped, and the offsets
// below stay with the old node. CreateShard is CreateShardAt(ctx, shard, 0).
// All three engines and the adapter implement Starter.
type Starter interface {
	// CreateShardAt makes an empty shard whose log begins at start: its low
	// watermark, log end and high watermark are start, and the first Append
	// is given offset start. ErrShardExists if it exists. The durable
	// engines keep the start across a restart.
	CreateShardAt(ctx context.Context, shard string, start uint64) error
}

// BatchCreator is a Store that makes many shards in one step (the segment
// engine, and the adapter in front of it): a topic of 10,000 partitions
// is one manifest commit and one sync of the data folder, not 10,000 of
// each.
type BatchCreator interface {
	// CreateShards makes empty shards whose logs begin at offset 0, all or
	// none: if one exists, ErrShardExists naming it, and none is made; a
	// failure part way is undone. A crash leaves all of them (after the
	// restart) or none.
	CreateShards(ctx context.Context, shards []string) error
}

// CreateShards makes the shards in one step when s can (BatchCreator),
// else one by one, stopping at the first error (those before it made).
func CreateShards(ctx context.Context, s Store, shards []string) error {
	if bc, ok := s.(BatchCreator); ok {
		return bc.CreateShards(ctx, shards)
	}
	for _, sh := range shards {
		if err := s.CreateShard(ctx, sh); err != nil {
			return err
		}
	}
	return nil
}

// Viewer is a Store that can read without copying (the segment engine and
// the adapter): ReadView answers what Read answers, but the records' byte
// slices may alias the engine's memory (an mmapped segment file). They
// stay valid, whatever happens to the shard meanwhile, until release is
// called, exactly once; the caller must not touch them after. For a read
// that only passes records on (a Kafka fetch reframing them), it saves a
// copy of every byte.
type Viewer interface {
	ReadView(ctx context.Context, shard string, offset uint64, b Budget) (recs []record.Record, release func(), err error)
}

// ReadView reads through s's ReadView when it has one, else through Read
// (the records are then the caller's, and release does nothing).
func ReadView(ctx context.Context, s Store, shard string, offset uint64, b Budget) ([]record.Record, func(), error) {
	if v, ok := s.(Viewer); ok {
		return v.ReadView(ctx, shard, offset, b)
	}
	recs, err := s.Read(ctx, shard, offset, b)
	return recs, func() {}, err
}

// Budget bounds one read. Zero means no bound.
type Budget struct {
	MaxRecords int
	MaxBytes   int
}

var (
	ErrUnknownShard = errors.New("unknown shard")
	ErrShardExists  = errors.New("shard exists")
	// ErrShardDeleting refuses a shard whose name an earlier shard's
	// deletion still holds: its listeners (the cold tier's objects, the
	// topic's table) have not finished, and are being retried.
	ErrShardDeleting = errors.New("an earlier shard of the name is still being deleted")
	ErrClosed        = errors.New("store closed")
	// ErrCommitted refuses a TruncateTo below the high watermark.
	ErrCommitted = errors.New("committed records cannot be truncated")
	// ErrSealedSegment refuses a TruncateTo inside a sealed segment: the
	// segment engine cuts only its active one.
	ErrSealedSegment = errors.New("only the active segment can be truncated")
	// ErrPastLogEnd refuses a SetHighWatermark past the log end.
	ErrPastLogEnd = errors.New("past the log end")
	// ErrEpochOrder refuses an AssignEpoch that would move a shard's
	// leader-epoch history backwards.
	ErrEpochOrder = errors.New("leader epoch out of order")
	// ErrStorage is under every refusal of a shard whose disk failed it (a
	// failed fsync), as damage answers integrity.IsCorruption: a client is
	// told the log's storage failed (Kafka's KAFKA_STORAGE_ERROR), not
	// that the server did.
	ErrStorage = errors.New("the shard's storage failed")
)

// TruncateCommittedError is the error of a TruncateTo below the high watermark.
func TruncateCommittedError(shard string, end, hw uint64) error {
	return fmt.Errorf("shard %s: truncate to offset %d refused: the high watermark is %d, and the records below it are replicated: %w",
		shard, end, hw, ErrCommitted)
}

// HighWatermarkPastLogEndError is the error of a SetHighWatermark past the log end.
func HighWatermarkPastLogEndError(shard string, hw, end uint64) error {
	return fmt.Errorf("shard %s: high watermark %d refused: the log ends at %d: %w", shard, hw, end, ErrPastLogEnd)
}

// EpochPastLogEndError is the error of an AssignEpoch past the log end.
func EpochPastLogEndError(shard string, epoch int32, start, end uint64) error {
	return fmt.Errorf("shard %s: leader epoch %d at offset %d refused: the log ends at %d: %w", shard, epoch, start, end, ErrPastLogEnd)
}

// CheckAppendAt checks that records carry contiguous offsets starting at
// the log end end.
func CheckAppendAt(shard string, recs []record.Record, end uint64) error {
	if len(recs) == 0 {
		return errors.New("append at: no records")
	}
	if recs[0].Offset != end {
		return fmt.Errorf("shard %s: append at offset %d, but the next offset is %d", shard, recs[0].Offset, end)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Offset != recs[0].Offset+uint64(i) {
			return fmt.Errorf("shard %s: append at: offset %d follows %d", shard, recs[i].Offset, recs[i-1].Offset)
		}
	}
	return nil
}

// OutOfRangeError is a read below the low or above the high watermark.
type OutOfRangeError struct {
	Shard     string
	Offset    uint64
	Low, High uint64
}

func (e *OutOfRangeError) Error() string {
	return fmt.Sprintf("shard %s: offset %d is out of range: readable offsets are %d up to %d (the next to be written)", e.Shard, e.Offset, e.Low, e.High)
}

// Name limits: Kafka's for a topic; a shard adds "-{partition}" and is a
// folder name, so it may use up to the filesystem's 255 bytes.
const (
	MaxTopicLen = 249
	MaxShardLen = 255
)

// ValidateShard refuses shard names that are unsafe as folder names or not
// Kafka topic-partition names: letters, digits, '.', '_' and '-', at most
// MaxShardLen bytes, not "." or "..".
func ValidateShard(name string) error {
	return validateName("shard", name, MaxShardLen)
}

// ValidateTopic checks a topic name as Kafka does: the characters of a
// shard name, at most MaxTopicLen bytes.
func ValidateTopic(name string) error {
	return validateName("topic", name, MaxTopicLen)
}

func validateName(what, name string, maxLen int) error {
	if name == "" {
		return fmt.Errorf("%s name is empty", what)
	}
	if len(name) > maxLen {
		return fmt.Errorf("%s name %.40q... is %d bytes, at most %d", what, name, len(name), maxLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%s name %q is not allowed", what, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%s name %q has %q at byte %d: only letters, digits, '.', '_' and '-' are allowed", what, name, c, i)
		}
	}
	return nil
}

// TopicPartition is a Kafka partition; its shard is "{topic}-{partition}".
// Every place that needs one half of a shard name parses it with
// ParseShard, never by hand.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Shard is the partition's shard name.
func (tp TopicPartition) Shard() string { return tp.Topic + "-" + strconv.Itoa(int(tp.Partition)) }

// ParseShard splits a shard name at its last '-'. ok is false when the
// name has no non-negative partition number after a non-empty topic (a
// shard made outside Kafka's naming); Topic is then the whole name.
func ParseShard(shard string) (tp TopicPartition, ok bool) {
	i := strings.LastIndexByte(shard, '-')
	if i <= 0 {
		return TopicPartition{Topic: shard}, false
	}
	p, err := strconv.ParseInt(shard[i+1:], 10, 32)
	if err != nil || p < 0 || strconv.Itoa(int(p)) != shard[i+1:] {
		return TopicPartition{Topic: shard}, false
	}
	return TopicPartition{Topic: shard[:i], Partition: int32(p)}, true
}

// ShardName is Kafka's topic-partition naming: "{topic}-{partition}".
func ShardName(topic string, partition int32) string {
	return TopicPartition{Topic: topic, Partition: partition}.Shard()
}

// Take reports whether a record of size bytes fits the budget after n
// records and used bytes; the first record always fits.
func (b Budget) Take(n, used, size int) bool {
	if n == 0 {
		return true
	}
	if b.MaxRecords > 0 && n >= b.MaxRecords {
		return false
	}
	return b.MaxBytes <= 0 || used+size <= b.MaxBytes
}
