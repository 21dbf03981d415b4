// Package peer is the node-to-node protocol: how one strata node asks
// another for records, over the other's Kafka listener. A follower copies
// its leader, a node reads another's copy of a sealed segment for tiering,
// and a leader reads the parts of a split log other nodes hold, all with
// Kafka's own Fetch (and ListOffsets, DeleteRecords) sent as a replica, so
// they ride on the same TLS and SASL as every other request. What Kafka's
// wire cannot say (strata's own record format, the leader's log end,
// segment starts and epochs, the follower's seals and log start, the
// sender's proof) travels in private tagged fields, defined here with
// their codecs.
//
// The package has three parts: the wire (this file), the Client a node
// sends with (client.go: replica.Transport, copy reads, split-log reads)
// and the Server that answers a marked Fetch from the store and a Leader
// (server.go). The proof a peer's request carries is proof.go.
// docs/replication.md draws the protocol; docs/seams.md says who imports
// whom.
package peer

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/replica"
)

// A follower copies its leader with Kafka's own Fetch, sent as a replica
// (replica id: the follower's node id). Kafka's record batches cannot
// carry strata's records byte for byte (tags, per-record producer fields),
// so the follower marks its fetch with a tagged field (KIP-482: a flexible
// version's way to add optional data) and the leader answers with the
// records in strata's own format (docs/format.md), plus where its segments
// start and its leader-epoch history, also as tagged fields.
const (
	// tagReplicaFetch, on a request partition: 1 byte of flags (probe);
	// on a response partition: present when the records are strata's.
	tagReplicaFetch = 0x5301
	// tagLogEnd, on a response partition: the leader's log end, i64.
	tagLogEnd = 0x5302
	// tagRolls, on a response partition: count u32, then count i64
	// offsets where the leader's segments start.
	tagRolls = 0x5303
	// tagEpochs, on a response partition: the leader's epoch history in
	// its durable form (replica.EpochHistory.Encode).
	tagEpochs = 0x5304
	// tagSeals, on a request partition: the follower's recently sealed
	// copies, count u32, then count × (first offset u64, last offset u64,
	// crc32c u32).
	tagSeals = 0x5305
	// tagCopyRead marks a copy read's partitions, asked and answered
	// (server.go).
	tagCopyRead = 0x5306
	// tagPeerProof, on a request: time (unix ns) i64, nonce [16], HMAC [32]
	// (proof.go).
	tagPeerProof = 0x5307
	// tagLogStart, on a follower's fetch request partition: where the
	// follower's log starts, u64. The leader answers DeleteRecords only
	// once every ISR member's log starts at or past the deletion (Kafka's
	// low watermark), so no successor serves the deleted records again.
	tagLogStart = 0x5308

	flagProbe = 1
)

func encodeSeals(seals []replica.Seal) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(seals)))
	for _, s := range seals {
		b = binary.BigEndian.AppendUint64(b, s.Start)
		b = binary.BigEndian.AppendUint64(b, s.Last)
		b = binary.BigEndian.AppendUint32(b, s.CRC)
	}
	return b
}

// decodeSeals reads a follower's seal reports: bytes from the network.
func decodeSeals(b []byte) ([]replica.Seal, error) {
	if len(b) < 4 || uint64(len(b)-4) != 20*uint64(binary.BigEndian.Uint32(b)) {
		return nil, fmt.Errorf("sealed segments: %d bytes do not hold the count they give", len(b))
	}
	var out []replica.Seal
	for b = b[4:]; len(b) > 0; b = b[20:] {
		s := replica.Seal{Start: binary.BigEndian.Uint64(b), Last: binary.BigEndian.Uint64(b[8:]), CRC: binary.BigEndian.Uint32(b[16:])}
		if s.Last < s.Start {
			return nil, fmt.Errorf("sealed segment from offset %d to %d: its last offset is before its first", s.Start, s.Last)
		}
		out = append(out, s)
	}
	return out, nil
}

func encodeLogStart(start int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(start)) }

// followerLogStart reads a follower's log start from its fetch: bytes from
// the network. -1 when it does not say.
func followerLogStart(p kmsg.FetchRequestTopicPartition) (int64, error) {
	start, err := int64(-1), error(nil)
	p.UnknownTags.Each(func(k uint32, v []byte) {
		if k != tagLogStart {
			return
		}
		if len(v) != 8 {
			err = fmt.Errorf("log start: %d bytes, want 8", len(v))
			return
		}
		if s := int64(binary.BigEndian.Uint64(v)); s >= 0 {
			start = s
		} else {
			err = fmt.Errorf("log start %d: negative", s)
		}
	})
	if err != nil {
		return -1, err
	}
	return start, nil
}

// replicaFetchFlags reports whether p is a follower's fetch, and its flags.
func replicaFetchFlags(p kmsg.FetchRequestTopicPartition) (flags byte, ok bool) {
	p.UnknownTags.Each(func(k uint32, v []byte) {
		if k == tagReplicaFetch && len(v) == 1 {
			flags, ok = v[0], true
		}
	})
	return flags, ok
}

// decodeReplicaFetch reads a leader's answer to a follower: untrusted
// bytes from the network, checked before anything is appended.
func decodeReplicaFetch(version int16, p kmsg.FetchResponseTopicPartition) (replica.ReplicaRead, error) {
	rd := replica.ReplicaRead{HighWatermark: p.HighWatermark, LogStart: p.LogStartOffset, LogEnd: -1}
	var native bool
	var err error
	p.UnknownTags.Each(func(k uint32, v []byte) {
		switch k {
		case tagReplicaFetch:
			native = true
		case tagLogEnd:
			if len(v) != 8 {
				err = fmt.Errorf("log end: %d bytes, want 8", len(v))
				return
			}
			rd.LogEnd = int64(binary.BigEndian.Uint64(v))
		case tagRolls:
			if len(v) < 4 || uint64(len(v)-4) != 8*uint64(binary.BigEndian.Uint32(v)) {
				err = fmt.Errorf("segment starts: %d bytes do not hold the count they give", len(v))
				return
			}
			for v = v[4:]; len(v) > 0; v = v[8:] {
				rd.Rolls = append(rd.Rolls, int64(binary.BigEndian.Uint64(v)))
			}
		case tagEpochs:
			h, herr := replica.DecodeEpochHistory(v)
			if herr != nil {
				err = herr
				return
			}
			rd.Epochs = h.Entries()
		}
	})
	if err != nil {
		return rd, fmt.Errorf("a leader's answer to a follower: %w", err)
	}
	switch p.ErrorCode {
	case errNone:
	case kerr.FencedLeaderEpoch.Code, kerr.UnknownLeaderEpoch.Code:
		return rd, replica.ErrFenced
	case kerr.NotLeaderForPartition.Code, kerr.UnknownTopicOrPartition.Code:
		return rd, replica.ErrNotLeader
	case kerr.OffsetOutOfRange.Code:
		return rd, fmt.Errorf("%w (the leader's log ends at %d)", replica.ErrDiverged, rd.LogEnd)
	default:
		return rd, fmt.Errorf("the leader answered a follower's fetch with %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if !native {
		return rd, fmt.Errorf("the leader answered with Kafka record batches (fetch version %d): it does not speak strata's replica fetch", version)
	}
	for b := p.RecordBatches; len(b) > 0; {
		r, n, err := record.Decode(b)
		if err != nil {
			return rd, fmt.Errorf("a leader's records: %w", err)
		}
		rd.Records = append(rd.Records, r)
		b = b[n:]
	}
	return rd, nil
}

// markedCopyRead says whether p carries tagCopyRead, asked or answered.
func markedCopyRead(tags kmsg.Tags) bool {
	marked := false
	tags.Each(func(k uint32, _ []byte) { marked = marked || k == tagCopyRead })
	return marked
}

// decodeCopyRead reads a copy read's answer: untrusted bytes from the
// network, strata's records as stored.
func decodeCopyRead(bs []byte) ([]record.Record, error) {
	var out []record.Record
	for len(bs) > 0 {
		r, n, err := record.Decode(bs)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		bs = bs[n:]
	}
	return out, nil
}

const errNone int16 = 0
