package catalog

import (
	"strings"
	"testing"
	"time"
)

// Every pair of states: only the documented lifecycle steps are allowed.
func TestCanTransition(t *testing.T) {
	allowed := map[[2]State]bool{
		{Active, Sealed}: true, {Sealed, Uploading}: true, {Sealed, Deleted}: true,
		{Uploading, Cold}: true, {Uploading, Sealed}: true, {Uploading, Uploading}: true,
		{Cold, Remote}: true, {Cold, Deleted}: true, {Remote, Deleted}: true,
		{Cold, Cold}: true, {Remote, Remote}: true, // a retype's new object
	}
	states := []State{Active, Sealed, Uploading, Cold, Remote, Deleted}
	for _, from := range states {
		for _, to := range states {
			if got := CanTransition(from, to); got != allowed[[2]State{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %t", from, to, got)
			}
		}
	}
}

// Merged sums what the segments hold and keeps the first one's place.
func TestMerged(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 12, 4, 0, 0, s, 0, time.UTC) }
	a := Segment{Shard: "m-0", No: 2, State: Remote, StartOffset: 100, EndOffset: 199, Records: 100, Size: 1000,
		MinTimestamp: 50, MaxTimestamp: 60, Created: at(1), SealedAt: at(2), ObjectKey: "a", ObjectSize: 10, Checksum: 1}
	b := Segment{Shard: "m-0", No: 5, State: Remote, StartOffset: 200, EndOffset: 249, Records: 40, Size: 300,
		MinTimestamp: 40, MaxTimestamp: 70, Created: at(3), SealedAt: at(4), ObjectKey: "b", ObjectSize: 20, Checksum: 2}
	m, err := Merged([]Segment{a, b})
	want := Segment{Shard: "m-0", No: 2, State: Remote, StartOffset: 100, EndOffset: 249, Records: 140, Size: 1300,
		MinTimestamp: 40, MaxTimestamp: 70, Created: at(1), SealedAt: at(4)}
	if err != nil || m != want {
		t.Errorf("Merged = %+v, %v; want %+v", m, err, want)
	}
	b.StartOffset = 201
	if _, err := Merged([]Segment{a, b}); err == nil || !strings.Contains(err.Error(), "do not follow each other") {
		t.Errorf("a gap merged: %v", err)
	}
}
