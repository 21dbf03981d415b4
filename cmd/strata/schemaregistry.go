package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"strata/registry"
	"strata/registry/etcdstore"
	"strata/registry/format"
	"strata/registry/httpapi"
	"strata/registry/pebblestore"
	"strata/typed"
)

// SchemaRegistryConfig is the built-in Schema Registry (docs/registry.md).
type SchemaRegistryConfig struct {
	// Addr is where it listens, as Confluent's and Redpanda's do
	// (127.0.0.1:8081); empty: no registry.
	Addr string `yaml:"addr"`
	// TLS, when set, serves it over HTTPS only.
	TLS TLSConfig `yaml:"tls"`
	// URL names a registry strata does not serve (http(s)://HOST:PORT,
	// user:password@ for basic auth): the typed columns and produce
	// validation ask it, and strata serves none of its own
	// (extregistry.go).
	URL string `yaml:"url"`
}

// schemaRegistry is the registry and its listener; nil when off.
type schemaRegistry struct {
	reg *registry.Registry
	srv *http.Server
	ln  net.Listener // TLS when schema_registry.tls is set
}

// openSchemaRegistry opens the registry's store and its listener, guarded
// as the Kafka listener is: HTTP basic auth with kafka.sasl's users when
// that is on, TLS with schema_registry.tls. One node keeps it in
// {data_dir}/schema-registry; a cluster's nodes all keep it in etcd under
// cluster.etcd_prefix (etcd, the client md opened), so every node serves
// the same subjects and gives out ids none of the others has.
func openSchemaRegistry(ctx context.Context, cfg *Config, sec *security, etcd *clientv3.Client, reg prometheus.Registerer, log *slog.Logger) (*schemaRegistry, error) {
	if cfg.SchemaRegistry.Addr == "" || cfg.SchemaRegistry.URL != "" {
		return nil, nil
	}
	var store registry.Store
	if cfg.Cluster.Enabled() {
		s, err := etcdstore.Open(ctx, etcdstore.Config{Client: etcd, Prefix: cfg.Cluster.EtcdPrefix})
		if err != nil {
			return nil, fmt.Errorf("schema_registry: its store in etcd (%v): %w", cfg.Cluster.EtcdEndpoints, err)
		}
		store = s
	} else {
		s, err := pebblestore.Open(filepath.Join(cfg.DataDir, "schema-registry"))
		if err != nil {
			return nil, err
		}
		store = s
	}
	r, err := registry.Open(ctx, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.SchemaRegistry.Addr)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("schema_registry.addr %s: %w", cfg.SchemaRegistry.Addr, err)
	}
	api := &httpapi.Server{Registry: r, Log: log.With("component", "schema-registry"), Registerer: reg}
	return &schemaRegistry{reg: r, ln: sec.registryListener(ln),
		srv: &http.Server{Handler: sec.registryGuard(api.Handler()), ReadHeaderTimeout: 10 * time.Second}}, nil
}

// addr is where the registry listens; "" when off.
func (s *schemaRegistry) addr() string {
	if s == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// close closes the listener (if serving never began) and the store,
// once the server is shut down.
func (s *schemaRegistry) close() {
	if s == nil {
		return
	}
	s.ln.Close()
	s.reg.Close()
}

// typedSchemas is the registry as the typed columns ask it
// (typed.Schemas). In a cluster a schema another node registered is
// found: an id or subject not known here syncs with the store first.
type typedSchemas struct{ r *registry.Registry }

func (s typedSchemas) ByID(id int) (*format.Schema, error) {
	var out *format.Schema
	read := func(st *registry.State) error {
		sc, err := st.SchemaByID(id)
		if err == nil {
			out, err = st.Parsed(sc)
		}
		return err
	}
	if err := s.r.Read(read); err == nil {
		return out, nil
	}
	if err := s.sync(); err != nil {
		return nil, err
	}
	return out, s.r.Read(read)
}

func (s typedSchemas) Latest(subject string) (int, *format.Schema, error) {
	if err := s.sync(); err != nil {
		return 0, nil, err
	}
	var id int
	var out *format.Schema
	err := s.r.Read(func(st *registry.State) error {
		v, err := st.Version(subject, registry.Latest, false)
		if err == nil {
			id = v.ID
			out, err = st.Parsed(v.Schema)
		}
		return err
	})
	return id, out, err
}

// Versions are a subject's versions, soft-deleted ones too: their records
// are still in the topic.
func (s typedSchemas) Versions(subject string) ([]typed.Version, error) {
	if err := s.sync(); err != nil {
		return nil, err
	}
	var out []typed.Version
	err := s.r.Read(func(st *registry.State) error {
		ns, err := st.Versions(subject, true)
		for _, n := range ns {
			v, err := st.Version(subject, n, true)
			if err != nil {
				return err
			}
			p, err := st.Parsed(v.Schema)
			if err != nil {
				return fmt.Errorf("schema id %d: %w", v.ID, err)
			}
			out = append(out, typed.Version{ID: v.ID, Schema: p})
		}
		return err
	})
	return out, err
}

func (s typedSchemas) sync() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.r.Sync(ctx)
}
