// Package store is the contract every storage engine meets (seed 002's
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
	// OffsetForTime returns the first offset whose record's timestamp is at
	// or after ts (ms), or the high watermark if there is none.
	OffsetForTime(ctx context.Context, shard string, ts int64) (uint64, error)
	// ReadByKey and ReadByTag return records with the key or tag, from
	// offset on, in offset order.
	ReadByKey(ctx context.Context, shard string, key []byte, from uint64, b Budget) ([]record.Record, error)
	ReadByTag(ctx context.Context, shard string, tag string, from uint64, b Budget) ([]record.Record, error)
	// Watermarks returns the first readable offset and the next offset to
	// be written.
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

// Budget bounds one read. Zero means no bound.
type Budget struct {
	MaxRecords int
	MaxBytes   int
}

var (
	ErrUnknownShard = errors.New("unknown shard")
	ErrShardExists  = errors.New("shard exists")
	ErrClosed       = errors.New("store closed")
)

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
