package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/leaderepoch"
	"strata/engine/record"
	"strata/partition"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxDecompressed bounds what one batch may inflate to: a small compressed
// batch must not make the broker allocate gigabytes.
const maxDecompressed = 64 << 20

// recordOverhead is what decoding one record costs beyond its bytes (the
// record's struct and slice headers), charged to the inflate budget so a
// batch of millions of empty records is bounded too.
const recordOverhead = 128

// errTooLarge is wrapped by every refusal of a batch for its inflated size,
// which Produce answers with MESSAGE_TOO_LARGE.
var errTooLarge = errors.New("record batch too large")

// errInflateBudget: the request's batches inflate past its budget.
var errInflateBudget = fmt.Errorf("%w: the request's record batches inflate past kafka.max_inflated_request_bytes", errTooLarge)

// errInvalidRecord is wrapped by every refusal of a batch whose header
// disagrees with its records, which Produce answers with INVALID_RECORD as
// Kafka's log validator does: idempotence takes a batch's sequence range
// from its header, so a header that lies would make real batches look like
// duplicates (stored nowhere, answered as stored) or let a retry in twice.
var errInvalidRecord = errors.New("invalid record batch")

// errTransactional refuses a transactional batch: strata has no
// transaction coordinator, so no producer can have begun a transaction
// (Kafka answers INVALID_TXN_STATE for a partition not in a transaction).
var errTransactional = errors.New("transactional record batch: strata does not support transactions yet")

// Batch attributes (Kafka's RecordBatch): beside the codec in the low bits.
const (
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// decodeBatches unpacks the record batches of one partition of a Produce
// request into protocol-neutral records (docs/design.md: unpack on write). left
// is what the whole request may still inflate to; decoding charges it.
func decodeBatches(raw []byte, left *int64) ([]record.Record, []kmsg.RecordBatch, error) {
	var recs []record.Record
	var batches []kmsg.RecordBatch
	for len(raw) > 0 {
		if len(raw) < 12 {
			return nil, nil, errors.New("truncated record batch header")
		}
		n := int(int32(binary.BigEndian.Uint32(raw[8:]))) + 12
		if n < 61 || n > len(raw) {
			return nil, nil, fmt.Errorf("record batch length %d with %d bytes left", n-12, len(raw))
		}
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw[:n]); err != nil {
			return nil, nil, fmt.Errorf("record batch: %w", err)
		}
		if b.Magic != 2 {
			return nil, nil, fmt.Errorf("record batch magic %d: only v2 batches are accepted", b.Magic)
		}
		// The CRC covers everything after base offset, length, leader epoch, magic and crc.
		if got := crc32.Checksum(raw[21:n], castagnoli); got != uint32(b.CRC) {
			return nil, nil, fmt.Errorf("record batch crc %08x, computed %08x", uint32(b.CRC), got)
		}
		raw = raw[n:]
		if len(batches) > 0 {
			// Kafka: a Produce request (v3 on) holds exactly one batch per
			// partition. Idempotence checks one batch's sequence range.
			return nil, nil, fmt.Errorf("%w: a partition's records in a produce request are one batch, not several", errInvalidRecord)
		}
		if err := checkBatchHeader(&b); err != nil {
			return nil, nil, err
		}
		data, err := decompress(b.Attributes&0x07, b.Records, min(maxDecompressed, atomic.LoadInt64(left)))
		if err != nil {
			return nil, nil, err
		}
		if b.NumRecords < 0 || int64(b.NumRecords) > int64(len(data)) {
			return nil, nil, fmt.Errorf("record batch claims %d records in %d bytes", b.NumRecords, len(data))
		}
		if atomic.AddInt64(left, -int64(len(data))-int64(b.NumRecords)*recordOverhead) < 0 {
			return nil, nil, errInflateBudget
		}
		for i := int32(0); i < b.NumRecords; i++ {
			l, k := binary.Varint(data)
			if k <= 0 || l < 0 || int(l) > len(data)-k {
				return nil, nil, fmt.Errorf("record %d of a batch of %d: bad length", i, b.NumRecords)
			}
			var r kmsg.Record
			if err := r.ReadFrom(data[:k+int(l)]); err != nil {
				return nil, nil, fmt.Errorf("record %d: %w", i, err)
			}
			data = data[k+int(l):]
			rec := record.Record{
				Timestamp:    b.FirstTimestamp + r.TimestampDelta64,
				Key:          r.Key,
				Value:        r.Value,
				ProtocolData: partition.ProducerData(b.ProducerID, b.ProducerEpoch, partition.SeqAdd(b.FirstSequence, r.OffsetDelta), i == b.NumRecords-1),
			}
			if r.OffsetDelta != i {
				return nil, nil, fmt.Errorf("%w: record %d of the batch has offset delta %d", errInvalidRecord, i, r.OffsetDelta)
			}
			if b.Attributes&attrLogAppendTime != 0 { // the broker's clock
				rec.Timestamp = b.MaxTimestamp
			}
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, record.Header{Key: h.Key, Value: h.Value})
			}
			recs = append(recs, rec)
		}
		if len(data) > 0 {
			return nil, nil, fmt.Errorf("%w: %d bytes follow the batch's %d records", errInvalidRecord, len(data), b.NumRecords)
		}
		batches = append(batches, b)
	}
	return recs, batches, nil
}

// checkBatchHeader refuses what Kafka's log validator refuses of a client's
// batch before its records are read.
func checkBatchHeader(b *kmsg.RecordBatch) error {
	switch {
	case b.NumRecords <= 0:
		return fmt.Errorf("%w: the batch claims %d records", errInvalidRecord, b.NumRecords)
	case b.LastOffsetDelta != b.NumRecords-1:
		return fmt.Errorf("%w: last offset delta %d in a batch of %d records", errInvalidRecord, b.LastOffsetDelta, b.NumRecords)
	case b.Attributes&attrControl != 0:
		return fmt.Errorf("%w: clients may not write control batches", errInvalidRecord)
	case b.Attributes&attrTransactional != 0:
		return errTransactional
	}
	return nil
}

// zstdDecoder is shared: a decoder per batch costs more than most batches.
var zstdDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxDecompressed))

// decompress inflates data, refusing to produce more than limit bytes. A
// size the codec declares up front (zstd's frame content size, gzip's
// trailer) is checked before any work, so a declared bomb costs nothing,
// and sizes the output buffer once.
func decompress(codec int16, data []byte, limit int64) ([]byte, error) {
	var r io.Reader
	declared := int64(-1)
	switch codec {
	case 0:
		return data, nil
	case 1:
		if len(data) >= 18 {
			declared = int64(binary.LittleEndian.Uint32(data[len(data)-4:])) // ISIZE: the size mod 2^32
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("gzip batch: %w", err)
		}
		r = zr
	case 2:
		return unsnappy(data, limit)
	case 3:
		r = lz4.NewReader(bytes.NewReader(data))
	case 4:
		var h zstd.Header
		if err := h.Decode(data); err == nil && h.HasFCS && !h.Skippable {
			if int64(h.FrameContentSize) > limit || h.FrameContentSize > maxDecompressed {
				return nil, tooBig(limit)
			}
			out, err := zstdDecoder.DecodeAll(data, make([]byte, 0, h.FrameContentSize))
			if err != nil {
				return nil, fmt.Errorf("decompress zstd: %w", err)
			}
			if int64(len(out)) > limit {
				return nil, tooBig(limit)
			}
			return out, nil
		}
		zr, err := zstd.NewReader(bytes.NewReader(data), zstd.WithDecoderMaxMemory(maxDecompressed), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	default:
		return nil, fmt.Errorf("unknown compression codec %d", codec)
	}
	if declared > limit {
		return nil, tooBig(limit)
	}
	var out bytes.Buffer
	if declared > 0 {
		out.Grow(int(declared))
	}
	if _, err := out.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return nil, fmt.Errorf("decompress codec %d: %w", codec, err)
	}
	if int64(out.Len()) > limit {
		return nil, tooBig(limit)
	}
	return out.Bytes(), nil
}

func tooBig(limit int64) error {
	if limit < maxDecompressed {
		return errInflateBudget
	}
	return fmt.Errorf("%w: a batch inflates past %d bytes", errTooLarge, maxDecompressed)
}

var xerialHeader = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// unsnappy decodes a Kafka snappy payload: raw snappy, or the xerial
// framing the Java client writes (a header, then length-prefixed chunks).
func unsnappy(data []byte, limit int64) ([]byte, error) {
	if !bytes.HasPrefix(data, xerialHeader) {
		n, err := s2.DecodedLen(data)
		if err != nil {
			return nil, fmt.Errorf("snappy batch: bad length (%v)", err)
		}
		if int64(n) > limit {
			return nil, errInflateBudget
		}
		return s2.Decode(nil, data)
	}
	data = data[16:] // header, version, compatible version
	var out []byte
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, errors.New("xerial snappy: truncated chunk length")
		}
		n := int(binary.BigEndian.Uint32(data))
		if n > len(data)-4 {
			return nil, errors.New("xerial snappy: chunk past the end")
		}
		dl, err := s2.DecodedLen(data[4 : 4+n])
		if err != nil {
			return nil, fmt.Errorf("xerial snappy: bad chunk (%v)", err)
		}
		if int64(len(out)+dl) > limit {
			return nil, errInflateBudget
		}
		chunk, err := s2.Decode(nil, data[4:4+n])
		if err != nil {
			return nil, fmt.Errorf("xerial snappy: %w", err)
		}
		out = append(out, chunk...)
		data = data[4+n:]
	}
	return out, nil
}

// encodeBatches frames stored records as uncompressed v2 record batches,
// one per leader epoch they were written under: a batch's
// PartitionLeaderEpoch is the epoch of the history entry that covers its
// first offset, and a batch never spans the start of another epoch (a
// follower records each batch's epoch from its first offset). Without a
// history (a single node) the records are one batch with epoch -1.
func encodeBatches(dst []byte, recs []record.Record, epochs leaderepoch.History) []byte {
	for len(recs) > 0 {
		epoch, next, bounded := epochs.EpochAt(recs[0].Offset)
		// Offsets increase, with gaps in a compacted log: the records
		// before next are those of this epoch, and a batch's offset deltas
		// are int32s.
		if !bounded || recs[0].Offset+math.MaxInt32 < next {
			next = recs[0].Offset + math.MaxInt32
		}
		n := sort.Search(len(recs), func(i int) bool { return recs[i].Offset >= next })
		dst = encodeEpochBatch(dst, recs[:n], epoch, false)
		recs = recs[n:]
	}
	return dst
}

// batchesSize is about what encodeBatches makes of recs, to size its
// buffer once: a record takes fewer bytes framed than stored, but for its
// headers (up to 4 more each) and each batch's header.
func batchesSize(recs []record.Record) int {
	n := 0
	for i := range recs {
		n += record.Size(&recs[i])
	}
	return n
}

// encodeBatch frames records to produce as one batch with no leader epoch
// (-1): their offset deltas are their places in it (0 to n-1), whatever
// offsets they carry, as a producer's are.
func encodeBatch(dst []byte, recs []record.Record) []byte { return encodeEpochBatch(dst, recs, -1, true) }

// encodeEpochBatch frames stored records as one uncompressed v2 record
// batch (docs/design.md: reframe on read) of leader epoch leaderEpoch appended to
// dst. Offsets in a read increase, and have gaps where a cleaning removed
// records (a compacted topic): each record's offset delta is its own, as in
// a batch Kafka's cleaner rewrote. Each record's length is computed
// first so every byte is written once, into a buffer grown once: a fetch
// moves megabytes.
func encodeEpochBatch(dst []byte, recs []record.Record, leaderEpoch int32, ordinal bool) []byte {
	if len(recs) == 0 {
		return dst
	}
	delta := func(i int) int32 {
		if ordinal {
			return int32(i)
		}
		return int32(recs[i].Offset - recs[0].Offset)
	}
	first, maxTS := recs[0].Timestamp, recs[0].Timestamp
	for _, r := range recs {
		first = min(first, r.Timestamp)
		maxTS = max(maxTS, r.Timestamp)
	}
	lengths := make([]int32, len(recs))
	size := batchHeaderSize
	for i := range recs {
		lengths[i] = recordLen(&recs[i], recs[i].Timestamp-first, delta(i))
		size += kbin.VarintLen(lengths[i]) + int(lengths[i])
	}
	start := len(dst)
	dst = slices.Grow(dst, size)
	b := kmsg.RecordBatch{
		FirstOffset: int64(recs[0].Offset), PartitionLeaderEpoch: leaderEpoch, Magic: 2,
		LastOffsetDelta: delta(len(recs) - 1), FirstTimestamp: first, MaxTimestamp: maxTS,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(recs)),
	}
	dst = b.AppendTo(dst) // the header; the records follow it
	for i := range recs {
		dst = appendRecord(dst, lengths[i], recs[i].Timestamp-first, delta(i), &recs[i])
	}
	batch := dst[start:]
	binary.BigEndian.PutUint32(batch[8:], uint32(len(batch)-12))
	binary.BigEndian.PutUint32(batch[17:], crc32.Checksum(batch[21:], castagnoli))
	return dst
}

// appendRecord appends r as a v2 record, as kmsg.Record.AppendTo does,
// without building a kmsg.Record (and a header slice) for each one: a
// fetch frames thousands.
func appendRecord(dst []byte, length int32, tsDelta int64, offsetDelta int32, r *record.Record) []byte {
	dst = kbin.AppendVarint(dst, length)
	dst = append(dst, 0) // attributes
	dst = kbin.AppendVarlong(dst, tsDelta)
	dst = kbin.AppendVarint(dst, offsetDelta)
	dst = kbin.AppendVarintBytes(dst, r.Key)
	dst = kbin.AppendVarintBytes(dst, r.Value)
	dst = kbin.AppendVarint(dst, int32(len(r.Headers)))
	for _, h := range r.Headers {
		dst = kbin.AppendVarintString(dst, h.Key)
		dst = kbin.AppendVarintBytes(dst, h.Value)
	}
	return dst
}

// batchHeaderSize is a v2 record batch without its records.
const batchHeaderSize = 61

// recordLen is the Length field of r as a v2 record: everything after it.
func recordLen(r *record.Record, tsDelta int64, offsetDelta int32) int32 {
	n := 1 + kbin.VarlongLen(tsDelta) + kbin.VarintLen(offsetDelta) + // attributes, deltas
		bytesLen(r.Key) + bytesLen(r.Value) + kbin.VarintLen(int32(len(r.Headers)))
	for _, h := range r.Headers {
		n += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	return int32(n)
}

// bytesLen is the size of a varint-prefixed nullable byte string.
func bytesLen(b []byte) int {
	if b == nil {
		return kbin.VarintLen(-1)
	}
	return kbin.VarintLen(int32(len(b))) + len(b)
}
