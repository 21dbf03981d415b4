package peer

import (
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A follower's log start is bytes from the network: decoding refuses what
// is not 8 bytes of a non-negative offset, and returns what encodes it
// otherwise.
func FuzzDecodeFollowerLogStart(f *testing.F) {
	f.Add(encodeLogStart(0))
	f.Add(encodeLogStart(60))
	f.Add(encodeLogStart(1 << 62))
	f.Add([]byte{0xff, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		p := kmsg.NewFetchRequestTopicPartition()
		p.UnknownTags.Set(tagReplicaFetch, []byte{0})
		p.UnknownTags.Set(tagLogStart, v)
		start, err := followerLogStart(p)
		if err != nil {
			if start != -1 {
				t.Fatalf("%x refused (%v) with start %d, want -1", v, err, start)
			}
			return
		}
		if len(v) != 8 || start < 0 || binary.BigEndian.Uint64(v) != uint64(start) {
			t.Fatalf("%x taken as log start %d", v, start)
		}
	})
}

func TestFollowerLogStartAbsent(t *testing.T) {
	p := kmsg.NewFetchRequestTopicPartition()
	p.UnknownTags.Set(tagReplicaFetch, []byte{0})
	if start, err := followerLogStart(p); start != -1 || err != nil {
		t.Fatalf("a fetch without a log start: %d, %v; want -1, nil", start, err)
	}
}
