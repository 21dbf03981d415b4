package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.yaml.in/yaml/v3"

	"strata/api/kafka"
	"strata/cluster"
	"strata/registry/httpapi"
)

// SASLConfig turns on authentication on the Kafka listener
// (docs/kafka.md, "Authentication and TLS").
type SASLConfig struct {
	// Mechanisms: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; empty: no authentication.
	Mechanisms []string   `yaml:"mechanisms"`
	Users      []SASLUser `yaml:"users"`
	// UsersFile is a YAML file with a `users:` list like Users, read at
	// start and again on SIGHUP; it keeps passwords out of the main file.
	UsersFile string `yaml:"users_file"`
}

// SASLUser is one account; Password may be empty when the user's SCRAM
// credentials are set with AlterUserScramCredentials (kafka-configs).
type SASLUser struct {
	Name        string           `yaml:"name"`
	Password    string           `yaml:"password"`
	Permissions []SASLPermission `yaml:"permissions"`
}

type SASLPermission struct {
	Operation   string `yaml:"operation"` // produce, consume or admin
	TopicPrefix string `yaml:"topic_prefix"`
	// GroupPrefix, set, makes it a permission on the consumer groups whose
	// id starts with it rather than on topics.
	GroupPrefix *string `yaml:"group_prefix,omitempty"`
}

// TLSConfig is a listener's certificate; set, the listener speaks only TLS.
type TLSConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, if set, requires clients to present a certificate it signed.
	ClientCAFile string `yaml:"client_ca_file"`
}

func (c SASLConfig) enabled() bool { return len(c.Mechanisms) > 0 }

// validateSecurity checks the kafka.sasl, kafka.tls, admin_tls and
// schema_registry.tls keys.
func (c *Config) validateSecurity() error {
	for name, t := range map[string]TLSConfig{"kafka.tls": c.Kafka.TLS, "admin_tls": c.AdminTLS, "schema_registry.tls": c.SchemaRegistry.TLS} {
		if (t.CertFile == "") != (t.KeyFile == "") {
			return fmt.Errorf("%s: cert_file and key_file go together", name)
		}
		if t.ClientCAFile != "" && t.CertFile == "" {
			return fmt.Errorf("%s.client_ca_file: needs cert_file and key_file", name)
		}
	}
	s := c.Kafka.SASL
	if !s.enabled() {
		if len(s.Users) > 0 || s.UsersFile != "" {
			return errors.New("kafka.sasl.users: set, but kafka.sasl.mechanisms is empty (no authentication)")
		}
		return nil
	}
	for _, m := range s.Mechanisms {
		switch m {
		case kafka.MechPlain, kafka.MechScramSHA256, kafka.MechScramSHA512:
		default:
			return fmt.Errorf("kafka.sasl.mechanisms: %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", m)
		}
	}
	users, err := s.allUsers()
	if err != nil {
		return err
	}
	if len(users) == 0 {
		return errors.New("kafka.sasl: mechanisms are enabled but no user is configured (kafka.sasl.users or users_file)")
	}
	if err := kafka.CheckUsers(users); err != nil {
		return fmt.Errorf("kafka.sasl.users: %w", err)
	}
	return nil
}

// allUsers is kafka.sasl.users followed by the users file's.
func (s SASLConfig) allUsers() ([]kafka.User, error) {
	all := s.Users
	if s.UsersFile != "" {
		raw, err := os.ReadFile(s.UsersFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.sasl.users_file: %w", err)
		}
		var f struct {
			Users []SASLUser `yaml:"users"`
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil {
			// Not the decoder's message: it may quote a line, password included.
			return nil, fmt.Errorf("kafka.sasl.users_file %s: not a YAML file with a users list of name, password, permissions", s.UsersFile)
		}
		all = append(append([]SASLUser{}, all...), f.Users...)
	}
	var out []kafka.User
	for _, u := range all {
		ku := kafka.User{Name: u.Name, Password: u.Password}
		for _, p := range u.Permissions {
			ku.Permissions = append(ku.Permissions, kafka.Permission{Operation: kafka.Operation(p.Operation), TopicPrefix: p.TopicPrefix, GroupPrefix: p.GroupPrefix})
		}
		out = append(out, ku)
	}
	return out, nil
}

// security is what run needs for authentication and TLS; every part is
// nil when off.
type security struct {
	auth                     *kafka.Auth
	kafkaTLS, admTLS, regTLS *certs
}

// openSecurity loads users and certificates, and reloads them on SIGHUP
// until ctx ends. SIGHUP never stops the service. In a cluster (etcd not
// nil) the SCRAM credentials set with AlterUserScramCredentials are the
// cluster's, in etcd: read before the node serves, then watched.
func openSecurity(ctx context.Context, cfg *Config, etcd *clientv3.Client, log *slog.Logger) (*security, error) {
	var sec security
	var err error
	if sec.kafkaTLS, err = loadCerts(cfg.Kafka.TLS); err != nil {
		return nil, fmt.Errorf("kafka.tls: %w", err)
	}
	if sec.admTLS, err = loadCerts(cfg.AdminTLS); err != nil {
		return nil, fmt.Errorf("admin_tls: %w", err)
	}
	if sec.regTLS, err = loadCerts(cfg.SchemaRegistry.TLS); err != nil {
		return nil, fmt.Errorf("schema_registry.tls: %w", err)
	}
	if cfg.Kafka.SASL.enabled() {
		users, err := cfg.Kafka.SASL.allUsers()
		if err != nil {
			return nil, err
		}
		ac := kafka.AuthConfig{Mechanisms: cfg.Kafka.SASL.Mechanisms, Users: users, CredentialsFile: filepath.Join(cfg.DataDir, "scram.json")}
		var creds *cluster.Credentials
		if etcd != nil {
			creds = cluster.NewCredentials(etcd, cfg.Cluster.EtcdPrefix, log)
			ac.Shared = creds
			if _, err := os.Stat(ac.CredentialsFile); err == nil {
				log.Warn("kafka.sasl: this node's scram.json is not read in a cluster, whose SCRAM credentials are in etcd; set them again with AlterUserScramCredentials", "file", ac.CredentialsFile)
			}
		}
		sec.auth, err = kafka.NewAuth(ac)
		if err != nil {
			return nil, fmt.Errorf("kafka.sasl: %w", err)
		}
		if creds != nil {
			all, rev, err := creds.List(ctx)
			if err != nil {
				return nil, fmt.Errorf("kafka.sasl: %w", err)
			}
			auth := sec.auth
			replace := func(all map[string]cluster.SharedCredential, rev int64) {
				m := map[string]kafka.SharedCredential{}
				for u, c := range all {
					m[u] = kafka.SharedCredential(c)
				}
				if err := auth.ReplaceShared(m, rev); err != nil {
					log.Error("kafka.sasl: SCRAM credentials in etcd skipped", "err", err)
				}
			}
			replace(all, rev)
			go creds.Watch(ctx, rev, replace, func(user string, value []byte, rev int64) {
				if applied, err := auth.UpdateShared(user, value, rev); err != nil {
					log.Error("kafka.sasl: a SCRAM credentials change in etcd skipped", "user", user, "err", err)
				} else if applied {
					log.Info("kafka.sasl: SCRAM credentials changed by the cluster", "user", user, "removed", value == nil)
				}
			})
		}
		log.Info("kafka authentication on", "mechanisms", cfg.Kafka.SASL.Mechanisms, "users", len(users))
		warnNoGroups(users, log)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				sec.reload(cfg, log)
			}
		}
	}()
	return &sec, nil
}

// reload re-reads certificates and the users file; a part that fails to
// load keeps its previous value.
func (sec *security) reload(cfg *Config, log *slog.Logger) {
	if sec.kafkaTLS == nil && sec.admTLS == nil && sec.regTLS == nil && cfg.Kafka.SASL.UsersFile == "" {
		log.Info("SIGHUP: nothing to reload (no kafka.tls, admin_tls, schema_registry.tls or kafka.sasl.users_file)")
		return
	}
	for name, c := range map[string]*certs{"kafka.tls": sec.kafkaTLS, "admin_tls": sec.admTLS, "schema_registry.tls": sec.regTLS} {
		if c == nil {
			continue
		}
		if err := c.load(); err != nil {
			log.Error("SIGHUP: certificate not reloaded, the previous one stays", "key", name, "err", err)
		} else {
			log.Info("SIGHUP: certificate reloaded", "key", name, "serial", c.serial())
		}
	}
	if sec.auth != nil && cfg.Kafka.SASL.UsersFile != "" {
		users, err := cfg.Kafka.SASL.allUsers()
		if err == nil {
			err = sec.auth.SetUsers(users)
		}
		if err != nil {
			log.Error("SIGHUP: users not reloaded, the previous ones stay", "err", err)
		} else {
			log.Info("SIGHUP: users reloaded", "users", len(users))
			warnNoGroups(users, log)
		}
	}
}

// certs is a listener's TLS configuration, swapped whole on reload so a
// handshake sees either the old certificate and CA or the new ones.
type certs struct {
	files TLSConfig
	cur   atomic.Pointer[tls.Config]
}

func loadCerts(files TLSConfig) (*certs, error) {
	if files.CertFile == "" {
		return nil, nil
	}
	c := &certs{files: files}
	return c, c.load()
}

func (c *certs) load() error {
	pair, err := tls.LoadX509KeyPair(c.files.CertFile, c.files.KeyFile)
	if err != nil {
		return err
	}
	conf := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if c.files.ClientCAFile != "" {
		pem, err := os.ReadFile(c.files.ClientCAFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("client_ca_file %s: no PEM certificate in it", c.files.ClientCAFile)
		}
		conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	c.cur.Store(conf)
	return nil
}

func (c *certs) serial() string {
	if leaf, err := x509.ParseCertificate(c.cur.Load().Certificates[0].Certificate[0]); err == nil {
		return leaf.SerialNumber.String()
	}
	return ""
}

func (c *certs) config() *tls.Config {
	return &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return c.cur.Load(), nil }}
}

// kafkaListener makes ln speak TLS when kafka.tls is set. A failed
// handshake (a plaintext client, an unknown client certificate) is logged,
// and the connection ends when the Kafka server reads from it.
func (sec *security) kafkaListener(ln net.Listener, log *slog.Logger) net.Listener {
	if sec.kafkaTLS == nil {
		return ln
	}
	return handshakeLogger{tls.NewListener(ln, sec.kafkaTLS.config()), log}
}

// adminListener makes ln speak TLS when admin_tls is set; net/http logs
// failed handshakes itself.
func (sec *security) adminListener(ln net.Listener) net.Listener {
	if sec.admTLS == nil {
		return ln
	}
	return tls.NewListener(ln, sec.admTLS.config())
}

// registryListener makes ln speak TLS when schema_registry.tls is set.
func (sec *security) registryListener(ln net.Listener) net.Listener {
	if sec.regTLS == nil {
		return ln
	}
	return tls.NewListener(ln, sec.regTLS.config())
}

// registryGuard asks the schema registry's clients for HTTP basic auth
// (what Confluent's clients send: basic.auth.user.info) when kafka.sasl is
// on, checked against the Kafka listener's users and passwords; a user who
// may sign in to Kafka may use the registry.
func (sec *security) registryGuard(next http.Handler) http.Handler {
	if sec.auth == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || !sec.auth.CheckPassword(user, pass) {
			w.Header().Set("WWW-Authenticate", `Basic realm="strata schema registry"`)
			w.Header().Set("Content-Type", httpapi.ContentType)
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"error_code":401,"message":"Unauthorized: the schema registry wants HTTP basic auth as a kafka.sasl user"}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type handshakeLogger struct {
	net.Listener
	log *slog.Logger
}

func (l handshakeLogger) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &loggedTLSConn{Conn: c.(*tls.Conn), log: l.log}, nil
}

type loggedTLSConn struct {
	*tls.Conn
	log  *slog.Logger
	once sync.Once
}

func (c *loggedTLSConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		// The handshake runs under the read deadline the server set.
		if err := c.Conn.Handshake(); err != nil {
			c.log.Info("kafka: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		}
	})
	return c.Conn.Read(b)
}

// httpsClient trusts the CA certificates in caFile (STRATA_ADMIN_CA), for
// the CLI's calls to an admin listener with admin_tls.
func httpsClient(caFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("STRATA_ADMIN_CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("STRATA_ADMIN_CA %s: no PEM certificate in it", caFile)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}

// peerOpts are how this node's client reaches the other nodes' Kafka
// listeners (a leader reading another node's part of a split log): TLS
// when the listener speaks it, presenting this node's certificate when
// clients must; SASL as cluster.peer_user when authentication is on.
func peerOpts(cfg *Config) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if t := cfg.Kafka.TLS; t.CertFile != "" {
		conf := &tls.Config{MinVersion: tls.VersionTLS12}
		if ca := cmp.Or(cfg.Cluster.PeerCAFile, t.ClientCAFile); ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return nil, fmt.Errorf("cluster.peer_ca_file: %w", err)
			}
			conf.RootCAs = x509.NewCertPool()
			if !conf.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("cluster.peer_ca_file %s: no PEM certificate in it", ca)
			}
		}
		if t.ClientCAFile != "" {
			pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("kafka.tls: %w", err)
			}
			conf.Certificates = []tls.Certificate{pair}
		}
		opts = append(opts, kgo.DialTLSConfig(conf))
	}
	if cfg.Kafka.SASL.enabled() {
		users, err := cfg.Kafka.SASL.allUsers()
		if err != nil {
			return nil, err
		}
		var pass string
		found := false
		for _, u := range users {
			if u.Name == cfg.Cluster.PeerUser {
				pass, found = u.Password, true
			}
		}
		if !found || pass == "" {
			return nil, fmt.Errorf("cluster.peer_user %q: not a kafka.sasl user with a password; a node signs in as it to read another node's part of a partition", cfg.Cluster.PeerUser)
		}
		mechs := cfg.Kafka.SASL.Mechanisms
		switch {
		case slices.Contains(mechs, "SCRAM-SHA-512"):
			opts = append(opts, kgo.SASL(scram.Auth{User: cfg.Cluster.PeerUser, Pass: pass}.AsSha512Mechanism()))
		case slices.Contains(mechs, "SCRAM-SHA-256"):
			opts = append(opts, kgo.SASL(scram.Auth{User: cfg.Cluster.PeerUser, Pass: pass}.AsSha256Mechanism()))
		default:
			opts = append(opts, kgo.SASL(plain.Auth{User: cfg.Cluster.PeerUser, Pass: pass}.AsMechanism()))
		}
	}
	return opts, nil
}

// warnNoGroups names the users who may consume topics but no consumer
// group: groups take permissions of their own (group_prefix), and a
// configuration written before they did gives its consumers none.
func warnNoGroups(users []kafka.User, log *slog.Logger) {
	for _, u := range users {
		consumes, groups := false, false
		for _, p := range u.Permissions {
			consumes = consumes || p.GroupPrefix == nil && p.Operation != kafka.OpProduce
			groups = groups || p.GroupPrefix != nil
		}
		if consumes && !groups && !slices.ContainsFunc(u.Permissions, func(p kafka.Permission) bool {
			return p.GroupPrefix == nil && p.Operation == kafka.OpAdmin && p.TopicPrefix == ""
		}) {
			log.Warn("kafka.sasl: a user who may consume topics has no group permission: its consumer groups are refused (add {operation: consume, group_prefix: ...})", "user", u.Name)
		}
	}
}
