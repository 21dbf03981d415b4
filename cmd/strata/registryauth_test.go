package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// The registry's basic auth remembers a password it verified (no PBKDF2
// per request), but a password changed in the users file and reloaded
// (what SIGHUP runs) stops the old one working at the next request, and
// the new one works.
func TestSchemaRegistryBasicAuthFollowsPasswordChanges(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.yaml")
	writeUsers := func(password string) {
		if err := os.WriteFile(users, []byte("users:\n  - name: alice\n    password: "+password+"\n    permissions: [{operation: admin}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeUsers("first-pw")
	cfg, err := LoadConfig("", []string{"data_dir=" + dir, "kafka.sasl.mechanisms=[PLAIN]", "kafka.sasl.users_file=" + users})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sec, err := openSecurity(ctx, cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sec.registryGuard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) })))
	defer srv.Close()
	for _, step := range []struct {
		name     string
		change   string // a new password for alice, written and reloaded first
		password string
		want     int
	}{
		{"the password", "", "first-pw", http.StatusOK},
		{"the password again (remembered)", "", "first-pw", http.StatusOK},
		{"a wrong one", "", "second-pw", http.StatusUnauthorized},
		{"the old password after the change", "second-pw", "first-pw", http.StatusUnauthorized},
		{"the new password", "", "second-pw", http.StatusOK},
		{"the new password again", "", "second-pw", http.StatusOK},
		{"the old one still refused", "", "first-pw", http.StatusUnauthorized},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.change != "" {
				writeUsers(step.change)
				sec.reload(cfg, log)
			}
			req, _ := http.NewRequest("GET", srv.URL+"/subjects", nil)
			req.SetBasicAuth("alice", step.password)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != step.want {
				t.Fatalf("alice/%s: HTTP %d, want %d", step.password, resp.StatusCode, step.want)
			}
		})
	}
}
