package cluster

import (
	"context"
	"slices"
	"testing"
)

// Seals lists the records of the segments that start in [from, to], by
// start: what a replica compares its local sealed segments against.
func TestSealsListsARange(t *testing.T) {
	h := newHarness(t)
	ms := threeNodes(t, h, "listed", 2)
	for p := int32(0); p < 2; p++ {
		part, _, _ := ms[1].PartitionRev("listed", p)
		for _, start := range []uint64{0, 100, 200, 1000} {
			s := SealRecord{Start: start, Last: start + 99, CRC: uint32(p), Replicas: []int32{part.Leader}}
			if err := ms[part.Leader].RecordSeal(context.Background(), "listed", p, part.Epoch, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		from, to uint64
		want     []uint64
	}{
		{0, 1000, []uint64{0, 100, 200, 1000}},
		{100, 200, []uint64{100, 200}},
		{101, 999, []uint64{200}},
		{1001, 5000, nil},
	} {
		recs, err := ms[2].Seals(context.Background(), "listed", 0, tc.from, tc.to)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, r := range recs {
			if r.CRC != 0 {
				t.Fatalf("Seals of partition 0 from %d to %d: a record of partition 1: %+v", tc.from, tc.to, r)
			}
			got = append(got, r.Start)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Seals from %d to %d: starts %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

// SealBelow is the record that starts last below an offset, in that
// partition only: the whole segment a copy refilled from inside it holds
// the tail of.
func TestSealBelow(t *testing.T) {
	h := newHarness(t)
	ms := threeNodes(t, h, "below", 2)
	for p := int32(0); p < 2; p++ {
		part, _, _ := ms[1].PartitionRev("below", p)
		for _, start := range []uint64{100, 200, 1000} {
			s := SealRecord{Start: start, Last: start + 99, CRC: uint32(p), Replicas: []int32{part.Leader}}
			if err := ms[part.Leader].RecordSeal(context.Background(), "below", p, part.Epoch, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		start uint64
		want  uint64
		found bool
	}{
		{0, 0, false},
		{100, 0, false},
		{150, 100, true},
		{200, 100, true},
		{999, 200, true},
		{5000, 1000, true},
	} {
		r, ok, err := ms[2].SealBelow(context.Background(), "below", 1, tc.start)
		if err != nil {
			t.Fatal(err)
		}
		if ok != tc.found || ok && (r.Start != tc.want || r.CRC != 1) {
			t.Errorf("SealBelow(%d): %+v found %v, want start %d found %v in partition 1", tc.start, r, ok, tc.want, tc.found)
		}
	}
}
