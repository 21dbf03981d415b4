// Package testsvc gives tests the real services they need (MinIO, HDFS,
// etcd, PostgreSQL, and Apache Kafka as a benchmark peer) and the strata service itself. It reads their addresses from the environment that `make test`
// sets, and otherwise starts them with scripts/services, so a single
// `go test` works too. A service that cannot start fails the test with the
// script's output: nothing is skipped.
package testsvc

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

var (
	mu      sync.Mutex
	started = map[string]map[string]string{}
)

// env returns the KEY=VALUE settings of service svc, starting it if needed.
func env(t testing.TB, svc string, keys ...string) map[string]string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if vals, ok := started[svc]; ok {
		return vals
	}
	vals := map[string]string{}
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			vals[k] = v
		}
	}
	if len(vals) < len(keys) {
		root, err := repoRoot()
		if err != nil {
			t.Fatalf("testsvc: %v", err)
		}
		c, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(c, filepath.Join(root, "scripts", "services"), "up", svc)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("testsvc: starting %s with scripts/services failed: %v\n%s%s", svc, err, out, stderr.Bytes())
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				vals[k] = v
			}
		}
	}
	for _, k := range keys {
		if vals[k] == "" {
			t.Fatalf("testsvc: %s started but did not report %s", svc, k)
		}
	}
	started[svc] = vals
	return vals
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "services")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no scripts/services above the working folder")
		}
		dir = parent
	}
}

// MinIO describes a running MinIO server.
type MinIO struct {
	Endpoint, AccessKey, SecretKey string
}

// StartMinIO returns a running MinIO server.
func StartMinIO(t testing.TB) MinIO {
	v := env(t, "minio", "STRATA_TEST_S3_ENDPOINT", "STRATA_TEST_S3_ACCESS_KEY", "STRATA_TEST_S3_SECRET_KEY")
	return MinIO{v["STRATA_TEST_S3_ENDPOINT"], v["STRATA_TEST_S3_ACCESS_KEY"], v["STRATA_TEST_S3_SECRET_KEY"]}
}

// Client returns a plain minio-go client for the server.
func (m MinIO) Client(t testing.TB) *minio.Client {
	tr, err := minio.DefaultTransport(false)
	if err != nil {
		t.Fatalf("minio client: %v", err)
	}
	// Its keep-alive connections end with the test (goleak).
	t.Cleanup(tr.CloseIdleConnections)
	c, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""), Transport: tr})
	if err != nil {
		t.Fatalf("minio client: %v", err)
	}
	return c
}

// Bucket makes sure bucket exists and returns its name.
func (m MinIO) Bucket(t testing.TB, bucket string) string {
	c := m.Client(t)
	ctx := context.Background()
	if ok, err := c.BucketExists(ctx, bucket); err != nil {
		t.Fatalf("minio at %s: %v", m.Endpoint, err)
	} else if !ok {
		if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil &&
			minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
			t.Fatalf("minio: make bucket %s: %v", bucket, err)
		}
	}
	return bucket
}

// StartHDFS returns the address of a running NameNode.
func StartHDFS(t testing.TB) string {
	return env(t, "hdfs", "STRATA_TEST_HDFS_NAMENODE")["STRATA_TEST_HDFS_NAMENODE"]
}

// StartEtcd returns the client address of a running etcd.
func StartEtcd(t testing.TB) string {
	return env(t, "etcd", "STRATA_TEST_ETCD_ENDPOINT")["STRATA_TEST_ETCD_ENDPOINT"]
}

// StartPostgres returns the URL of a database of its own for the test, on
// a running PostgreSQL (the Iceberg SQL catalog's), dropped at its end.
func StartPostgres(t testing.TB) string {
	t.Helper()
	admin := env(t, "postgres", "STRATA_TEST_POSTGRES_URL")["STRATA_TEST_POSTGRES_URL"]
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatalf("testsvc: PostgreSQL at %s: %v", admin, err)
	}
	defer db.Close()
	name := fmt.Sprintf("t%d", time.Now().UnixNano())
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("testsvc: creating a database on PostgreSQL at %s: %v", admin, err)
	}
	t.Cleanup(func() {
		if db, err := sql.Open("pgx", admin); err == nil {
			db.Exec("DROP DATABASE " + name + " WITH (FORCE)")
			db.Close()
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// UniquePrefix names a fresh folder for one test, so tests sharing a
// service never see each other's objects.
func UniquePrefix(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s-%d", strings.ToLower(name), time.Now().UnixNano())
}

// Tool returns the path of a command-line tool tests drive (kcat),
// installing it with scripts/tools when it is missing.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	out, err := exec.Command(filepath.Join(root, "scripts", "tools"), "install", name).CombinedOutput()
	if err != nil {
		t.Fatalf("testsvc: installing %s failed: %v\n%s", name, err, out)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("testsvc: %s installed but not on PATH: %v", name, err)
	}
	return p
}

// StartKafka returns the address of a running Apache Kafka broker, the peer
// strata's benchmarks measure against.
func StartKafka(t testing.TB) string {
	return env(t, "kafka", "STRATA_PEER_KAFKA_BROKERS")["STRATA_PEER_KAFKA_BROKERS"]
}

// RunWithStrata is a TestMain for packages that drive the service the way a
// user does: it builds the strata command once into a temporary folder,
// sets *bin to its path, runs the tests and returns their exit code.
func RunWithStrata(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "strata-bin-")
	if err == nil {
		*bin, err = buildStrata(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	return m.Run()
}

func buildStrata(dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "strata")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/strata")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/strata: %v\n%s", err, out)
	}
	return bin, nil
}

// Strata is a running `strata serve`.
type Strata struct {
	Kafka, Admin string
	// SchemaRegistry is the registry's listener; "" when it is off.
	SchemaRegistry string
}

// ServeStrata starts `bin serve` on a fresh data folder with the settings
// given as key=value (--set), and stops it with SIGTERM at cleanup, failing
// the test if it does not stop cleanly.
func ServeStrata(t testing.TB, bin string, sets ...string) Strata {
	t.Helper()
	p := StartProcess(t, bin, t.TempDir(), sets...)
	t.Cleanup(p.Stop)
	return p.Strata
}

// Process is a `strata serve` a test can stop, kill and start again on its
// data folder, as an operator or a power cut would.
type Process struct {
	Strata // where the running process listens
	t      testing.TB
	bin    string
	dir    string
	sets   []string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	exited chan error
}

// StartProcess starts `bin serve` on dir with the settings given as
// key=value (--set); it fails the test if the service does not report its
// addresses within a minute. Nothing stops it at cleanup but a Kill: call
// Stop (or Kill) when the test needs it down.
func StartProcess(t testing.TB, bin, dir string, sets ...string) *Process {
	t.Helper()
	p := &Process{t: t, bin: bin, dir: dir, sets: sets}
	p.start()
	t.Cleanup(func() {
		if p.running() {
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *Process) start() {
	t := p.t
	t.Helper()
	// A restart listens where the process did before, as a restarted
	// server does: clients that know only its old address reach it again.
	args := []string{"serve", "--data-dir", p.dir, "--kafka-addr", cmp.Or(p.Kafka, "127.0.0.1:0"), "--admin-addr", cmp.Or(p.Admin, "127.0.0.1:0"),
		"--schema-registry-addr", cmp.Or(p.SchemaRegistry, "127.0.0.1:0"),
		"--set", "cold.local.dir=" + p.dir + "/cold"}
	for _, kv := range p.sets {
		args = append(args, "--set", kv)
	}
	cmd := exec.Command(p.bin, args...)
	logs, err := cmd.StdoutPipe() // the service logs to stdout
	if err != nil {
		t.Fatal(err)
	}
	p.stderr = &bytes.Buffer{}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd, p.exited = cmd, make(chan error, 1)
	startup := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer startup.Stop()
	var s Strata
	sc := bufio.NewScanner(logs)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), "strata serving") {
			continue
		}
		s.Kafka, _ = logField(sc.Text(), "kafka_addr")
		s.Admin, _ = logField(sc.Text(), "admin_addr")
		if a, _ := logField(sc.Text(), "schema_registry_addr"); a != `""` { // slog's empty value
			s.SchemaRegistry = a
		}
		break
	}
	// STRATA_TEST_LOGS=dir keeps each process's log there, for a failing
	// test's story; by default the logs are dropped.
	var keep io.Writer = io.Discard
	if dir := os.Getenv("STRATA_TEST_LOGS"); dir != "" {
		if f, err := os.OpenFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+filepath.Base(p.dir)+".log"),
			os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			keep = f
		}
	}
	go func() {
		io.Copy(keep, logs)
		if f, ok := keep.(io.Closer); ok {
			f.Close()
		}
		p.exited <- cmd.Wait()
	}()
	if s.Kafka == "" || s.Admin == "" {
		cmd.Process.Kill()
		<-p.exited
		t.Fatalf("strata serve did not report its addresses\n%s", p.stderr.String())
	}
	p.Strata = s
}

func (p *Process) running() bool {
	return p.cmd != nil && p.cmd.ProcessState == nil && len(p.exited) == 0
}

// Stop ends the service with SIGTERM and fails the test if it does not
// stop cleanly within 30 s.
func (p *Process) Stop() {
	if p.cmd == nil || !p.running() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			p.t.Errorf("strata serve did not stop cleanly: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		p.t.Error("strata serve did not stop within 30s of SIGTERM")
	}
	p.cmd = nil
}

// Kill ends the service with SIGKILL, as a crash would.
func (p *Process) Kill() {
	if p.cmd == nil || !p.running() {
		return
	}
	p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

// Signal sends sig (SIGSTOP and SIGCONT pause and resume it).
func (p *Process) Signal(sig syscall.Signal) {
	if p.cmd != nil {
		p.cmd.Process.Signal(sig)
	}
}

// Dir is the service's data folder (a test deletes it to play a lost disk).
func (p *Process) Dir() string { return p.dir }

// Restart starts the service again on the same data folder, settings and
// addresses.
func (p *Process) Restart() {
	p.t.Helper()
	p.start()
}

// logField is the value of key=value in a text log line.
func logField(line, key string) (string, bool) {
	_, after, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return "", false
	}
	if f := strings.Fields(after); len(f) > 0 {
		return f[0], true
	}
	return "", false
}

// Classpath resolves scripts/NAME/pom.xml with Maven (scripts/jars, which
// caches the result) and returns its classpath; the test fails if it
// cannot be had.
func Classpath(t testing.TB, name string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // the first run downloads
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "jars"), name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("testsvc: scripts/jars %s: %v\n%s", name, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// Java returns the java command the Apache Kafka peer runs with
// (scripts/services: the one on PATH); the test fails without one.
func Java(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("testsvc: no java on PATH (the Kafka peer and Kafka's tools need one): %v", err)
	}
	return p
}
