package cluster

import (
	"net"
	"sync"
	"testing"
)

// pauser forwards TCP connections to etcd and can hold every byte in
// flight, both ways, as a network partition (or a paused process) would:
// connections stay open, nothing passes until resume.
type pauser struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
}

func newPauser(t *testing.T, target string) *pauser {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pauser{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	var conns []net.Conn
	var connsMu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, c, up)
			connsMu.Unlock()
			go p.copy(up, c)
			go p.copy(c, up)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.resume()
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return p
}

func (p *pauser) addr() string { return p.ln.Addr().String() }

func (p *pauser) copy(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.paused {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *pauser) pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

func (p *pauser) resume() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}
