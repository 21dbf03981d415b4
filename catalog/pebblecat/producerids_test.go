package pebblecat

import (
	"context"
	"testing"
)

// A single node's producer id blocks never overlap, also across a reopen
// of its catalog (a restart): the counter past each block is synced first.
func TestProducerIDBlocksSurviveAReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	var blocks [][2]int64 // first, count
	for _, counts := range [][]int64{{1000, 1000}, {1, 1000}, {5}} {
		c, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range counts {
			first, err := c.ReserveProducerIDs(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range blocks {
				if first < b[0]+b[1] && b[0] < first+n {
					t.Fatalf("block %d+%d overlaps block %d+%d taken before", first, n, b[0], b[1])
				}
			}
			blocks = append(blocks, [2]int64{first, n})
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := func() (int64, error) {
		c, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ReserveProducerIDs(ctx, 0)
	}(); err == nil {
		t.Fatal("a block of 0 ids was reserved")
	}
}
