package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"strata/internal/testsvc"
)

// registryPython is confluent-kafka-python's environment (scripts/pyenv
// registry).
func registryPython(t *testing.T) string {
	root, _ := filepath.Abs("..")
	out, err := exec.Command(filepath.Join(root, "scripts", "pyenv"), "registry").Output()
	if err != nil {
		t.Fatalf("scripts/pyenv registry: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// confluent-kafka-python against `strata serve`: its SchemaRegistryClient
// registers, gets by id, looks up, lists versions, sets and tests
// compatibility; its Avro, Protobuf (a message class made at run time from
// a descriptor, registered as the serializer registers it: a base64
// FileDescriptorProto) and JSON Schema serializers produce through
// confluent_kafka.Producer, and their deserializers decode every record
// consumed back to the value produced. Once without authentication, once
// with a users-file user (registry basic auth, broker SASL SCRAM).
func TestConfluentKafkaPythonSchemaRegistry(t *testing.T) {
	py := registryPython(t)
	users := filepath.Join(t.TempDir(), "users.yaml")
	if err := os.WriteFile(users, []byte("users:\n  - name: serde\n    password: serde-pw-1\n    permissions: [{operation: admin}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sets []string
		auth []string
	}{
		{"no auth", nil, nil},
		{"basic auth", []string{"kafka.sasl.mechanisms=[SCRAM-SHA-512]", "kafka.sasl.users_file=" + users}, []string{"serde", "serde-pw-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testsvc.ServeStrata(t, strataBin, tc.sets...)
			if srv.SchemaRegistry == "" {
				t.Fatal("strata serve reported no schema registry address")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			args := append([]string{"registry_check.py", srv.Kafka, "http://" + srv.SchemaRegistry, "serde"}, tc.auth...)
			var got struct {
				Client []string `json:"client"`
				Serdes map[string]struct {
					Records    int    `json:"records"`
					SchemaID   int    `json:"schema_id"`
					SchemaType string `json:"schema_type"`
				} `json:"serdes"`
			}
			checkJSON(t, exec.CommandContext(ctx, py, args...), &got)
			want := 14 // registry_check.py's client checks
			if tc.auth != nil {
				want += 2 // no auth and a wrong password refused
			}
			if len(got.Client) != want {
				t.Errorf("client checks: %d (%q), want %d", len(got.Client), got.Client, want)
			}
			ids := []int{}
			for _, typ := range []string{"AVRO", "PROTOBUF", "JSON"} {
				s, ok := got.Serdes[typ]
				if !ok || s.Records != 10 || s.SchemaType != typ {
					t.Errorf("%s serializer: %+v, want 10 records under a %s schema", typ, s, typ)
				}
				if slices.Contains(ids, s.SchemaID) {
					t.Errorf("%s's schema id %d is another type's too", typ, s.SchemaID)
				}
				ids = append(ids, s.SchemaID)
			}
		})
	}
}
