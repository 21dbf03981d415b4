// Package workload is a randomized, seeded workload for strata's Kafka front
// end and the pure parts that judge it (a metamorphic test in Pebble's sense):
// a generator of operations, an in-memory model of what must be readable, and
// a checker that compares what the service serves with the model.
//
// Nothing here does I/O: the driver (internal/workload/driver) runs the
// operations against a real `strata serve` and reports outcomes and reads to
// the Model, which answers with Violations.
package workload

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	"strata/engine/record"
)

// IDHeader is the header every generated record carries first: its id, so a
// record read back can be traced to the operation that produced it.
const IDHeader = "wl-id"

// Header is a Kafka record header; a nil Value is a null value.
type Header struct {
	Key   string
	Value []byte
}

// Rec is a record's content as produced and as read back. Nil and empty
// keys, values and header values are different things and compared as such.
type Rec struct {
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp int64 // ms
}

// compact is r as the model keeps it: a value over 64 bytes becomes its
// length and SHA-256, so a long run holds every record's identity without
// every record's bytes (a 30-minute run held 23 GB before). Null and empty
// stay apart, and a record read back is compacted the same way to compare.
func (r Rec) compact() Rec {
	if len(r.Value) > 64 {
		sum := sha256.Sum256(r.Value)
		r.Value = fmt.Appendf(nil, "%d bytes, sha256 %x", len(r.Value), sum)
	}
	return r
}

// ID is the record's id header, or "" when it has none.
func (r *Rec) ID() string {
	for _, h := range r.Headers {
		if h.Key == IDHeader {
			return string(h.Value)
		}
	}
	return ""
}

// Diff describes how got differs from r, or returns "" when equal.
func (r *Rec) Diff(got *Rec) string {
	switch {
	case r.Timestamp != got.Timestamp:
		return fmt.Sprintf("timestamp %d, produced %d", got.Timestamp, r.Timestamp)
	case !sameBytes(r.Key, got.Key):
		return "key " + describeBytes(got.Key) + ", produced " + describeBytes(r.Key)
	case !sameBytes(r.Value, got.Value):
		return "value " + describeBytes(got.Value) + ", produced " + describeBytes(r.Value) + firstDiff(r.Value, got.Value)
	case len(r.Headers) != len(got.Headers):
		return fmt.Sprintf("%d headers, produced %d", len(got.Headers), len(r.Headers))
	}
	for i := range r.Headers {
		if r.Headers[i].Key != got.Headers[i].Key || !sameBytes(r.Headers[i].Value, got.Headers[i].Value) {
			return fmt.Sprintf("header %d is %q=%s, produced %q=%s", i, got.Headers[i].Key, describeBytes(got.Headers[i].Value),
				r.Headers[i].Key, describeBytes(r.Headers[i].Value))
		}
	}
	return ""
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func describeBytes(b []byte) string {
	switch {
	case b == nil:
		return "null"
	case len(b) <= 16:
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%d bytes", len(b))
}

func firstDiff(want, got []byte) string {
	if want == nil || got == nil {
		return ""
	}
	for i := 0; i < min(len(want), len(got)); i++ {
		if want[i] != got[i] {
			return fmt.Sprintf(" (first difference at byte %d)", i)
		}
	}
	return ""
}

// MaxBatchInflated is how far one Kafka record batch may inflate on the
// broker (api/kafka: maxDecompressed); a larger batch is refused whole.
const MaxBatchInflated = 64 << 20

// InflatedSize is the size of the records section of a batch holding r
// alone, as a Kafka producer encodes it: what the broker decompresses.
func InflatedSize(r *Rec) int {
	body := 1 + varintLen(0) + varintLen(0) // attributes, timestamp delta, offset delta
	body += bytesLen(r.Key) + bytesLen(r.Value) + varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		body += varintLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	return varintLen(int64(body)) + body
}

// EngineSize is the size of r as a strata segment record (docs/format.md),
// with the Kafka protocol data an idempotent producer adds.
func EngineSize(r *Rec, idempotent bool) int {
	rec := record.Record{Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, record.Header{Key: h.Key, Value: h.Value})
	}
	if idempotent {
		rec.ProtocolData = make([]byte, 14) // producer id, epoch, sequence
	}
	return record.Size(&rec)
}

// OverLimit reports whether the broker must refuse r: its batch inflates
// past MaxBatchInflated or it is larger than the engine's record.MaxSize.
func OverLimit(r *Rec, idempotent bool) bool {
	return InflatedSize(r) > MaxBatchInflated || EngineSize(r, idempotent) > record.MaxSize
}

func bytesLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the length of Kafka's zigzag varint encoding of v.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
