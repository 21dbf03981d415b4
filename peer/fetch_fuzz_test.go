package peer

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/replica"
)

// A leader's answer to a follower, a copy read's answer and a follower's
// seal reports are bytes from the network: whatever they hold, decoding
// refuses them or returns what they encode, and a follower (or a node
// rebuilding a sealed segment) never takes records that were not whole and
// intact.
func FuzzDecodeReplicaFetch(f *testing.F) {
	var recs []byte
	for i, v := range []string{"a", "bb", ""} {
		recs, _ = record.Append(recs, &record.Record{Offset: uint64(10 + i), Timestamp: 5, Value: []byte(v), Tags: []string{"t"}})
	}
	var h replica.EpochHistory
	h.Append(0, 0)
	h.Append(3, 11)
	rolls := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(nil, 1), 11)
	end := binary.BigEndian.AppendUint64(nil, 13)
	seals := encodeSeals([]replica.Seal{{Start: 0, Last: 9, CRC: 7}, {Start: 10, Last: 10, CRC: 8}})
	f.Add(recs, end, rolls, h.Encode(), seals)
	f.Add(recs[:20], end[:4], rolls[:6], h.Encode()[:9], seals[:10])
	f.Add([]byte{}, []byte{}, []byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, recs, end, rolls, epochs, seals []byte) {
		p := kmsg.NewFetchResponseTopicPartition()
		p.RecordBatches = recs
		p.UnknownTags.Set(tagReplicaFetch, nil)
		p.UnknownTags.Set(tagLogEnd, end)
		p.UnknownTags.Set(tagRolls, rolls)
		p.UnknownTags.Set(tagEpochs, epochs)
		rd, err := decodeReplicaFetch(13, p)
		if err == nil {
			var again []byte
			for i := range rd.Records {
				if again, err = record.Append(again, &rd.Records[i]); err != nil {
					t.Fatalf("a decoded record does not encode: %v", err)
				}
			}
			if !bytes.Equal(again, recs) {
				t.Fatalf("decoded records re-encode to %d bytes, not the %d received", len(again), len(recs))
			}
		}
		if got, err := decodeCopyRead(recs); err == nil {
			var again []byte
			for i := range got {
				if again, err = record.Append(again, &got[i]); err != nil {
					t.Fatalf("a copy read's decoded record does not encode: %v", err)
				}
			}
			if !bytes.Equal(again, recs) {
				t.Fatalf("a copy read's records re-encode to %d bytes, not the %d received", len(again), len(recs))
			}
		}
		if s, err := decodeSeals(seals); err == nil && !bytes.Equal(encodeSeals(s), seals) {
			t.Fatalf("seal reports %x decode to %v, which encode to %x", seals, s, encodeSeals(s))
		}
	})
}
