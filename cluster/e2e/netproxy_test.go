package e2e

import (
	"net"
	"sync"
	"testing"
)

// Directions of a proxied connection: what the dialing side sends
// (requests) and what it gets back (responses).
const (
	toTarget = iota
	fromTarget
)

// netProxy forwards TCP connections to a target and can hold the bytes of
// either direction, or both, as a network partition does: connections stay
// open, nothing passes the held way until heal, and then what was held
// arrives late, as TCP's retransmissions would deliver it after a short
// partition. Holding one direction only is a one-way partition. The target
// can change (a restarted node listens on a new port); connections made
// before the change go on to the old one and die with it.
type netProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	target string
	held   [2]bool
	conns  []net.Conn
}

func newNetProxy(t *testing.T) *netProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &netProxy{ln: ln}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.heal()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *netProxy) addr() string { return p.ln.Addr().String() }

// setTarget points new connections at target.
func (p *netProxy) setTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *netProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			p.mu.Lock()
			for p.target == "" { // the node it stands for has not started yet
				p.cond.Wait()
			}
			target := p.target
			p.mu.Unlock()
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.copy(up, c, toTarget)
			go p.copy(c, up, fromTarget)
		}()
	}
}

func (p *netProxy) copy(dst, src net.Conn, dir int) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.held[dir] {
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

// hold stops the bytes of direction dir (toTarget, fromTarget) until heal.
func (p *netProxy) hold(dir int) {
	p.mu.Lock()
	p.held[dir] = true
	p.mu.Unlock()
}

func (p *netProxy) heal() {
	p.mu.Lock()
	p.held = [2]bool{}
	p.cond.Broadcast()
	p.mu.Unlock()
}
