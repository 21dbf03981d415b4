package kafka

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/peer"
)

// A fetch answer framed in parts (its large record batches written from
// their own buffers) is byte for byte the frame kmsg makes whole, in every
// version, flexible or not, and its parts hold the batches themselves.
func TestFetchFrameInParts(t *testing.T) {
	big := func(n int, fill byte) []byte { return bytes.Repeat([]byte{fill}, n) }
	for v := int16(4); v <= (&kmsg.FetchResponse{}).MaxVersion(); v++ {
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(v)
		for ti, sizes := range [][]int{{minSpliced, 10, 0}, {512 << 10, minSpliced - 1, 200 << 10, 100 << 10}} {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic = string(spliceMarker(0))[:8] + "-topic" // looks like a marker's start
			if ti == 1 {
				rt.Topic = "t"
			}
			for pi, n := range sizes {
				rp := peer.NoRecords(int32(pi))
				rp.HighWatermark = int64(n)
				rp.RecordBatches = big(n, byte(ti*10+pi+1))
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		flexHeader := resp.IsFlexible()
		head := make([]byte, 8)
		binary.BigEndian.PutUint32(head[4:], 77)
		want := frameWhole(head, flexHeader, resp)
		parts := frameResponse(77, resp, flexHeader)
		if got := bytes.Join(parts, nil); !bytes.Equal(got, want) {
			t.Fatalf("v%d: framed in %d parts, %d bytes, differs from the whole frame (%d bytes)", v, len(parts), len(got), len(want))
		}
		if want := 2*4 + 1; len(parts) != want { // 4 large batches, each cut out
			t.Fatalf("v%d: %d parts, want %d", v, len(parts), want)
		}
		if &parts[1][0] != &resp.Topics[0].Partitions[0].RecordBatches[0] {
			t.Fatalf("v%d: the first large batch was copied, not written from its buffer", v)
		}
		var back kmsg.FetchResponse
		back.SetVersion(v)
		if err := back.ReadFrom(want[8+btoi(flexHeader):]); err != nil || len(back.Topics[1].Partitions[0].RecordBatches) != 512<<10 {
			t.Fatalf("v%d: the frame does not read back: %v", v, err)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
