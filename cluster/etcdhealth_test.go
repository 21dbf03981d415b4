package cluster

import (
	"testing"
	"time"
)

// The compactor, fed etcd's revision at each check, compacts to the
// revision etcd had a retention ago, never the same revision twice, and
// keeps only the marks it still needs.
func TestCompactorKeepsRetentionOfHistory(t *testing.T) {
	c := &compactor{retention: time.Minute}
	t0 := time.Unix(1_700_000_000, 0)
	steps := []struct {
		after time.Duration
		rev   int64
		want  int64
	}{
		{0, 100, 0},                   // nothing is a minute old yet
		{30 * time.Second, 150, 0},    //
		{60 * time.Second, 200, 100},  // the revision of a minute ago
		{70 * time.Second, 210, 0},    // the next mark is not a minute old
		{95 * time.Second, 260, 150},  //
		{200 * time.Second, 260, 260}, // idle: everything older than a minute
		{300 * time.Second, 260, 0},   // compacted to 260 already
		{301 * time.Second, 261, 0},   //
		{361 * time.Second, 300, 261}, //
	}
	for _, s := range steps {
		got := c.observe(t0.Add(s.after), s.rev)
		if got != s.want {
			t.Fatalf("at +%s, revision %d: compact to %d; want %d", s.after, s.rev, got, s.want)
		}
		if got > 0 {
			c.compacted(got)
		}
	}
	if len(c.marks) > 2 {
		t.Fatalf("%d marks kept; want the ones younger than the retention only", len(c.marks))
	}
}
