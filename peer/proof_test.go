package peer

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// tagsOf is req's request-level tagged fields after a round trip through
// the wire at a flexible version, as the receiving node decodes them.
func tagsOf(t *testing.T, req *kmsg.FetchRequest) kmsg.Tags {
	t.Helper()
	req.SetVersion(12)
	got := kmsg.NewPtrFetchRequest()
	got.SetVersion(12)
	if err := got.ReadFrom(req.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	return got.UnknownTags
}

// A peer proof passes on the node it was made for, once, within the clock
// window; made with another secret, for another node or API, by another
// sender, too old or seen before, it does not.
func TestPeerProof(t *testing.T) {
	secret, now := bytes.Repeat([]byte{7}, 32), time.Unix(1_800_000_000, 0)
	made := func(from, to int32, at time.Time) kmsg.Tags {
		req := kmsg.NewPtrFetchRequest()
		Prove(req, secret, from, to, at)
		return tagsOf(t, req)
	}
	var pp Proofs
	fetch := kmsg.NewPtrFetchRequest().Key()
	tags := made(2, 1, now)
	for _, c := range []struct {
		name   string
		secret []byte
		tags   kmsg.Tags
		key    int16
		from   int32
		now    time.Time
		ok     bool
	}{
		{"another secret", bytes.Repeat([]byte{8}, 32), tags, fetch, 2, now, false},
		{"no secret here", nil, tags, fetch, 2, now, false},
		{"no proof", secret, kmsg.Tags{}, fetch, 2, now, false},
		{"another sender's id", secret, tags, fetch, 3, now, false},
		{"another API", secret, tags, kmsg.NewPtrListOffsetsRequest().Key(), 2, now, false},
		{"made for node 1", secret, tags, fetch, 2, now.Add(proofSkew), true},
		{"replayed", secret, tags, fetch, 2, now, false},
		{"replayed a window later", secret, tags, fetch, 2, now.Add(2*proofSkew + time.Second), false},
		{"made for node 3", secret, made(2, 3, now), fetch, 2, now, false},
		{"too old", secret, made(2, 1, now.Add(-proofSkew-time.Second)), fetch, 2, now, false},
		{"from the future", secret, made(2, 1, now.Add(proofSkew+time.Second)), fetch, 2, now, false},
		{"a fresh one", secret, made(2, 1, now), fetch, 2, now, true},
	} {
		if ok, why := pp.Check(c.secret, c.tags, c.key, c.from, 1, c.now); ok != c.ok {
			t.Errorf("%s: accepted %v (%s), want %v", c.name, ok, why, c.ok)
		}
	}
}

// A peer proof is bytes from the network: whatever they hold, checking
// them does not panic, and none but the one made with the secret passes.
func FuzzPeerProof(f *testing.F) {
	secret, now := bytes.Repeat([]byte{7}, 32), time.Unix(1_800_000_000, 0)
	req := kmsg.NewPtrFetchRequest()
	// Prove's nonce is random, and each fuzz worker runs this anew:
	// the one good proof is made with a fixed nonce instead.
	nonce := bytes.Repeat([]byte{9}, 16)
	good := binary.BigEndian.AppendUint64(nil, uint64(now.UnixNano()))
	good = append(append(good, nonce...), proofMAC(secret, req.Key(), 2, 1, now.UnixNano(), nonce)...)
	f.Add(bytes.Clone(good))
	f.Add(good[:30])
	f.Add(append(bytes.Clone(good), 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		var tags kmsg.Tags
		tags.Set(tagPeerProof, v)
		var pp Proofs
		ok, _ := pp.Check(secret, tags, req.Key(), 2, 1, now)
		if ok && !bytes.Equal(v, good) {
			t.Fatalf("a proof not made with the secret passed: %x", v)
		}
	})
}
