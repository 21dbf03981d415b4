package cluster

import (
	"context"
	"testing"
	"time"
)

// One node at a time commits a topic's table: a second node's LockTable
// waits while the first holds it, and gets it once the first releases it or
// its lease goes (here its Close; a SIGKILLed node's lease expires, which
// cluster/e2e's TestTableCommitterKilled shows). Another topic's table is
// not held up.
func TestOneNodeCommitsATableAtATime(t *testing.T) {
	h := newHarness(t)
	a, b := h.join(1), h.join(2)
	ctx := context.Background()
	releaseA, err := a.LockTable(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	// lock takes m's lock of the table in the background: its release
	// comes once held, nil after an error.
	lock := func(m *Member) chan func() {
		got := make(chan func(), 1)
		go func() {
			release, err := m.LockTable(ctx, "orders")
			if err != nil {
				t.Error(err)
			}
			got <- release
		}()
		return got
	}
	got := lock(b)
	select {
	case <-got:
		t.Fatal("node 2 took the table's lock while node 1 held it")
	case <-time.After(500 * time.Millisecond):
	}
	other, err := b.LockTable(ctx, "clicks")
	if err != nil {
		t.Fatalf("another topic's table: %v", err)
	}
	other()
	releaseA()
	var releaseB func()
	select {
	case releaseB = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("node 2 did not take the lock node 1 released")
	}
	if releaseB == nil {
		return
	}
	// Node 2 holds it and goes: node 1 takes it once node 2's lease does.
	got = lock(a)
	b.Close()
	select {
	case release := <-got:
		if release != nil {
			release()
		}
	case <-time.After(2*ttl + 10*time.Second):
		t.Fatal("node 1 did not take the lock of node 2, gone")
	}
}
