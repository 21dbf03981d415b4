package objstore

import (
	"errors"
	"sync"
	"testing"
)

type fakeHandle struct {
	name    string
	version int
	closed  bool
	inUse   bool
}

type opener struct {
	mu       sync.Mutex
	versions map[string]int
	opened   []*fakeHandle
}

func (o *opener) open(name string) (*fakeHandle, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := &fakeHandle{name: name, version: o.versions[name]}
	o.opened = append(o.opened, h)
	return h, nil
}

func TestHandlesReuseAndInvalidate(t *testing.T) {
	o := &opener{versions: map[string]int{}}
	c := NewHandles(2, false, o.open, func(h *fakeHandle) { h.closed = true })
	read := func(name string) *fakeHandle {
		var got *fakeHandle
		c.Use(name, func(h *fakeHandle) error { got = h; return nil })
		return got
	}
	a1 := read("a")
	if a2 := read("a"); a2 != a1 {
		t.Fatal("a second read of the same object opened it again")
	}
	o.versions["a"] = 1
	c.Invalidate("a")
	if !a1.closed {
		t.Fatal("an invalidated idle handle was not closed")
	}
	if a3 := read("a"); a3.version != 1 {
		t.Fatalf("after Invalidate a read used version %d, want 1", a3.version)
	}
	read("b")
	read("c") // over the budget of 2: something idle is closed
	open := 0
	for _, h := range o.opened {
		if !h.closed {
			open++
		}
	}
	if open > 2 {
		t.Fatalf("%d handles open, budget 2", open)
	}
	failed := read("d")
	c.Use("d", func(h *fakeHandle) error { failed = h; return errors.New("broken") })
	if !failed.closed || read("d") == failed {
		t.Fatal("a handle whose read failed was reused")
	}
}

func TestExclusiveHandlesServeOneReadAtATime(t *testing.T) {
	o := &opener{versions: map[string]int{}}
	c := NewHandles(8, true, o.open, func(h *fakeHandle) { h.closed = true })
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				c.Use("x", func(h *fakeHandle) error {
					mu.Lock()
					if h.inUse {
						t.Error("two reads share an exclusive handle")
					}
					h.inUse = true
					mu.Unlock()
					mu.Lock()
					h.inUse = false
					mu.Unlock()
					return nil
				})
			}
		}()
	}
	wg.Wait()
	if len(o.opened) > 8 {
		t.Fatalf("opened %d handles for 8 concurrent readers", len(o.opened))
	}
}
