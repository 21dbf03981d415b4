package driver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// server is one run of `strata serve` on the workload's data folder. Its
// output goes to one log file shared by every run, so a failure shows the
// history across restarts.
type server struct {
	cmd        *exec.Cmd
	kafka      string
	admin      string
	done       chan struct{} // closed when the process has exited
	exitErr    error         // set before done closes
	expectExit atomic.Bool   // a kill or stop was asked for
	killed     atomic.Bool   // a SIGKILL was sent
	logPath    string
	generation int
}

// startServer starts bin serve on dataDir with the sets (key=value) and
// waits until it reports its addresses.
func startServer(bin, dataDir, logPath string, generation int, sets []string) (*server, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "=== workload: start %d of strata serve at %s\n", generation, time.Now().Format(time.RFC3339Nano))
	args := []string{"serve", "--data-dir", dataDir, "--kafka-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--schema-registry-addr", "127.0.0.1:0"}
	for _, kv := range sets {
		args = append(args, "--set", kv)
	}
	s := &server{logPath: logPath, generation: generation, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	addrs := &addrWriter{w: logFile, found: make(chan struct{})}
	s.cmd.Stdout = addrs // the service logs to stdout
	s.cmd.Stderr = logFile
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() {
		s.exitErr = s.cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	select {
	case <-addrs.found:
		s.kafka, s.admin = addrs.kafka, addrs.admin
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("strata serve exited before serving: %v\n%s", s.exitErr, tail(logPath, 40))
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		<-s.done
		return nil, fmt.Errorf("strata serve did not report its addresses within a minute\n%s", tail(logPath, 40))
	}
}

// kill ends the process with SIGKILL and waits for it.
func (s *server) kill() {
	s.killed.Store(true)
	s.signal(syscall.SIGKILL)
	<-s.done
}

// signal sends sig, noting that the process is expected to end. A process
// that already ended was not asked to: the crash watcher reports it.
func (s *server) signal(sig syscall.Signal) {
	select {
	case <-s.done:
	default:
		s.expectExit.Store(true)
		s.cmd.Process.Signal(sig)
	}
}

// stop asks the process to stop (SIGTERM) and waits up to timeout; it
// returns an error unless the process exited with status 0 in time.
func (s *server) stop(timeout time.Duration) error {
	s.signal(syscall.SIGTERM)
	select {
	case <-s.done:
		if s.killed.Load() {
			return nil // another worker's SIGKILL overtook this stop: not the service's doing
		}
		return s.exitErr
	case <-time.After(timeout):
		s.kill()
		return fmt.Errorf("did not stop within %s of SIGTERM", timeout)
	}
}

// addrWriter copies the service's log and picks the addresses out of its
// "strata serving" line.
type addrWriter struct {
	w            io.Writer
	mu           sync.Mutex
	buf          []byte
	found        chan struct{}
	kafka, admin string
}

func (a *addrWriter) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.kafka == "" {
		a.buf = append(a.buf, p...)
		for {
			i := bytes.IndexByte(a.buf, '\n')
			if i < 0 {
				break
			}
			line := string(a.buf[:i])
			a.buf = a.buf[i+1:]
			k, okK := field(line, "kafka_addr=")
			ad, okA := field(line, "admin_addr=")
			if okK && okA && a.kafka == "" {
				a.kafka, a.admin = k, ad
				a.buf = nil
				close(a.found)
				break
			}
		}
	}
	return a.w.Write(p)
}

func field(line, key string) (string, bool) {
	_, after, ok := strings.Cut(line, key)
	if !ok || after == "" {
		return "", false
	}
	return strings.Fields(after)[0], true
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = lines[len(lines)-n:]
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		lines = append(lines, "(reading the log: "+err.Error()+")")
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
