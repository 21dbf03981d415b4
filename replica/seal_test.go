package replica

import (
	"slices"
	"testing"
)

func TestDecideSeal(t *testing.T) {
	own := Seal{Start: 100, Last: 200, CRC: 0xabc}
	other := Seal{Start: 100, Last: 200, CRC: 0xdef}
	short := Seal{Start: 100, Last: 150, CRC: 0xabc}
	for _, tc := range []struct {
		name     string
		isr      []int32
		reports  map[int32]Seal
		wait     bool
		replicas []int32
		differ   []int32
	}{
		{"the leader alone", []int32{1}, nil, false, []int32{1}, nil},
		{"an ISR member has not reported", []int32{1, 2, 3}, map[int32]Seal{2: own}, true, nil, nil},
		{"every ISR member agrees", []int32{1, 2, 3}, map[int32]Seal{2: own, 3: own}, false, []int32{1, 2, 3}, nil},
		{"a copy with other bytes is left out", []int32{1, 2, 3}, map[int32]Seal{2: own, 3: other}, false, []int32{1, 2}, []int32{3}},
		{"a copy that ends elsewhere is left out", []int32{1, 2, 3}, map[int32]Seal{2: short, 3: own}, false, []int32{1, 3}, []int32{2}},
		{"a replica out of the ISR does not hold it back", []int32{1, 2}, map[int32]Seal{2: own}, false, []int32{1, 2}, nil},
		{"a replica out of the ISR that caught up counts", []int32{1, 2}, map[int32]Seal{2: own, 3: own}, false, []int32{1, 2, 3}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := DecideSeal(1, own, tc.isr, tc.reports, nil)
			if v.Wait != tc.wait || !slices.Equal(v.Replicas, tc.replicas) || !slices.Equal(v.Differ, tc.differ) {
				t.Fatalf("DecideSeal = %+v, want wait %v, replicas %v, differ %v", v, tc.wait, tc.replicas, tc.differ)
			}
		})
	}
}
