package kafka

import (
	"context"
	"net"
	"testing"
	"time"

	"strata/engine/memory"
)

// A Shutdown that comes before Serve has taken its listener still ends
// Serve: it closes the listener and returns at once instead of accepting
// for ever.
func TestServeAfterShutdownReturns(t *testing.T) {
	srv := New(memory.New(1000), Config{Logger: quiet})
	srv.Shutdown(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after Shutdown: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		ln.Close() // ends the Serve this test started
		t.Fatal("Serve after Shutdown still accepts connections 10 s on")
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the listener still takes connections after Serve returned")
	}
}
