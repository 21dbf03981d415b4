package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdProc is an etcd of the test's own, on loopback ports and a data
// folder it keeps across restarts: the shared test etcd serves other
// packages' tests and must not be stopped.
type etcdProc struct {
	t        *testing.T
	bin      string
	dir      string
	client   string // host:port
	peer     string
	cmd      *exec.Cmd
	exited   chan struct{}
	logMu    sync.Mutex
	log      bytes.Buffer
	restarts int
	args     []string // more flags (startEtcdWith)
}

func startEtcd(t *testing.T) *etcdProc {
	t.Helper()
	return startEtcdWith(t)
}

// startEtcdWith starts the test's own etcd with more flags, such as a
// small --quota-backend-bytes.
func startEtcdWith(t *testing.T, args ...string) *etcdProc {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd is not on PATH (%v): `scripts/services up etcd` installs it from Debian's etcd-server package", err)
	}
	e := &etcdProc{t: t, bin: bin, dir: filepath.Join(t.TempDir(), "etcd"), client: freeAddr(t), peer: freeAddr(t), args: args}
	e.start()
	t.Cleanup(func() {
		e.stop(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("etcd's log:\n%s", e.logTail())
		}
	})
	return e
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (e *etcdProc) start() {
	e.t.Helper()
	cmd := exec.Command(e.bin, "--name", "faults", "--data-dir", e.dir,
		"--listen-client-urls", "http://"+e.client, "--advertise-client-urls", "http://"+e.client,
		"--listen-peer-urls", "http://"+e.peer, "--initial-advertise-peer-urls", "http://"+e.peer,
		"--initial-cluster", "faults=http://"+e.peer)
	cmd.Args = append(cmd.Args, e.args...)
	cmd.Stdout, cmd.Stderr = e, e
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting etcd: %v", err)
	}
	e.cmd, e.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(e.exited) }()
	// Up once it answers with a leader: its /health says false while an
	// alarm is raised, and the harness restarts etcd with NOSPACE raised
	// (the etcd-quota fault), which etcd keeps across the restart.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.client}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, e.client)
		cancel()
		if err == nil && st.Leader != 0 {
			return
		}
		select {
		case <-e.exited:
			e.t.Fatalf("etcd exited at start:\n%s", e.logTail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("etcd at %s not healthy within 30s:\n%s", e.client, e.logTail())
		}
	}
}

// stop ends etcd with sig and waits for it to exit.
func (e *etcdProc) stop(sig syscall.Signal) {
	if e.cmd == nil {
		return
	}
	e.cmd.Process.Signal(sig)
	select {
	case <-e.exited:
	case <-time.After(20 * time.Second):
		e.cmd.Process.Kill()
		<-e.exited
	}
	e.cmd = nil
}

// restart starts etcd again on the same data folder and ports.
func (e *etcdProc) restart() {
	e.t.Helper()
	e.restarts++
	fmt.Fprintf(e, "--- restart %d ---\n", e.restarts)
	e.start()
}

func (e *etcdProc) Write(p []byte) (int, error) {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	return e.log.Write(p)
}

func (e *etcdProc) logTail() string {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	s := e.log.String()
	return s[max(0, len(s)-8000):]
}
