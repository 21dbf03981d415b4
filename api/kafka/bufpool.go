package kafka

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"
)

// A fetch answer moves megabytes: each partition's record batches, then
// the frame they are copied into. A fresh buffer that large costs a
// zeroing pass (the runtime clears every large allocation) and GC work,
// about as much as copying the records into it; so the buffers of answers
// already written are kept for the next ones. Kept by power-of-two
// capacity from 1 MiB to 16 MiB, at most 96 MiB in all, whatever the load:
// room for a consumer's answer of 16 partitions of 1 MiB and the next one
// read ahead (readahead.go), with a few more. A sync.Pool would hold none
// for long: a consumer's fetches allocate enough to empty it at every GC.
const (
	minPooledShift = 20
	maxPooledShift = 24
	maxPooled      = 96 << 20
)

var (
	frameBufs = func() (c [maxPooledShift - minPooledShift + 1]chan []byte) {
		for i := range c {
			c[i] = make(chan []byte, maxPooled>>(minPooledShift+i))
		}
		return c
	}()
	pooled atomic.Int64 // the bytes frameBufs holds
)

// getBuf returns an empty buffer with room for at least n bytes.
func getBuf(n int) []byte {
	shift := max(minPooledShift, bits.Len(uint(max(n, 1)-1)))
	if shift > maxPooledShift {
		return make([]byte, 0, n)
	}
	select {
	case b := <-frameBufs[shift-minPooledShift]:
		pooled.Add(-int64(cap(b)))
		return b[:0]
	default:
		return make([]byte, 0, 1<<shift)
	}
}

// putBuf hands b back for reuse; the caller must hold no other reference
// to its bytes.
func putBuf(b []byte) {
	c := cap(b)
	if c < 1<<minPooledShift || c > 1<<maxPooledShift || c&(c-1) != 0 {
		return
	}
	if pooled.Add(int64(c)) > maxPooled {
		pooled.Add(-int64(c))
		return
	}
	select {
	case frameBufs[bits.Len(uint(c))-1-minPooledShift] <- b[:0]:
	default:
		pooled.Add(-int64(c))
	}
}

// scratch is the buffers one request's answer is built from (a fetch's
// record batches), handed back once the answer is framed: the frame holds
// a copy, and nothing else a reference.
type scratch struct {
	mu   sync.Mutex
	bufs [][]byte
	// what the answer holds of the server's fetch answer budget, given
	// back with the buffers
	held   int64
	budget *budget
}

type scratchKey struct{}

func withScratch(ctx context.Context) (context.Context, *scratch) {
	sc := &scratch{}
	return context.WithValue(ctx, scratchKey{}, sc), sc
}

// scratchBuf returns an empty buffer with room for n bytes, handed back
// when ctx's request is answered (a new one when ctx has no scratch).
func scratchBuf(ctx context.Context, n int) []byte {
	sc, ok := ctx.Value(scratchKey{}).(*scratch)
	if !ok || n < 1<<minPooledShift>>1 {
		return make([]byte, 0, n)
	}
	b := getBuf(n)
	sc.mu.Lock()
	sc.bufs = append(sc.bufs, b)
	sc.mu.Unlock()
	return b
}

// release hands the request's buffers back: call it only once the answer
// is framed.
func (sc *scratch) release() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, b := range sc.bufs {
		putBuf(b)
	}
	sc.bufs = nil
	sc.dropHold()
}

// dropHold gives back what the request holds of the fetch answer budget
// (sc.mu held).
func (sc *scratch) dropHold() {
	if sc.held != 0 {
		sc.budget.release(sc.held)
		sc.held = 0
	}
}

// adoptScratch hands b back with ctx's request's other buffers once the
// answer is written (b was framed ahead, outside the request).
func adoptScratch(ctx context.Context, b []byte) {
	sc, ok := ctx.Value(scratchKey{}).(*scratch)
	if !ok {
		return
	}
	sc.mu.Lock()
	sc.bufs = append(sc.bufs, b)
	sc.mu.Unlock()
}

// aheadBuf is scratchBuf for a read-ahead: pooled buffers for large
// answers, handed back by whoever ends up with them.
func aheadBuf(n int) []byte {
	if n < 1<<minPooledShift>>1 {
		return make([]byte, 0, n)
	}
	return getBuf(n)
}
