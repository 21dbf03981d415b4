package main

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"strata/internal/testsvc"
)

// schema_registry.addr defaults to Confluent's port on loopback; the flag
// overrides it, "" turns the registry off, and a bad value names the key.
func TestSchemaRegistryConfig(t *testing.T) {
	cfg, err := LoadConfig("", nil)
	if err != nil || cfg.SchemaRegistry.Addr != "127.0.0.1:8081" {
		t.Fatalf("default: %q, %v; want 127.0.0.1:8081", cfg.SchemaRegistry.Addr, err)
	}
	if cfg, err = configFlags("serve", []string{"--schema-registry-addr", "127.0.0.1:18081"}); err != nil || cfg.SchemaRegistry.Addr != "127.0.0.1:18081" {
		t.Fatalf("--schema-registry-addr: %q, %v", cfg.SchemaRegistry.Addr, err)
	}
	if cfg, err = LoadConfig("", []string{"schema_registry.addr="}); err != nil || cfg.SchemaRegistry.Addr != "" {
		t.Fatalf("turned off: %q, %v", cfg.SchemaRegistry.Addr, err)
	}
	for _, tc := range []struct{ set, want string }{
		{"schema_registry.addr=localhost", "schema_registry.addr"},
		{"schema_registry.tls.cert_file=/x.pem", "schema_registry.tls: cert_file and key_file go together"},
	} {
		if _, err := LoadConfig("", []string{tc.set}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: %v, want an error naming %q", tc.set, err, tc.want)
		}
	}
}

// strata serve answers franz-go's registry client on its own listener,
// counts the requests in /metrics, and a restart keeps every schema, id,
// version, deletion and level; the next id is a new one.
func TestSchemaRegistryServesAndKeepsSchemas(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	on := []string{"data_dir=" + dir, "cold.local.dir=" + dir + "/cold"}
	s := startServe(t, on...)
	cl, err := sr.NewClient(sr.URLs("http://" + s.SchemaRegistry))
	if err != nil {
		t.Fatal(err)
	}
	avro := sr.Schema{Schema: `{"type":"record","name":"Click","fields":[{"name":"url","type":"string"}]}`}
	proto := sr.Schema{Type: sr.TypeProtobuf, Schema: "syntax = \"proto3\";\nmessage Click { string url = 1; }"}
	json := sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"object","properties":{"url":{"type":"string"}}}`}
	var ids []int
	for subject, sc := range map[string]sr.Schema{"clicks-value": avro, "clicks-proto-value": proto, "clicks-json-value": json} {
		ss, err := cl.CreateSchema(ctx, subject, sc)
		if err != nil {
			t.Fatalf("create under %s: %v", subject, err)
		}
		ids = append(ids, ss.ID)
	}
	if slices.Sort(ids); !slices.Equal(ids, []int{1, 2, 3}) {
		t.Fatalf("ids %v, want 1, 2 and 3", ids)
	}
	if _, err := cl.DeleteSubject(ctx, "clicks-json-value", sr.SoftDelete); err != nil {
		t.Fatal(err)
	}
	if r := cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatFullTransitive}, "clicks-value"); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	resp, err := http.Get("http://" + s.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `strata_schema_registry_requests_total{code="200",route="register"} 3`) {
		t.Errorf("/metrics has no count of the 3 registrations:\n%s", metrics)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	s = startServe(t, on...)
	cl, err = sr.NewClient(sr.URLs("http://" + s.SchemaRegistry))
	if err != nil {
		t.Fatal(err)
	}
	subjects, err := cl.Subjects(ctx)
	if err != nil || !slices.Equal(subjects, []string{"clicks-proto-value", "clicks-value"}) {
		t.Fatalf("subjects after a restart: %v, %v", subjects, err)
	}
	got, err := cl.LookupSchema(ctx, "clicks-value", avro)
	if err != nil || got.Version != 1 {
		t.Fatalf("lookup after a restart: %+v, %v", got, err)
	}
	if byID, err := cl.SchemaByID(ctx, got.ID); err != nil || byID.Schema != avro.Schema {
		t.Fatalf("by id after a restart: %+v, %v", byID, err)
	}
	if r := cl.Compatibility(ctx, "clicks-value"); r[0].Err != nil || r[0].Level != sr.CompatFullTransitive {
		t.Fatalf("the subject's level after a restart: %+v", r[0])
	}
	if _, err := cl.SchemaByVersion(ctx, "clicks-json-value", 1); err == nil {
		t.Fatal("a soft-deleted subject's version answered after a restart")
	}
	next, err := cl.CreateSchema(ctx, "other-value", sr.Schema{Schema: `"string"`})
	if err != nil || next.ID != 4 {
		t.Fatalf("the first registration after a restart: %+v, %v; want id 4", next, err)
	}
}

// With kafka.sasl on, the registry wants HTTP basic auth as a Kafka user:
// none or a wrong password is 401, the user's password is let in.
func TestSchemaRegistryBasicAuth(t *testing.T) {
	s := startServe(t, "kafka.sasl.mechanisms=[PLAIN]", "kafka.sasl.users=[{name: alice, password: s3cret-pw, permissions: [{operation: admin}]}]")
	url := "http://" + s.SchemaRegistry + "/subjects"
	for _, tc := range []struct {
		user, pass string
		want       int
	}{{"", "", http.StatusUnauthorized}, {"alice", "wrong", http.StatusUnauthorized}, {"mallory", "s3cret-pw", http.StatusUnauthorized}, {"alice", "s3cret-pw", http.StatusOK}} {
		req, _ := http.NewRequest("GET", url, nil)
		if tc.user != "" {
			req.SetBasicAuth(tc.user, tc.pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("as %q/%q: %d %s, want %d", tc.user, tc.pass, resp.StatusCode, body, tc.want)
		}
		if resp.StatusCode == http.StatusUnauthorized && !strings.Contains(string(body), `"error_code":401`) {
			t.Errorf("as %q: %s, want Confluent's error body", tc.user, body)
		}
	}
	cl, err := sr.NewClient(sr.URLs("http://"+s.SchemaRegistry), sr.BasicAuth("alice", "s3cret-pw"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSchema(context.Background(), "a-value", sr.Schema{Schema: `"string"`}); err != nil {
		t.Fatalf("franz-go with basic auth: %v", err)
	}
	anon, _ := sr.NewClient(sr.URLs("http://" + s.SchemaRegistry))
	var re *sr.ResponseError
	if _, err := anon.Subjects(context.Background()); !errors.As(err, &re) || re.StatusCode != http.StatusUnauthorized {
		t.Fatalf("franz-go without credentials: %v, want a 401", err)
	}
}

// schema_registry.addr "" serves no registry.
func TestSchemaRegistryOff(t *testing.T) {
	if s := startServe(t, "schema_registry.addr="); s.SchemaRegistry != "" {
		t.Fatalf("schema_registry.addr \"\": the registry listens on %s", s.SchemaRegistry)
	}
}

// strata.value.schema.validation takes a produce whose values carry the
// wire header of a schema registered under {topic}-value, and refuses one
// without, or naming another subject's schema, with INVALID_RECORD; a
// topic without it takes any value.
// The same with the registry another server runs (schema_registry.url).
func TestSchemaRegistryValidatesProduce(t *testing.T) {
	for _, registry := range []string{"own", "external"} {
		t.Run(registry, func(t *testing.T) { validatesProduce(t, registry) })
	}
}

func validatesProduce(t *testing.T, registry string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var s served
	registryAddr := ""
	if registry == "external" {
		registryAddr = startServe(t).SchemaRegistry
		s = startServe(t, "schema_registry.url=http://"+registryAddr)
	} else {
		s = startServe(t)
		registryAddr = s.SchemaRegistry
	}
	reg, err := sr.NewClient(sr.URLs("http://" + registryAddr))
	if err != nil {
		t.Fatal(err)
	}
	orders, err := reg.CreateSchema(ctx, "orders-value", sr.Schema{Schema: `"string"`})
	if err != nil {
		t.Fatal(err)
	}
	other, err := reg.CreateSchema(ctx, "other-value", sr.Schema{Schema: `"long"`})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.ProducerLinger(0), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	on := "true"
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"strata.value.schema.validation": &on}, "orders"); err != nil || resp.Err != nil {
		t.Fatalf("create: %v %v", err, resp.Err)
	}
	header := func(id int) []byte { return binary.BigEndian.AppendUint32([]byte{0}, uint32(id)) }
	for _, tc := range []struct {
		topic string
		value []byte
		want  error
	}{
		{"orders", append(header(orders.ID), "\x06hello"...), nil},
		{"orders", []byte("no header"), kerr.InvalidRecord},
		{"orders", header(other.ID), kerr.InvalidRecord},
		{"unchecked", []byte("no header"), nil},
	} {
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: tc.topic, Value: tc.value}).FirstErr()
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("produce %q to %s: %v, want %v", tc.value, tc.topic, err, tc.want)
		}
	}
}

// schema_registry.tls serves the registry over HTTPS only, with the
// certificate it names.
func TestSchemaRegistryTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testsvc.NewCA(t, dir)
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	ca.Issue(t, certFile, keyFile, 9, false)
	s := startServe(t, "schema_registry.tls.cert_file="+certFile, "schema_registry.tls.key_file="+keyFile)
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	cl, err := sr.NewClient(sr.URLs("https://"+s.SchemaRegistry), sr.HTTPClient(https))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSchema(context.Background(), "a-value", sr.Schema{Schema: `"string"`}); err != nil {
		t.Fatalf("over HTTPS: %v", err)
	}
	if resp, err := http.Get("http://" + s.SchemaRegistry + "/subjects"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("plain HTTP answered 200: %s", body)
		}
	}
}
