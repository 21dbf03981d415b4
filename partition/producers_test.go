package partition

import (
	"math"
	"testing"
)

// What the leader does with a producer's batch, given what it knows.
func TestSequenceCheck(t *testing.T) {
	known := &producerState{epoch: 2, lastSeq: 19, recent: []seqRange{{0, 9, 100}, {10, 19, 150}}}
	open := &producerState{epoch: 2, lastSeq: 14, recent: []seqRange{{0, 9, 100}, {10, 14, 150}}, open: true}
	wrapped := &producerState{lastSeq: 1, recent: []seqRange{{math.MaxInt32 - 4, math.MaxInt32 - 2, 497}, {math.MaxInt32 - 1, 1, 500}}}
	for _, tc := range []struct {
		name        string
		st          *producerState
		epoch       int16
		first, last int32
		want        verdict
		wantBase    int64
	}{
		{"a producer never seen", nil, 0, 0, 4, appendBatch, -1},
		{"a producer never seen, mid-stream", nil, 3, 40, 44, appendBatch, -1},
		{"the next batch", known, 2, 20, 29, appendBatch, -1},
		{"a retry of the last batch", known, 2, 10, 19, duplicateBatch, 150},
		{"a retry of an earlier batch", known, 2, 0, 9, duplicateBatch, 100},
		{"a retry of part of a run", known, 2, 3, 5, duplicateBatch, 103},
		{"a duplicate older than the recent batches", &producerState{epoch: 2, lastSeq: 19, recent: []seqRange{{10, 19, 150}}}, 2, 0, 9, unknownDuplicate, -1},
		{"a gap", known, 2, 25, 29, outOfOrder, -1},
		{"overlapping what is stored", known, 2, 15, 25, outOfOrder, -1},
		{"a new epoch from zero", known, 3, 0, 4, appendBatch, -1},
		{"a new epoch not from zero", known, 3, 20, 24, outOfOrder, -1},
		{"a fenced epoch", known, 1, 20, 24, fencedEpoch, -1},
		// Sequences wrap from math.MaxInt32 to 0, as Kafka's do.
		{"a batch that wraps", &producerState{lastSeq: math.MaxInt32 - 2}, 0, math.MaxInt32 - 1, 1, appendBatch, -1},
		{"the batch after the wrap", wrapped, 0, 2, 6, appendBatch, -1},
		{"a retry of the batch that wrapped", wrapped, 0, math.MaxInt32 - 1, 1, duplicateBatch, 500},
		{"a retry of its part past the wrap", wrapped, 0, 0, 1, duplicateBatch, 502},
		{"a gap after the wrap", wrapped, 0, 5, 6, outOfOrder, -1},
		// The log ends inside the last batch (its first part, sequences
		// 10-14, is stored): a retry of that batch stores the rest.
		{"a retry of a batch cut short", open, 2, 10, 19, completeBatch, 150},
		{"a retry of the batch before it", open, 2, 0, 9, duplicateBatch, 100},
		{"a batch starting inside the cut one but before its start", open, 2, 5, 19, outOfOrder, -1},
		{"the next batch after a cut one", open, 2, 15, 19, appendBatch, -1},
		{"a retry of a batch cut short, at a new epoch", open, 3, 10, 19, outOfOrder, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, base := check(tc.st, tc.epoch, tc.first, tc.last)
			if v != tc.want || base != tc.wantBase {
				t.Fatalf("check = %d, base %d; want %d, base %d", v, base, tc.want, tc.wantBase)
			}
		})
	}
}
