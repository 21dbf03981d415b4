package peer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A request naming a replica id (a Fetch or ListOffsets) is answered as
// that node's: a follower's fetch position raises the high watermark, a
// copy read or a split log's read is answered whoever leads. Kafka lets
// only a principal with CLUSTER_ACTION send them; strata asks each one for
// proof that a node of the cluster sent it: an HMAC-SHA256 keyed by the
// cluster's peer secret (created once in etcd, which only the nodes reach:
// cluster.PeerSecret), over the API key, the sending and receiving node
// ids, a time and a random nonce, in a request-level tagged field
// (tagPeerProof). The receiver takes a proof within proofSkew of its own
// clock, and each proof once: a copied one is refused, and one made for
// another node does not verify here. docs/replication.md, "Who is a peer".
const (
	proofLen   = 8 + 16 + sha256.Size
	proofSkew  = 30 * time.Second
	proofLabel = "strata peer request v1"
)

func proofMAC(secret []byte, key int16, from, to int32, at int64, nonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	b := append([]byte(proofLabel), 0)
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint32(b, uint32(from))
	b = binary.BigEndian.AppendUint32(b, uint32(to))
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	m.Write(append(b, nonce...))
	return m.Sum(nil)
}

// Prove marks req, a Fetch or ListOffsets that node from sends to node to
// as a replica, with the proof the receiver asks for. The proof is a
// tagged field: only flexible versions (Fetch 12, ListOffsets 6 and up)
// carry it, and strata's peers speak those.
func Prove(req kmsg.Request, secret []byte, from, to int32, now time.Time) {
	at := now.UnixNano()
	nonce := make([]byte, 16)
	rand.Read(nonce)
	v := binary.BigEndian.AppendUint64(nil, uint64(at))
	v = append(v, nonce...)
	v = append(v, proofMAC(secret, req.Key(), from, to, at, nonce)...)
	switch r := req.(type) {
	case *kmsg.FetchRequest:
		r.UnknownTags.Set(tagPeerProof, v)
	case *kmsg.ListOffsetsRequest:
		r.UnknownTags.Set(tagPeerProof, v)
	}
}

// decodeProof splits a proof's bytes (from the network).
func decodeProof(v []byte) (at int64, nonce, mac []byte, err error) {
	if len(v) != proofLen {
		return 0, nil, nil, errors.New("a peer proof of the wrong length")
	}
	return int64(binary.BigEndian.Uint64(v)), v[8:24], v[24:], nil
}

// Proofs checks the proofs a node receives and remembers the ones it took
// while they could still pass the clock check, in two generations of
// 2×proofSkew each: a proof is taken at most that long after its first
// arrival, so one seen is held until it would fail the clock check. Only
// proofs that verified are held, so a stranger cannot grow the sets. The
// zero Proofs is ready to use.
type Proofs struct {
	mu        sync.Mutex
	cur, prev map[[sha256.Size]byte]bool
	rotated   time.Time
}

// Check says whether tags hold a fresh proof, made with secret, that node
// from sent this API key's request to node self; why says why not.
func (pp *Proofs) Check(secret []byte, tags kmsg.Tags, key int16, from, self int32, now time.Time) (ok bool, why string) {
	if len(secret) == 0 {
		return false, "this node has no peer secret"
	}
	var raw []byte
	var found bool
	tags.Each(func(k uint32, v []byte) {
		if k == tagPeerProof {
			raw, found = v, true
		}
	})
	if !found {
		return false, "no peer proof"
	}
	at, nonce, mac, err := decodeProof(raw)
	if err != nil {
		return false, err.Error()
	}
	if !hmac.Equal(mac, proofMAC(secret, key, from, self, at, nonce)) {
		return false, "the peer proof does not verify"
	}
	if d := now.Sub(time.Unix(0, at)); d > proofSkew || d < -proofSkew {
		return false, "the peer proof's time is " + d.Round(time.Second).String() + " off this node's clock"
	}
	var k [sha256.Size]byte
	copy(k[:], mac)
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.cur == nil || now.Sub(pp.rotated) >= 2*proofSkew {
		pp.prev, pp.cur, pp.rotated = pp.cur, map[[sha256.Size]byte]bool{}, now
	}
	if pp.cur[k] || pp.prev[k] {
		return false, "a peer proof seen before (a replayed request)"
	}
	pp.cur[k] = true
	return true, ""
}
