package cluster

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// A node whose copy of a sealed segment did not agree (left out of the
// seal record's replicas) claims it only once the replica grace is over,
// and only while a replica whose copy did agree is live to read from;
// TierSource then names that replica and the sealed checksum. A replica
// in the record reads its own copy.
func TestTierSourceForANodeLeftOutOfTheSeal(t *testing.T) {
	h := newHarness(t)
	ms := threeNodes(t, h, "ts", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, ok := ms[1].Placement("ts", 0)
	if !ok {
		t.Fatal("ts-0 not placed")
	}
	var others []int32
	for _, r := range rec.Replicas {
		if r != rec.Leader {
			others = append(others, r)
		}
	}
	verified, outsider := []int32{rec.Leader, others[0]}, others[1]
	const crc = 0x5eed
	if err := ms[rec.Leader].RecordSeal(ctx, "ts", 0, rec.Epoch, SealRecord{Start: 100, Last: 199, CRC: crc, Replicas: verified}); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		m.cfg.ReplicaGrace = time.Hour
	}
	out := ms[outsider]
	if _, ok, err := out.Claim(ctx, "ts-0", 100, 199); ok || err != nil {
		t.Fatalf("within the grace, node %d (left out of the seal) claimed: ok %v, %v", outsider, ok, err)
	}
	src, err := out.TierSource(ctx, "ts-0", 100, 199)
	if err != nil || !src.Remote || !slices.Contains(verified, src.Node) || src.CRC != crc {
		t.Fatalf("node %d's tier source: %+v, %v; want a remote one of %v with crc %x", outsider, src, err, verified, crc)
	}
	for _, id := range verified {
		if src, err := ms[id].TierSource(ctx, "ts-0", 100, 199); err != nil || src.Remote || src.CRC != crc {
			t.Errorf("node %d (its copy agreed): tier source %+v, %v; want its own copy", id, src, err)
		}
	}
	if _, err := out.TierSource(ctx, "ts-0", 200, 299); err == nil {
		t.Error("a segment not sealed for the cluster has a tier source")
	}

	out.cfg.ReplicaGrace = 10 * time.Millisecond
	time.Sleep(20 * time.Millisecond)
	release, ok, err := out.Claim(ctx, "ts-0", 100, 199)
	if !ok || err != nil {
		t.Fatalf("past the grace, node %d did not claim: ok %v, %v", outsider, ok, err)
	}
	release()

	// With no verified replica live there is nothing to read from.
	for _, id := range verified {
		ms[id].Close()
	}
	eventually(t, out, 3*ttl+5*time.Second, "the verified replicas still live", func() bool { return len(out.Nodes()) == 1 })
	if _, ok, err := out.Claim(ctx, "ts-0", 100, 199); ok || err != nil {
		t.Errorf("with no verified replica live, node %d claimed: ok %v, %v", outsider, ok, err)
	}
	if _, err := out.TierSource(ctx, "ts-0", 100, 199); err == nil || !strings.Contains(err.Error(), "live") {
		t.Errorf("with no verified replica live: tier source error %v", err)
	}
}
