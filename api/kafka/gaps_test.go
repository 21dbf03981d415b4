package kafka

import (
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/leaderepoch"
	"strata/engine/record"
)

// A compacted log's reads have gaps: each record keeps its offset in the
// batches a fetch frames (its offset delta is its own), a batch still ends
// at an epoch's start, and offsets more than an int32 apart go in separate
// batches.
func TestFramedBatchesKeepTheOffsetsOfALogWithGaps(t *testing.T) {
	offsets := []uint64{3, 4, 9, 10, 57, 58, 100, 100 + math.MaxInt32 + 5}
	var recs []record.Record
	for _, off := range offsets {
		recs = append(recs, record.Record{Offset: off, Timestamp: int64(off), Key: []byte("k"), Value: []byte("v")})
	}
	h := leaderepoch.History{{Epoch: 1, Start: 0}, {Epoch: 2, Start: 50}}
	raw := encodeBatches(nil, recs, h)
	var got []uint64
	var epochs []int32
	for len(raw) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			t.Fatal(err)
		}
		raw = raw[12+int(b.Length):]
		epochs = append(epochs, b.PartitionLeaderEpoch)
		src := b.Records
		var last int32
		for i := 0; i < int(b.NumRecords); i++ {
			var rec kmsg.Record // its length first
			if err := rec.ReadFrom(src); err != nil {
				t.Fatal(err)
			}
			src = src[kbin.VarintLen(rec.Length)+int(rec.Length):]
			last = rec.OffsetDelta
			got = append(got, uint64(b.FirstOffset)+uint64(rec.OffsetDelta))
		}
		if last != b.LastOffsetDelta {
			t.Fatalf("batch at %d: last offset delta %d, its last record's %d", b.FirstOffset, b.LastOffsetDelta, last)
		}
	}
	if len(got) != len(offsets) {
		t.Fatalf("offsets %v, want %v", got, offsets)
	}
	for i := range got {
		if got[i] != offsets[i] {
			t.Fatalf("offsets %v, want %v", got, offsets)
		}
	}
	if want := []int32{1, 2, 2}; len(epochs) != len(want) || epochs[0] != 1 || epochs[1] != 2 || epochs[2] != 2 {
		t.Fatalf("batches of epochs %v, want %v", epochs, want)
	}
}
