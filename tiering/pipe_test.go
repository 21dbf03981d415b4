package tiering

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"
)

func TestAheadPipe(t *testing.T) {
	data := make([]byte, 5*pipeChunk+12345)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	writeAll := func(p *aheadPipe, end error) {
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(3*pipeChunk/2))
			if _, err := p.Write(rest[:n]); err != nil {
				p.CloseWithError(err)
				return
			}
			rest = rest[n:]
		}
		p.CloseWithError(end)
	}
	boom := errors.New("conversion failed")
	for _, tc := range []struct {
		name  string
		ahead int
		end   error
	}{
		{"every byte in order, small buffer", pipeChunk, nil},
		{"every byte in order, large buffer", 16 * pipeChunk, nil},
		{"the writer's error after its bytes", 2 * pipeChunk, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newAheadPipe(tc.ahead)
			go writeAll(p, tc.end)
			got, err := io.ReadAll(p)
			if tc.end != nil {
				if !errors.Is(err, tc.end) {
					t.Fatalf("read ended with %v, want %v", err, tc.end)
				}
				// Whole chunks before the failure arrive; the partial one is dropped.
				if !bytes.Equal(got, data[:len(got)]) {
					t.Fatal("bytes before the error differ from those written")
				}
				return
			}
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes (err %v), wrote %d; equal %v", len(got), err, len(data), bytes.Equal(got, data))
			}
		})
	}

	t.Run("a reader that gives up stops a waiting writer", func(t *testing.T) {
		p := newAheadPipe(pipeChunk)
		gaveUp := errors.New("upload failed")
		werr := make(chan error, 1)
		go func() {
			_, err := p.Write(data) // more than the buffer holds: waits
			werr <- err
		}()
		time.Sleep(20 * time.Millisecond)
		p.CloseReader(gaveUp)
		select {
		case err := <-werr:
			if !errors.Is(err, gaveUp) {
				t.Fatalf("write failed with %v, want %v", err, gaveUp)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the writer still waits after the reader gave up")
		}
	})
}
