package kafka

import (
	"context"
	"testing"
)

// A buffer handed back is handed out again for an answer of its size
// class, and never one too small.
func TestFrameBuffersReused(t *testing.T) {
	drain := func() { // what other tests' answers left
		for _, c := range frameBufs {
			for len(c) > 0 {
				pooled.Add(-int64(cap(<-c)))
			}
		}
	}
	for _, n := range []int{1, 1 << 20, 1<<20 + 1, 3 << 20, 16 << 20, 16<<20 + 1} {
		drain()
		b := getBuf(n)
		if cap(b) < n || len(b) != 0 {
			t.Fatalf("getBuf(%d): len %d cap %d", n, len(b), cap(b))
		}
		b = append(b, 1)
		putBuf(b)
		again := getBuf(n)
		pooled := n <= 16<<20
		if same := cap(again) == cap(b) && &again[:1][0] == &b[0]; same != pooled {
			t.Errorf("getBuf(%d) after putBuf: reused %v, want %v", n, same, pooled)
		}
		if cap(again) < n || len(again) != 0 {
			t.Fatalf("getBuf(%d) again: len %d cap %d", n, len(again), cap(again))
		}
	}
	// At most maxPooled bytes are held, whatever is handed back.
	drain()
	for range 2 * maxPooled >> 20 {
		putBuf(make([]byte, 0, 1<<20))
	}
	if held := pooled.Load(); held != maxPooled || len(frameBufs[0]) != maxPooled>>20 {
		t.Fatalf("%d bytes pooled in %d buffers of 1 MiB; want %d", held, len(frameBufs[0]), maxPooled)
	}
	putBuf(make([]byte, 0, 2<<20))
	if held := pooled.Load(); held != maxPooled {
		t.Fatalf("%d bytes pooled after a 2 MiB buffer more; want %d", held, maxPooled)
	}
	drain()
	putBuf(make([]byte, 0, 3<<20)) // not a class size: dropped
	if b := getBuf(3 << 20); cap(b) != 4<<20 {
		t.Fatalf("a 3 MiB buffer came back for a 4 MiB class: cap %d", cap(b))
	}
}

// A request's scratch buffers go back only when it is answered, and a
// context without a scratch gets buffers of its own.
func TestScratchBuffers(t *testing.T) {
	ctx, sc := withScratch(context.Background())
	a, b := scratchBuf(ctx, 1<<20), scratchBuf(ctx, 3<<20)
	small := scratchBuf(ctx, 100)
	if cap(a) < 1<<20 || cap(b) < 3<<20 || cap(small) < 100 || len(sc.bufs) != 2 {
		t.Fatalf("caps %d %d %d, %d buffers held; want the two large ones held", cap(a), cap(b), cap(small), len(sc.bufs))
	}
	sc.release()
	if len(sc.bufs) != 0 {
		t.Fatalf("%d buffers still held after release", len(sc.bufs))
	}
	if c := scratchBuf(context.Background(), 1<<20); cap(c) < 1<<20 {
		t.Fatalf("no scratch: cap %d", cap(c))
	}
}
