package kafka

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/engine/memory"
)

// authUsers: an administrator, a producer and a consumer of orders.*
// (in group billing).
var authUsers = []User{
	{Name: "root", Password: "root-pw-1", Permissions: []Permission{{Operation: OpAdmin}}},
	{Name: "writer", Password: "writer-pw-2", Permissions: []Permission{{Operation: OpProduce, TopicPrefix: "orders."}}},
	{Name: "reader", Password: "reader-pw-3", Permissions: []Permission{{Operation: OpConsume, TopicPrefix: "orders."}, {Operation: OpConsume, GroupPrefix: prefix("billing")}}},
}

func authConfig(t testing.TB, credFile string) *Auth {
	t.Helper()
	a, err := NewAuth(AuthConfig{Mechanisms: []string{MechPlain, MechScramSHA256, MechScramSHA512}, Users: authUsers, CredentialsFile: credFile})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mechanism(name, user, password string) sasl.Mechanism {
	switch name {
	case MechPlain:
		return plain.Auth{User: user, Pass: password}.AsMechanism()
	case MechScramSHA256:
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
	}
	return scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
}

// saslClient is a franz-go client logging in as user with mech.
func saslClient(t *testing.T, addr, mech, user, password string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return client(t, addr, append([]kgo.Opt{kgo.SASL(mechanism(mech, user, password)), kgo.RequestRetries(0),
		kgo.RetryTimeout(5 * time.Second)}, opts...)...)
}

func TestSASLLogins(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true, Auth: authConfig(t, "")})
	for _, mech := range []string{MechPlain, MechScramSHA256, MechScramSHA512} {
		for _, tc := range []struct {
			name, user, password string
			ok                   bool
		}{
			{"right password", "writer", "writer-pw-2", true},
			{"wrong password", "writer", "reader-pw-3", false},
			{"unknown user", "nobody", "writer-pw-2", false},
		} {
			t.Run(mech+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cl := saslClient(t, addr, mech, tc.user, tc.password, kgo.DefaultProduceTopic("orders.eu"), kgo.AllowAutoTopicCreation())
				if !tc.ok {
					if err := cl.Ping(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
						t.Fatalf("login as %s with a wrong password: %v; want SASL_AUTHENTICATION_FAILED", tc.user, err)
					}
					return
				}
				if err := cl.ProduceSync(ctx, kgo.StringRecord("hello")).FirstErr(); err != nil {
					t.Fatalf("produce as %s: %v", tc.user, err)
				}
			})
		}
	}
	// What was produced reads back for the consumer, over SCRAM.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := saslClient(t, addr, MechScramSHA512, "reader", "reader-pw-3", kgo.ConsumeTopics("orders.eu"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < 3 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume as reader: %v", err)
		}
		got += fs.NumRecords()
	}
}

// rawRequest writes one request frame on c and reads the answer; an
// error means the connection was closed.
func rawRequest(c net.Conn, req kmsg.Request, version int16) ([]byte, error) {
	f, err := encodeFrame(req, version)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(f); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err = io.ReadFull(c, body)
	return body, err
}

// Before authenticating, a connection gets ApiVersions and SASL answered
// and is closed on anything else; a failed login is answered, then closed.
func TestSASLRequiredBeforeOtherRequests(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true, Auth: authConfig(t, "")})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := dial()
	if _, err := rawRequest(c, kmsg.NewPtrApiVersionsRequest(), 3); err != nil {
		t.Fatalf("ApiVersions before authenticating: %v", err)
	}
	if _, err := rawRequest(c, kmsg.NewPtrMetadataRequest(), 12); err == nil {
		t.Fatal("Metadata before authenticating was answered; want the connection closed")
	}

	c = dial()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = "GSSAPI"
	raw, err := rawRequest(c, hs, 1)
	if err != nil {
		t.Fatal(err)
	}
	hsResp := kmsg.NewPtrSASLHandshakeResponse()
	hsResp.SetVersion(1)
	if err := hsResp.ReadFrom(raw[4:]); err != nil || hsResp.ErrorCode != kerr.UnsupportedSaslMechanism.Code || len(hsResp.SupportedMechanisms) != 3 {
		t.Fatalf("handshake with GSSAPI: %v %+v; want UNSUPPORTED_SASL_MECHANISM and the 3 mechanisms", err, hsResp)
	}

	c = dial()
	hs.Mechanism = MechPlain
	if _, err := rawRequest(c, hs, 1); err != nil {
		t.Fatal(err)
	}
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.SASLAuthBytes = []byte("\x00root\x00not-the-password")
	raw, err = rawRequest(c, auth, 2)
	if err != nil {
		t.Fatal(err)
	}
	authResp := kmsg.NewPtrSASLAuthenticateResponse()
	authResp.SetVersion(2)
	if err := authResp.ReadFrom(raw[5:]); err != nil || authResp.ErrorCode != kerr.SaslAuthenticationFailed.Code || authResp.ErrorMessage == nil {
		t.Fatalf("PLAIN with a wrong password: %v %+v; want SASL_AUTHENTICATION_FAILED with a message", err, authResp)
	}
	if _, err := rawRequest(c, kmsg.NewPtrApiVersionsRequest(), 3); err == nil {
		t.Fatal("the connection stayed open after a failed login")
	}
}

func TestAuthorizationByPermission(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true, Auth: authConfig(t, "")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := kadm.NewClient(saslClient(t, addr, MechScramSHA256, "root", "root-pw-1"))
	reader := kadm.NewClient(saslClient(t, addr, MechScramSHA256, "reader", "reader-pw-3"))
	writer := saslClient(t, addr, MechPlain, "writer", "writer-pw-2")

	for _, topic := range []string{"orders.us", "payroll"} {
		if _, err := root.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
			t.Fatalf("admin creates %s: %v", topic, err)
		}
	}
	if err := writer.ProduceSync(ctx, &kgo.Record{Topic: "orders.us", Value: []byte("a")}, &kgo.Record{Topic: "orders.us", Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatalf("writer produces to orders.us: %v", err)
	}
	if err := writer.ProduceSync(ctx, &kgo.Record{Topic: "payroll", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("writer produces to payroll: %v; want TOPIC_AUTHORIZATION_FAILED", err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want *kerr.Error
	}{
		{"reader deletes a topic", func() error {
			r, err := reader.DeleteTopics(ctx, "orders.us")
			if err != nil {
				return err
			}
			return r["orders.us"].Err
		}, kerr.TopicAuthorizationFailed},
		{"reader creates a topic", func() error {
			_, err := reader.CreateTopic(ctx, 1, 1, nil, "orders.new")
			return err
		}, kerr.TopicAuthorizationFailed},
		{"reader deletes records", func() error {
			r, err := reader.DeleteRecords(ctx, kadm.Offsets{"orders.us": {0: {At: 1}}})
			if err != nil {
				return err
			}
			return r.Error()
		}, kerr.TopicAuthorizationFailed},
		{"reader lists SCRAM users", func() error {
			_, err := reader.DescribeUserSCRAMs(ctx)
			return err
		}, kerr.ClusterAuthorizationFailed},
		{"reader adds a SCRAM user", func() error {
			r, err := reader.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "mallory", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "x"}})
			if err != nil {
				return err
			}
			return r.Error()
		}, kerr.ClusterAuthorizationFailed},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v; want %s", tc.name, err, tc.want.Message)
		}
	}
	// The topic and its records are still there, and the reader reads them
	// as a member of a group it may consume in.
	cl := saslClient(t, addr, MechScramSHA512, "reader", "reader-pw-3", kgo.ConsumeTopics("orders.us"),
		kgo.ConsumerGroup("billing"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < 2 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reader consumes orders.us in a group: %v", err)
		}
		got += fs.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("reader commits: %v", err)
	}
	// The writer may not consume.
	wc := saslClient(t, addr, MechPlain, "writer", "writer-pw-2")
	lo, err := kadm.NewClient(wc).ListStartOffsets(ctx, "orders.us")
	if err == nil {
		err = lo.Error()
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("writer lists offsets: %v; want TOPIC_AUTHORIZATION_FAILED", err)
	}
	// The administrator may delete.
	r, err := root.DeleteTopics(ctx, "orders.us")
	if err != nil || r["orders.us"].Err != nil {
		t.Fatalf("admin deletes orders.us: %v %v", err, r["orders.us"].Err)
	}
}

// SCRAM users managed through Kafka's API, as kafka-configs does: an added
// user logs in, survives a restart, and is gone once deleted.
func TestSCRAMCredentialsAlterDescribe(t *testing.T) {
	dir := t.TempDir()
	credFile := filepath.Join(dir, "scram.json")
	addr, _, stop := serveDir(t, dir, Config{AutoCreateTopics: true, Auth: authConfig(t, credFile)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := kadm.NewClient(saslClient(t, addr, MechScramSHA256, "root", "root-pw-1"))
	r, err := root.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "carol-pw-4"},
		{User: "reader", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "reader-new-5"},
	})
	if err != nil || r["carol"].Err != nil || r["reader"].Err != nil {
		t.Fatalf("alter: %v %+v", err, r)
	}
	// kadm checks iterations itself: a raw request shows the broker does too.
	bad := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	bad.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{{Name: "bad", Mechanism: 1, Iterations: 100, Salt: []byte("s"), SaltedPassword: make([]byte, 32)}}
	if resp, err := bad.RequestWith(ctx, saslClient(t, addr, MechScramSHA256, "root", "root-pw-1")); err != nil || len(resp.Results) != 1 ||
		resp.Results[0].ErrorCode != kerr.UnacceptableCredential.Code {
		t.Fatalf("alter with 100 iterations: %v %+v; want UNACCEPTABLE_CREDENTIAL", err, resp)
	}
	d, err := root.DescribeUserSCRAMs(ctx, "carol", "reader", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if ci := d["carol"].CredInfos; d["carol"].Err != nil || len(ci) != 1 || ci[0].Mechanism != kadm.ScramSha512 || ci[0].Iterations != 8192 {
		t.Fatalf("describe carol: %+v", d["carol"])
	}
	if ci := d["reader"].CredInfos; len(ci) != 2 {
		t.Fatalf("describe reader: %+v; want both mechanisms", d["reader"])
	}
	if !errors.Is(d["nobody"].Err, kerr.ResourceNotFound) {
		t.Fatalf("describe nobody: %+v", d["nobody"])
	}
	if all, err := root.DescribeUserSCRAMs(ctx); err != nil || len(all) != 4 || all["carol"].Err != nil || all["root"].Err != nil {
		t.Fatalf("describe everyone: %v %+v; want root, writer, reader and carol", err, all)
	}
	login := func(mech, user, pw string) error {
		cl := saslClient(t, addr, mech, user, pw)
		defer cl.Close()
		return cl.Ping(ctx)
	}
	for _, tc := range []struct {
		mech, user, pw string
		ok             bool
	}{
		{MechScramSHA512, "carol", "carol-pw-4", true},
		{MechScramSHA256, "carol", "carol-pw-4", false}, // no SHA-256 credential
		{MechScramSHA256, "reader", "reader-new-5", true},
		{MechScramSHA256, "reader", "reader-pw-3", false}, // replaced
		{MechScramSHA512, "reader", "reader-pw-3", true},  // untouched
	} {
		if err := login(tc.mech, tc.user, tc.pw); (err == nil) != tc.ok {
			t.Errorf("before restart: %s as %s: %v; want ok=%v", tc.mech, tc.user, err, tc.ok)
		}
	}
	stop()

	addr, _, stop = serveDir(t, dir, Config{AutoCreateTopics: true, Auth: authConfig(t, credFile)})
	defer stop()
	if err := login(MechScramSHA512, "carol", "carol-pw-4"); err != nil {
		t.Fatalf("carol after a restart: %v", err)
	}
	if err := login(MechScramSHA256, "reader", "reader-pw-3"); err == nil {
		t.Fatal("reader's old SHA-256 password works after a restart")
	}
	root = kadm.NewClient(saslClient(t, addr, MechScramSHA256, "root", "root-pw-1"))
	r, err = root.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "carol", Mechanism: kadm.ScramSha512}, {User: "writer", Mechanism: kadm.ScramSha256}}, nil)
	if err != nil || r.Error() != nil {
		t.Fatalf("delete: %v %+v", err, r)
	}
	if err := login(MechScramSHA512, "carol", "carol-pw-4"); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("carol after deletion: %v", err)
	}
	if err := login(MechScramSHA256, "writer", "writer-pw-2"); err == nil {
		t.Fatal("writer's deleted SHA-256 credential still works")
	}
	if err := login(MechScramSHA512, "writer", "writer-pw-2"); err != nil {
		t.Fatalf("writer's SHA-512 credential: %v", err)
	}
}

// librdkafka's client-final message carries client nonce + the server's
// nonce; it is accepted as Apache Kafka accepts it, with the proof checked.
func TestSCRAMLibrdkafkaFinalNonce(t *testing.T) {
	srv := New(memory.New(100), Config{Logger: quiet, Auth: authConfig(t, "")})
	for _, tc := range []struct {
		name, password string
		nonce          func(client, server string) string
		ok             bool
	}{
		{"librdkafka's nonce", "writer-pw-2", func(c, s string) string { return c + s }, true},
		{"the RFC's nonce", "writer-pw-2", func(c, s string) string { return s }, true},
		{"wrong password", "writer-pw-3", func(c, s string) string { return c + s }, false},
		{"a nonce not ending with the server's", "writer-pw-2", func(c, s string) string { return s + "x" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := srv.newSession("test")
			step := func(req kmsg.Request) kmsg.Response {
				resp, err := srv.handleSession(ss, req, clientInfo{})
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			hs := kmsg.NewPtrSASLHandshakeRequest()
			hs.Version, hs.Mechanism = 1, MechScramSHA256
			step(hs)
			const cnonce = "fyko+d2lbbFgONRv9qkxdawL"
			auth := kmsg.NewPtrSASLAuthenticateRequest()
			auth.SASLAuthBytes = []byte("n,,n=writer,r=" + cnonce)
			serverFirst := string(step(auth).(*kmsg.SASLAuthenticateResponse).SASLAuthBytes)
			snonce, _ := scramAttr(serverFirst, "r")
			salt64, _ := scramAttr(serverFirst, "s")
			iters, _ := scramAttr(serverFirst, "i")
			salt, _ := base64.StdEncoding.DecodeString(salt64)
			n, _ := strconv.Atoi(iters)
			salted, err := pbkdf2.Key(sha256.New, tc.password, salt, n, sha256.Size)
			if err != nil {
				t.Fatal(err)
			}
			mac := func(key []byte, msg string) []byte {
				h := hmac.New(sha256.New, key)
				h.Write([]byte(msg))
				return h.Sum(nil)
			}
			withoutProof := "c=biws,r=" + tc.nonce(cnonce, snonce)
			authMessage := "n=writer,r=" + cnonce + "," + serverFirst + "," + withoutProof
			clientKey := mac(salted, "Client Key")
			storedKey := sha256.Sum256(clientKey)
			proof := mac(storedKey[:], authMessage)
			for i := range proof {
				proof[i] ^= clientKey[i]
			}
			auth.SASLAuthBytes = []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof))
			resp := step(auth).(*kmsg.SASLAuthenticateResponse)
			if !tc.ok {
				if resp.ErrorCode != kerr.SaslAuthenticationFailed.Code || ss.user != "" {
					t.Fatalf("answered %d, user %q; want SASL_AUTHENTICATION_FAILED", resp.ErrorCode, ss.user)
				}
				return
			}
			want := "v=" + base64.StdEncoding.EncodeToString(mac(mac(salted, "Server Key"), authMessage))
			if resp.ErrorCode != 0 || string(resp.SASLAuthBytes) != want || ss.user != "writer" {
				t.Fatalf("answered %d %q, user %q; want success and %q", resp.ErrorCode, resp.SASLAuthBytes, ss.user, want)
			}
		})
	}
}

// A failed login is logged with the client's name cut short, and its
// address is muted before its next request on any connection (as a
// refused produce is) until a login from it succeeds: a stranger can
// neither write half a megabyte of log per attempt nor make the broker
// hash passwords as fast as it can send them.
func TestFailedLoginsAreBoundedAndMuted(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	addr, srv := serveMemory(t, Config{AutoCreateTopics: true, Auth: authConfig(t, ""), Logger: logger})
	login := func(user, password string) int16 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Mechanism = MechPlain
		if _, err := rawRequest(c, hs, 1); err != nil {
			t.Fatal(err)
		}
		auth := kmsg.NewPtrSASLAuthenticateRequest()
		auth.SASLAuthBytes = []byte("\x00" + user + "\x00" + password)
		raw, err := rawRequest(c, auth, 2)
		if err != nil {
			t.Fatal(err)
		}
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		resp.SetVersion(2)
		if err := resp.ReadFrom(raw[5:]); err != nil {
			t.Fatal(err)
		}
		return resp.ErrorCode
	}
	muted := func() bool {
		srv.penalties.mu.Lock()
		defer srv.penalties.mu.Unlock()
		return time.Until(srv.penalties.m["127.0.0.1"].until) > 0
	}
	if code := login(strings.Repeat("x", 400<<10), "guess"); code != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("a login as a 400 KiB name: error %d; want SASL_AUTHENTICATION_FAILED", code)
	}
	if !muted() {
		t.Fatal("the address of a failed login is not muted")
	}
	logMu.Lock()
	line := logs.String()
	logMu.Unlock()
	if !strings.Contains(line, "authentication failed") || len(line) > 1024 {
		t.Fatalf("the failed login's log (%d bytes): want one line of at most 1 KiB naming the failure; starts %.200q", len(line), line)
	}
	if code := login("writer", "writer-pw-2"); code != 0 {
		t.Fatalf("the right password after a failed login: error %d", code)
	}
	if muted() {
		t.Fatal("the address is still muted after a login from it succeeded")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
