package objstore

import (
	"errors"
	"io"
	"sync"
)

// Handles caches open read handles per object name, so ranged reads skip
// the open (a syscall locally, a NameNode round trip on HDFS). The owner
// calls Invalidate before it replaces or deletes an object, so no later read
// sees the old one. A shared handle (os.File) serves many reads at once; an
// exclusive one (an HDFS reader, which seeks) one read at a time.
type Handles[H any] struct {
	open      func(name string) (H, error)
	close     func(H)
	exclusive bool
	max       int

	mu   sync.Mutex
	live map[string][]*handle[H]
	gen  uint64 // bumped by every Invalidate
	n    int
}

type handle[H any] struct {
	h     H
	refs  int
	stale bool // no longer cached: close when the last read ends
}

// NewHandles keeps at most max idle-or-busy handles cached.
func NewHandles[H any](max int, exclusive bool, open func(string) (H, error), close func(H)) *Handles[H] {
	return &Handles[H]{open: open, close: close, exclusive: exclusive, max: max,
		live: map[string][]*handle[H]{}}
}

// Use runs fn with a handle for name. A handle whose fn failed is not
// reused: it may be broken.
func (c *Handles[H]) Use(name string, fn func(H) error) error {
	hd, err := c.acquire(name)
	if err != nil {
		return err
	}
	err = fn(hd.h)
	c.mu.Lock()
	hd.refs--
	if err != nil && !hd.stale {
		c.forgetLocked(name, hd)
	}
	closeNow := hd.stale && hd.refs == 0
	c.mu.Unlock()
	if closeNow {
		c.close(hd.h)
	}
	return err
}

func (c *Handles[H]) acquire(name string) (*handle[H], error) {
	c.mu.Lock()
	for _, hd := range c.live[name] {
		if !c.exclusive || hd.refs == 0 {
			hd.refs++
			c.mu.Unlock()
			return hd, nil
		}
	}
	gen := c.gen
	c.mu.Unlock()

	h, err := c.open(name)
	if err != nil {
		return nil, err
	}
	hd := &handle[H]{h: h, refs: 1}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen { // maybe replaced while we opened: use once, do not cache
		hd.stale = true
		return hd, nil
	}
	c.live[name] = append(c.live[name], hd)
	c.n++
	c.evictLocked()
	return hd, nil
}

// evictLocked drops idle handles while over budget.
func (c *Handles[H]) evictLocked() {
	for name, list := range c.live {
		if c.n <= c.max {
			return
		}
		for _, hd := range list {
			if hd.refs == 0 {
				c.forgetLocked(name, hd)
				break
			}
		}
	}
}

func (c *Handles[H]) forgetLocked(name string, hd *handle[H]) {
	list := c.live[name]
	for i, x := range list {
		if x == hd {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.live, name)
	} else {
		c.live[name] = list
	}
	c.n--
	hd.stale = true
	if hd.refs == 0 {
		c.close(hd.h)
	}
}

// ReadAt runs one ranged read with a handle for name. io.EOF from read is
// an answer, not a broken handle, so it does not drop the handle; it is
// returned as the read's error all the same.
func (c *Handles[H]) ReadAt(name string, read func(H) (int, error)) (int, error) {
	var n int
	var eof error
	err := c.Use(name, func(h H) error {
		var err error
		n, err = read(h)
		if errors.Is(err, io.EOF) {
			eof, err = err, nil
		}
		return err
	})
	if err != nil {
		return n, err
	}
	return n, eof
}

// errReplaced drops a handle opened on an object a peer has since
// replaced or deleted (ReadCurrent).
var errReplaced = errors.New("the object was replaced since its handle was opened")

// ReadCurrent reads as ReadAt does, but only through a handle still on the
// object name points at now: current says whether h is. Nodes share a
// bucket, and a peer may replace or delete and write again an object this
// process holds a handle on (a deleted topic's object, then its re-created
// incarnation's at the same key); only the writer's own Invalidate runs,
// and the handle would go on reading the old bytes. A stale handle is
// dropped and the read retried on a fresh one; a peer replacing the object
// again between the check and the read is a race the retries bound.
func (c *Handles[H]) ReadCurrent(name string, current func(H) (bool, error), read func(H) (int, error)) (int, error) {
	for try := 0; ; try++ {
		n, err := c.ReadAt(name, func(h H) (int, error) {
			ok, err := current(h)
			switch {
			case err != nil:
				return 0, err
			case !ok:
				return 0, errReplaced
			}
			return read(h)
		})
		if !errors.Is(err, errReplaced) || try == 2 {
			return n, err
		}
	}
}

// Invalidate drops every handle of name.
func (c *Handles[H]) Invalidate(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, hd := range append([]*handle[H](nil), c.live[name]...) {
		c.forgetLocked(name, hd)
	}
}

// Close drops every handle.
func (c *Handles[H]) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, list := range c.live {
		for _, hd := range append([]*handle[H](nil), list...) {
			c.forgetLocked(name, hd)
		}
	}
}
