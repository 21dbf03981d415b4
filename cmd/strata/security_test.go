package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/internal/testsvc"
)

// servedSerial is the serial of the certificate addr presents.
func servedSerial(addr string, roots *x509.CertPool) (int64, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// lockedBuffer collects a process's output while tests read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// strataProcess is `strata serve` run as its own process, so that it can be
// sent SIGHUP and its whole output read.
type strataProcess struct {
	cmd          *exec.Cmd
	out          *lockedBuffer
	kafka, admin string
	stopped      bool
}

func startStrataProcess(t *testing.T, args ...string) *strataProcess {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "strata")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := &strataProcess{cmd: exec.Command(bin, append([]string{"serve"}, args...)...), out: &lockedBuffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(t) })
	deadline := time.Now().Add(time.Minute)
	for p.kafka == "" {
		if time.Now().After(deadline) {
			t.Fatalf("strata serve did not report its addresses:\n%s", p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
		for _, line := range strings.Split(p.out.String(), "\n") {
			if _, after, ok := strings.Cut(line, "kafka_addr="); ok && strings.Contains(line, "strata serving") {
				p.kafka = strings.Fields(after)[0]
				_, after, _ = strings.Cut(line, "admin_addr=")
				p.admin = strings.Fields(after)[0]
			}
		}
	}
	return p
}

func (p *strataProcess) stop(t *testing.T) {
	if p.stopped {
		return
	}
	p.stopped = true
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("strata serve did not stop cleanly: %v\n%s", err, p.out.String())
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Error("strata serve did not stop within 30s of SIGTERM")
	}
}

func saslMechanism(mech, user, password string) sasl.Mechanism {
	switch mech {
	case "PLAIN":
		return plain.Auth{User: user, Pass: password}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
	}
	return scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
}

// Passwords of the secure service; none may appear in its output.
const (
	rootPassword   = "root-Secret-1"
	readerPassword = "reader-Secret-2"
	javaPassword   = "javauser-Secret-3"
	latePassword   = "late-Secret-4"
	wrongPassword  = "wrong-Secret-9"
	adminToken     = "admin-Secret-5"
)

// The service with SASL and TLS on both listeners, as a user runs it: a
// config file with an inline administrator and a users file, real clients
// (franz-go, kcat, the Java client) logging in, a certificate replaced and
// reloaded with SIGHUP; then its whole output is searched for passwords.
func TestSecureServe(t *testing.T) {
	dir := t.TempDir()
	ca := testsvc.NewCA(t, dir)
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	ca.Issue(t, certFile, keyFile, 100, false)
	usersFile := filepath.Join(dir, "users.yaml")
	users := fmt.Sprintf(`users:
  - name: reader
    password: %s
    permissions: [{operation: consume, topic_prefix: "events."}]
  - name: javauser
    permissions: [{operation: produce, topic_prefix: "java."}, {operation: consume, topic_prefix: "java."}]
`, readerPassword)
	testsvc.WriteFileAtomic(t, usersFile, []byte(users))
	configFile := filepath.Join(dir, "strata.yaml")
	config := fmt.Sprintf(`data_dir: %[1]s/data
kafka_addr: 127.0.0.1:0
admin_addr: 127.0.0.1:0
schema_registry: {addr: 127.0.0.1:0}
log: {level: debug}
cold: {local: {dir: %[1]s/cold}}
tiering: {enabled: false}
admin_tls: {cert_file: %[2]s, key_file: %[3]s}
admin_token: %[6]s
kafka:
  tls: {cert_file: %[2]s, key_file: %[3]s}
  sasl:
    mechanisms: [PLAIN, SCRAM-SHA-256, SCRAM-SHA-512]
    users:
      - name: root
        password: %[4]s
        permissions: [{operation: admin, topic_prefix: ""}]
    users_file: %[5]s
`, dir, certFile, keyFile, rootPassword, usersFile, adminToken)
	testsvc.WriteFileAtomic(t, configFile, []byte(config))

	var printed strings.Builder
	if err := printConfig([]string{"--config", configFile}, &printed); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(printed.String(), "password: REDACTED") || strings.Contains(printed.String(), rootPassword) {
		t.Fatalf("strata config shows a password:\n%s", printed.String())
	}

	p := startStrataProcess(t, "--config", configFile)
	tlsCfg := &tls.Config{RootCAs: ca.Pool}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	newClient := func(t *testing.T, mech, user, password string, opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.kafka), kgo.DialTLSConfig(tlsCfg),
			kgo.SASL(saslMechanism(mech, user, password)), kgo.RequestRetries(0), kgo.RetryTimeout(5 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}

	t.Run("franz-go", func(t *testing.T) {
		root := newClient(t, "SCRAM-SHA-512", "root", rootPassword)
		if _, err := kadm.NewClient(root).CreateTopic(ctx, 1, 1, nil, "events.clicks"); err != nil {
			t.Fatalf("root creates a topic: %v", err)
		}
		var recs []*kgo.Record
		for i := range 20 {
			recs = append(recs, &kgo.Record{Topic: "events.clicks", Value: fmt.Appendf(nil, "click %d", i)})
		}
		if err := root.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("root produces: %v", err)
		}
		count := func(t *testing.T) int {
			cl := newClient(t, "SCRAM-SHA-256", "reader", readerPassword, kgo.ConsumeTopics("events.clicks"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			n := 0
			for n < 20 {
				fs := cl.PollFetches(ctx)
				if err := fs.Err0(); err != nil {
					t.Fatalf("reader consumes: %v", err)
				}
				n += fs.NumRecords()
			}
			return n
		}
		count(t)
		for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
			if err := newClient(t, mech, "reader", wrongPassword).Ping(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Errorf("%s with a wrong password: %v; want SASL_AUTHENTICATION_FAILED", mech, err)
			}
		}
		// A consume-only user cannot delete: the topic and its data stay.
		r, err := kadm.NewClient(newClient(t, "PLAIN", "reader", readerPassword)).DeleteTopics(ctx, "events.clicks")
		if err != nil || !errors.Is(r["events.clicks"].Err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("reader deletes events.clicks: %v %v; want TOPIC_AUTHORIZATION_FAILED", err, r["events.clicks"].Err)
		}
		if n := count(t); n != 20 {
			t.Fatalf("after the refused delete the topic holds %d records, want 20", n)
		}
	})

	t.Run("plaintext refused", func(t *testing.T) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(p.kafka), kgo.SASL(saslMechanism("PLAIN", "root", rootPassword)),
			kgo.RequestRetries(0), kgo.RetryTimeout(3*time.Second), kgo.DialTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		defer pcancel()
		if err := cl.Ping(pctx); err == nil {
			t.Fatal("a plaintext client was answered by the TLS listener")
		}
		if resp, err := http.Get("http://" + p.admin + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatal("the admin listener answered plain HTTP")
			}
		}
		https := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
		resp, err := https.Get("https://" + p.admin + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("https admin: %v %v", err, resp)
		}
		resp.Body.Close()
		t.Setenv("STRATA_ADMIN_CA", ca.PEMFile)
		t.Setenv("STRATA_ADMIN_TOKEN", adminToken)
		var out strings.Builder
		if err := tierCmd([]string{"run", "--admin-addr", p.admin}, &out); err != nil || !strings.Contains(out.String(), "uploaded 0 segments") {
			t.Fatalf("strata tier run over https: %v\n%s", err, out.String())
		}
		if !strings.Contains(p.out.String(), "TLS handshake failed") {
			t.Error("the refused plaintext connection is not in the log")
		}
	})

	t.Run("kcat", func(t *testing.T) {
		kcat := testsvc.Tool(t, "kcat")
		run := func(password string, stdin string, args ...string) (string, error) {
			kctx, kcancel := context.WithTimeout(ctx, time.Minute)
			defer kcancel()
			cmd := exec.CommandContext(kctx, kcat, append([]string{"-b", p.kafka, "-X", "security.protocol=SASL_SSL",
				"-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=root", "-X", "sasl.password=" + password,
				"-X", "ssl.ca.location=" + ca.PEMFile}, args...)...)
			cmd.Stdin = strings.NewReader(stdin)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := run(rootPassword, "k1:one\nk2:two\n", "-t", "events.kcat", "-P", "-K", ":"); err != nil {
			t.Fatalf("kcat -P over SASL_SSL: %v\n%s", err, out)
		}
		out, err := run(rootPassword, "", "-t", "events.kcat", "-C", "-o", "beginning", "-e", "-q", "-f", "%k:%s\n")
		if err != nil || out != "k1:one\nk2:two\n" {
			t.Fatalf("kcat -C over SASL_SSL: %v\n%q", err, out)
		}
		out, err = run(wrongPassword, "", "-L", "-m", "5")
		if err == nil || !strings.Contains(out, "Authentication failed") {
			t.Fatalf("kcat -L with a wrong password: %v\n%s", err, out)
		}
	})

	t.Run("java", func(t *testing.T) {
		cp, err := exec.Command("../../scripts/jars", "kafka").Output()
		if err != nil {
			var exit *exec.ExitError
			errors.As(err, &exit)
			t.Fatalf("scripts/jars kafka: %v\n%s", err, exit.Stderr)
		}
		classes := t.TempDir()
		classpath := strings.TrimSpace(string(cp))
		if out, err := exec.Command("javac", "-d", classes, "-cp", classpath, "testdata/java/SaslClient.java").CombinedOutput(); err != nil {
			t.Fatalf("javac: %v\n%s", err, out)
		}
		java := func(args ...string) (string, int) {
			jctx, jcancel := context.WithTimeout(ctx, 2*time.Minute)
			defer jcancel()
			out, err := exec.CommandContext(jctx, "java", append([]string{"-cp", classes + ":" + classpath, "SaslClient", p.kafka, ca.PEMFile}, args...)...).CombinedOutput()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return string(out), exit.ExitCode()
			}
			if err != nil {
				t.Fatalf("java: %v\n%s", err, out)
			}
			return string(out), 0
		}
		// root sets javauser's password through the Admin API, then the
		// client produces and consumes as javauser.
		if out, code := java("root", rootPassword, "java.orders", "javauser", javaPassword); code != 0 {
			t.Fatalf("java client, SASL_SSL SCRAM-SHA-512: exit %d\n%s", code, out)
		}
		if out, code := java("javauser", javaPassword, "java.orders2"); code != 0 {
			t.Fatalf("java client as javauser: exit %d\n%s", code, out)
		}
		if out, code := java("javauser", wrongPassword, "java.orders"); code != 3 {
			t.Fatalf("java client with a wrong password: exit %d, want 3 (authentication failed)\n%s", code, out)
		}
	})

	t.Run("SIGHUP reloads certificates and users", func(t *testing.T) {
		for _, addr := range []string{p.kafka, p.admin} {
			if s, err := servedSerial(addr, ca.Pool); err != nil || s != 100 {
				t.Fatalf("%s serves serial %d (%v), want 100", addr, s, err)
			}
		}
		ca.Issue(t, certFile, keyFile, 101, false)
		testsvc.WriteFileAtomic(t, usersFile, []byte(users+fmt.Sprintf("  - name: late\n    password: %s\n", latePassword)))
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for _, addr := range []string{p.kafka, p.admin} {
			for {
				s, err := servedSerial(addr, ca.Pool)
				if err == nil && s == 101 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s serves serial %d (%v) after SIGHUP, want 101", addr, s, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		// The users file is read after the certificates: wait for it too.
		for {
			err := newClient(t, "SCRAM-SHA-256", "late", latePassword).Ping(ctx)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a user added to the users file, after SIGHUP: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := newClient(t, "SCRAM-SHA-256", "reader", readerPassword).Ping(ctx); err != nil {
			t.Fatalf("reader after SIGHUP: %v", err)
		}
	})

	p.stop(t)
	logs := p.out.String()
	for _, want := range []string{"authentication failed", "authenticated", "certificate reloaded"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	for _, secret := range []string{rootPassword, readerPassword, javaPassword, latePassword, wrongPassword, adminToken} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log shows the password %q", secret)
		}
	}
	if t.Failed() {
		t.Logf("strata's output:\n%s", logs)
	}
}

// With client_ca_file, a listener takes only clients whose certificate the
// CA signed.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testsvc.NewCA(t, dir)
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	ca.Issue(t, certFile, keyFile, 7, false)
	clientCert := ca.Issue(t, filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key"), 8, true)
	tlsKeys := []string{"cert_file=" + certFile, "key_file=" + keyFile, "client_ca_file=" + ca.PEMFile}
	var sets []string
	for _, k := range tlsKeys {
		sets = append(sets, "kafka.tls."+k, "admin_tls."+k)
	}
	s := startServe(t, sets...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"with a client certificate", []tls.Certificate{clientCert}, true},
		{"without", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tlsCfg := &tls.Config{RootCAs: ca.Pool, Certificates: tc.certs}
			cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.DialTLSConfig(tlsCfg), kgo.RequestRetries(0), kgo.RetryTimeout(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
			defer pcancel()
			if err := cl.Ping(pctx); (err == nil) != tc.ok {
				t.Errorf("kafka: %v; want ok=%v", err, tc.ok)
			}
			https := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
			resp, err := https.Get("https://" + s.Admin + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			if (err == nil) != tc.ok {
				t.Errorf("admin: %v; want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestSecurityConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"kafka.sasl.mechanisms=[GSSAPI]", "kafka.sasl.users=[{name: a, password: b}]"}, `kafka.sasl.mechanisms: "GSSAPI"`},
		{[]string{"kafka.sasl.mechanisms=[PLAIN]"}, "no user is configured"},
		{[]string{"kafka.sasl.users=[{name: a, password: b}]"}, "kafka.sasl.mechanisms is empty"},
		{[]string{"kafka.sasl.mechanisms=[PLAIN]", "kafka.sasl.users=[{name: a, permissions: [{operation: delete}]}]"}, `operation "delete"`},
		{[]string{"kafka.sasl.mechanisms=[PLAIN]", "kafka.sasl.users_file=/nonexistent/users.yaml"}, "kafka.sasl.users_file"},
		{[]string{"kafka.tls.cert_file=/x.pem"}, "kafka.tls: cert_file and key_file go together"},
		{[]string{"admin_tls.client_ca_file=/ca.pem"}, "admin_tls.client_ca_file: needs cert_file"},
	} {
		_, err := LoadConfig("", tc.sets)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want an error with %q", tc.sets, err, tc.want)
		}
	}
}
