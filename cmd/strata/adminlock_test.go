package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"strata/internal/testsvc"
)

// With SASL on, the admin API hands out no records and changes no configs
// to whoever reaches it: without admin_token it serves only the health
// checks and metrics, and says so at start; with one, everything behind it.
func TestAdminLockedUnderSASL(t *testing.T) {
	for _, token := range []string{"", "tok-Secret-1"} {
		dir := t.TempDir()
		configFile := filepath.Join(dir, "strata.yaml")
		testsvc.WriteFileAtomic(t, configFile, []byte(`data_dir: `+dir+`/data
kafka_addr: 127.0.0.1:0
admin_addr: 127.0.0.1:0
schema_registry: {addr: 127.0.0.1:0}
admin_token: "`+token+`"
cold: {local: {dir: `+dir+`/cold}}
tiering: {enabled: false}
kafka:
  sasl:
    mechanisms: [PLAIN]
    users: [{name: root, password: root-Secret-1, permissions: [{operation: admin, topic_prefix: ""}]}]
`))
		cfg, err := LoadConfig(configFile, nil)
		if err != nil {
			t.Fatal(err)
		}
		var logs lockedBuffer
		ctx, cancel := context.WithCancel(context.Background())
		ready, done := make(chan Addrs, 1), make(chan error, 1)
		go func() { done <- run(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), func(a Addrs) { ready <- a }) }()
		var addrs Addrs
		select {
		case addrs = <-ready:
		case err := <-done:
			t.Fatalf("serve ended before it was ready: %v", err)
		}
		do := func(method, path, auth string) int {
			req, _ := http.NewRequest(method, "http://"+addrs.Admin+path, strings.NewReader(`{"retention.ms":"1"}`))
			if auth != "" {
				req.Header.Set("Authorization", "Bearer "+auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, c := range []struct {
			method, path string
			open         bool // served without a token when locked
		}{
			{"GET", "/healthz", true}, {"GET", "/readyz", true}, {"GET", "/metrics", true},
			{"GET", "/v1/shards", false}, {"GET", "/v1/records?shard=t-0&offset=0", false}, {"GET", "/v1/cluster", false},
			{"PATCH", "/v1/topics/t/configs", false}, {"POST", "/v1/tiering/run", false},
		} {
			got := do(c.method, c.path, "")
			switch {
			case token == "" && c.open && got != 200, token == "" && !c.open && got != http.StatusForbidden:
				t.Errorf("no admin_token: %s %s = %d", c.method, c.path, got)
			case token != "" && !c.open && got != http.StatusUnauthorized:
				t.Errorf("admin_token set: %s %s without it = %d, want 401", c.method, c.path, got)
			case token != "" && c.method == "GET" && do(c.method, c.path, token) == http.StatusUnauthorized:
				t.Errorf("admin_token set: %s %s with it refused", c.method, c.path)
			}
		}
		warned := strings.Contains(logs.String(), "admin_token is not set")
		if warned != (token == "") {
			t.Errorf("admin_token %q: start-up warning logged %v:\n%s", token, warned, logs.String())
		}
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not stop")
		}
	}
}
