package kafka

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/xdg-go/scram"
)

// SASL mechanisms strata accepts.
const (
	MechPlain       = "PLAIN"
	MechScramSHA256 = "SCRAM-SHA-256"
	MechScramSHA512 = "SCRAM-SHA-512"
)

// Kafka's SCRAM limits (ScramMechanism.minIterations/maxIterations).
const (
	minScramIterations = 4096
	maxScramIterations = 16384
)

// Operation is what a permission lets a user do on the topics (or the
// groups) it covers.
type Operation string

const (
	OpProduce Operation = "produce" // Produce, InitProducerId
	OpConsume Operation = "consume" // Fetch, ListOffsets, OffsetForLeaderEpoch, offsets; on groups: Kafka's READ and DESCRIBE
	OpAdmin   Operation = "admin"   // CreateTopics, DeleteTopics, DeleteRecords; with prefix "": SCRAM users and every group; on groups: DELETE too. Implies produce and consume.
)

// Permission allows one operation on every topic whose name starts with
// TopicPrefix ("" is every topic, and the cluster for admin) or, when
// GroupPrefix is set, on every consumer group whose id starts with it
// instead, as Kafka's GROUP resources: a group is not named by topic, so
// reading a topic does not let a user into another tenant's group.
type Permission struct {
	Operation   Operation `yaml:"operation" json:"operation"`
	TopicPrefix string    `yaml:"topic_prefix" json:"topic_prefix"`
	GroupPrefix *string   `yaml:"group_prefix,omitempty" json:"group_prefix,omitempty"`
}

// User is an account from the configuration. Password may be empty: the
// user's SCRAM credentials are then set with AlterUserScramCredentials.
type User struct {
	Name        string       `yaml:"name"`
	Password    string       `yaml:"password"`
	Permissions []Permission `yaml:"permissions"`
}

// AuthConfig turns on SASL authentication and authorization.
type AuthConfig struct {
	// Mechanisms a client may use: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.
	Mechanisms []string
	Users      []User
	// CredentialsFile keeps the SCRAM credentials set with
	// AlterUserScramCredentials across restarts; "" keeps them in memory.
	CredentialsFile string
	// Shared, set in a cluster, keeps them where every node reads them
	// instead (CredentialsFile is then unused): a change is saved there
	// before it is acknowledged, and each node applies the changes it
	// watches with ReplaceShared and UpdateShared.
	Shared CredentialStore
}

// CredentialStore keeps the SCRAM credentials AlterUserScramCredentials
// sets where every node of a cluster reads them (docs/cluster.md).
type CredentialStore interface {
	// Save writes each named user's credentials (nil: the user has none
	// left), all or none, and returns the revision they were written at.
	Save(users map[string][]byte) (rev int64, err error)
}

// Bounds of what AlterUserScramCredentials keeps: a cluster keeps each
// user's credentials as one etcd value.
const (
	maxScramUserBytes = 1024
	maxScramSaltBytes = 1024
)

// scramMechs maps Kafka's mechanism numbers (AlterUserScramCredentials)
// to names and hashes.
var scramMechs = map[int8]struct {
	name string
	hash scram.HashGeneratorFcn
}{
	1: {MechScramSHA256, scram.SHA256},
	2: {MechScramSHA512, scram.SHA512},
}

func scramHash(mech string) scram.HashGeneratorFcn {
	for _, m := range scramMechs {
		if m.name == mech {
			return m.hash
		}
	}
	return nil
}

func scramMechNumber(mech string) int8 {
	for n, m := range scramMechs {
		if m.name == mech {
			return n
		}
	}
	return 0
}

// storedCred is one user's SCRAM credential for one mechanism, as kept on
// disk. Deleted marks a credential from the configuration that
// AlterUserScramCredentials removed, so it stays removed after a restart.
type storedCred struct {
	Salt       []byte `json:"salt,omitempty"`
	Iterations int    `json:"iterations,omitempty"`
	StoredKey  []byte `json:"stored_key,omitempty"`
	ServerKey  []byte `json:"server_key,omitempty"`
	Deleted    bool   `json:"deleted,omitempty"`
}

func (c storedCred) scram() scram.StoredCredentials {
	return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(c.Salt), Iters: c.Iterations},
		StoredKey: c.StoredKey, ServerKey: c.ServerKey}
}

// Auth holds the users, their permissions and their credentials. It is
// safe for concurrent use; SetUsers swaps the configured users in place
// (a SIGHUP re-reading the users file).
type Auth struct {
	mechanisms []string
	file       string

	mu sync.RWMutex
	// from the configuration: permissions, and SCRAM credentials derived
	// from the password at load (the password itself is not kept)
	perms  map[string][]Permission
	config map[string]map[string]storedCred
	// set through AlterUserScramCredentials (persisted in file, or
	// shared): they win over the configuration's
	altered map[string]map[string]storedCred
	shared  CredentialStore
	alterMu sync.Mutex // one alterShared at a time
	// revs is, with shared, the revision each user's altered credentials
	// (or their removal) were written at, so a watched change older than
	// one this node saved itself is not applied over it.
	revs map[string]int64
	// verified spares CheckPassword the key derivation for a password it
	// verified before; derivations counts those it did make (tests).
	verified    passwordCache
	derivations atomic.Int64
}

// NewAuth checks cfg, derives the configured users' credentials and reads
// the credentials file.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	if len(cfg.Mechanisms) == 0 {
		return nil, errors.New("no SASL mechanism enabled")
	}
	for _, m := range cfg.Mechanisms {
		if m != MechPlain && scramHash(m) == nil {
			return nil, fmt.Errorf("SASL mechanism %q: want %s, %s or %s", m, MechPlain, MechScramSHA256, MechScramSHA512)
		}
	}
	a := &Auth{mechanisms: slices.Clone(cfg.Mechanisms), file: cfg.CredentialsFile, altered: map[string]map[string]storedCred{},
		shared: cfg.Shared, revs: map[string]int64{}}
	if err := a.SetUsers(cfg.Users); err != nil {
		return nil, err
	}
	if a.shared != nil {
		a.file = ""
	}
	if a.file != "" {
		raw, err := os.ReadFile(a.file)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			if err := json.Unmarshal(raw, &a.altered); err != nil {
				return nil, fmt.Errorf("SCRAM credentials file %s: %w", a.file, err)
			}
		}
	}
	return a, nil
}

// CheckUsers reports the first problem in a users list.
func CheckUsers(users []User) error {
	seen := map[string]bool{}
	for i, u := range users {
		if u.Name == "" {
			return fmt.Errorf("user %d: empty name", i)
		}
		if seen[u.Name] {
			return fmt.Errorf("user %q: listed twice", u.Name)
		}
		seen[u.Name] = true
		for _, p := range u.Permissions {
			switch p.Operation {
			case OpProduce, OpConsume, OpAdmin:
			default:
				return fmt.Errorf("user %q: operation %q: want produce, consume or admin", u.Name, p.Operation)
			}
			switch {
			case p.GroupPrefix != nil && p.TopicPrefix != "":
				return fmt.Errorf("user %q: a permission names both topic_prefix and group_prefix: give each its own", u.Name)
			case p.GroupPrefix != nil && p.Operation == OpProduce:
				return fmt.Errorf("user %q: group_prefix %q: groups take consume or admin, not produce", u.Name, *p.GroupPrefix)
			}
		}
	}
	return nil
}

// SetUsers replaces the configured users. Each password becomes SCRAM
// credentials for both hashes (with a fresh salt); PLAIN logins are checked
// against them too, so no password stays in memory.
func (a *Auth) SetUsers(users []User) error {
	if err := CheckUsers(users); err != nil {
		return err
	}
	perms := map[string][]Permission{}
	config := map[string]map[string]storedCred{}
	for _, u := range users {
		perms[u.Name] = slices.Clone(u.Permissions)
		if u.Password == "" {
			continue
		}
		config[u.Name] = map[string]storedCred{}
		for _, m := range scramMechs {
			c, err := deriveCred(m.hash, u.Password, minScramIterations)
			if err != nil {
				return fmt.Errorf("user %q: %w", u.Name, err)
			}
			config[u.Name][m.name] = c
		}
	}
	a.mu.Lock()
	a.perms, a.config = perms, config
	a.mu.Unlock()
	return nil
}

func deriveCred(h scram.HashGeneratorFcn, password string, iters int) (storedCred, error) {
	salt := make([]byte, 24)
	rand.Read(salt)
	// Unprepped, as Kafka's ScramFormatter: its clients salt the raw bytes.
	cl, err := h.NewClientUnprepped("", password, "")
	if err != nil {
		return storedCred{}, err
	}
	sc, err := cl.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iters})
	if err != nil {
		return storedCred{}, err
	}
	return storedCred{Salt: salt, Iterations: iters, StoredKey: sc.StoredKey, ServerKey: sc.ServerKey}, nil
}

// credential is the user's SCRAM credential for mech, if any.
func (a *Auth) credential(user, mech string) (storedCred, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if c, ok := a.altered[user][mech]; ok {
		return c, !c.Deleted
	}
	c, ok := a.config[user][mech]
	return c, ok
}

// CheckPassword verifies a PLAIN login against the user's SCRAM
// credential (SHA-256 first): the same password works for every mechanism,
// and for the schema registry's HTTP basic auth. Deriving the key costs
// PBKDF2 (4096 rounds or more), which an HTTP client paying it on every
// request feels; so a password that passed is remembered (verified) and
// a later check of it costs none, while the credential it passed against
// is still the user's. A wrong password is never remembered: it always
// costs the derivation.
func (a *Auth) CheckPassword(user, password string) bool {
	for _, mech := range []string{MechScramSHA256, MechScramSHA512} {
		c, ok := a.credential(user, mech)
		if !ok {
			continue
		}
		if a.verified.holds(user, mech, c, password) {
			return true
		}
		a.derivations.Add(1)
		cl, err := scramHash(mech).NewClientUnprepped(user, password, "")
		if err != nil {
			return false
		}
		sc, err := cl.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(c.Salt), Iters: c.Iterations})
		if err != nil || !hmac.Equal(sc.StoredKey, c.StoredKey) {
			return false
		}
		a.verified.remember(user, mech, c, password)
		return true
	}
	return false
}

// passwordCache remembers, per user, the last password CheckPassword
// verified and the credential it verified it against. An entry holds only
// while that credential is still the user's: a password changed in the
// users file (SetUsers derives it with a fresh salt), through
// AlterUserScramCredentials or on another node (shared), or removed, is a
// new stored key or none, so the old password is derived again and
// refused; nothing needs to invalidate the cache by hand. The password is
// kept only as an HMAC under a random key of this process's, never as
// itself. The price: someone who reads the process's memory gets that key
// too and could test guesses at HMAC speed instead of PBKDF2's.
type passwordCache struct {
	once sync.Once
	key  []byte
	mu   sync.Mutex
	m    map[string]verifiedPassword
}

type verifiedPassword struct {
	mech      string
	storedKey []byte
	mac       []byte
}

func (p *passwordCache) mac(password string) []byte {
	p.once.Do(func() {
		p.key = make([]byte, 32)
		rand.Read(p.key)
	})
	h := hmac.New(sha256.New, p.key)
	h.Write([]byte(password))
	return h.Sum(nil)
}

func (p *passwordCache) holds(user, mech string, c storedCred, password string) bool {
	p.mu.Lock()
	v, ok := p.m[user]
	p.mu.Unlock()
	return ok && v.mech == mech && hmac.Equal(v.storedKey, c.StoredKey) && hmac.Equal(v.mac, p.mac(password))
}

// remember keeps one entry per user (its last good password), so the
// cache is bounded by the users configured.
func (p *passwordCache) remember(user, mech string, c storedCred, password string) {
	v := verifiedPassword{mech: mech, storedKey: slices.Clone(c.StoredKey), mac: p.mac(password)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]verifiedPassword{}
	}
	p.m[user] = v
}

func (a *Auth) permissions(user string) perms {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.perms[user]
}

func (a *Auth) enabled(mech string) bool { return slices.Contains(a.mechanisms, mech) }

// perms is one user's permission list.
type perms []Permission

// allows says whether op on topic is permitted; admin implies the others.
func (ps perms) allows(op Operation, topic string) bool {
	for _, p := range ps {
		if p.GroupPrefix == nil && (p.Operation == op || p.Operation == OpAdmin) && strings.HasPrefix(topic, p.TopicPrefix) {
			return true
		}
	}
	return false
}

// any says whether op is permitted on some topic: producer ids are not
// named by topic, so any produce permission covers them.
func (ps perms) any(op Operation) bool {
	for _, p := range ps {
		if p.GroupPrefix == nil && (p.Operation == op || p.Operation == OpAdmin) {
			return true
		}
	}
	return false
}

// group says whether op on group is permitted: consume is Kafka's READ
// on the group (join, sync, heartbeat, leave, commit) and DESCRIBE
// (coordinator, offsets, describe, list); admin adds DELETE. The
// cluster's administrator (admin on every topic) has every group, as
// Kafka's super users do.
func (ps perms) group(op Operation, group string) bool {
	for _, p := range ps {
		if p.GroupPrefix != nil && (p.Operation == op || p.Operation == OpAdmin) && strings.HasPrefix(group, *p.GroupPrefix) {
			return true
		}
	}
	return ps.cluster()
}

// cluster says whether the user administers the whole cluster (admin on
// every topic), which SCRAM user management needs.
func (ps perms) cluster() bool { return ps.allows(OpAdmin, "") }

// users lists everyone with a SCRAM credential, and their credentials.
func (a *Auth) scramUsers() map[string]map[string]storedCred {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := map[string]map[string]storedCred{}
	for _, src := range []map[string]map[string]storedCred{a.config, a.altered} {
		for u, creds := range src {
			for m, c := range creds {
				if out[u] == nil {
					out[u] = map[string]storedCred{}
				}
				out[u][m] = c
			}
		}
	}
	for u, creds := range out {
		for m, c := range creds {
			if c.Deleted {
				delete(creds, m)
			}
		}
		if len(creds) == 0 {
			delete(out, u)
		}
	}
	return out
}

// alter applies AlterUserScramCredentials changes (user -> mechanism ->
// credential, Deleted for a removal) and persists them before they count.
func (a *Auth) alter(changes map[string]map[string]storedCred) error {
	if a.shared != nil {
		return a.alterShared(changes)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	next := a.merged(changes)
	if a.file != "" {
		raw, err := json.MarshalIndent(next, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFileSynced(a.file, raw); err != nil {
			return err
		}
	}
	a.altered = next
	return nil
}

// merged is the altered credentials with changes applied. Under mu.
func (a *Auth) merged(changes map[string]map[string]storedCred) map[string]map[string]storedCred {
	next := map[string]map[string]storedCred{}
	for u, creds := range a.altered {
		next[u] = map[string]storedCred{}
		for m, c := range creds {
			next[u][m] = c
		}
	}
	for u, creds := range changes {
		if next[u] == nil {
			next[u] = map[string]storedCred{}
		}
		for m, c := range creds {
			if c.Deleted && a.config[u][m].StoredKey == nil {
				delete(next[u], m) // nothing from the configuration to hide
				continue
			}
			next[u][m] = c
		}
		if len(next[u]) == 0 {
			delete(next, u)
		}
	}
	return next
}

// alterShared saves the changed users' credentials in the shared store,
// then applies them here; every other node applies them from its watch.
// Logins go on meanwhile: mu is not held while the store is written.
func (a *Auth) alterShared(changes map[string]map[string]storedCred) error {
	a.alterMu.Lock()
	defer a.alterMu.Unlock()
	a.mu.RLock()
	next := a.merged(changes)
	a.mu.RUnlock()
	users := map[string][]byte{}
	for u := range changes {
		var v []byte
		if len(next[u]) > 0 {
			v, _ = json.Marshal(next[u])
		}
		users[u] = v
	}
	rev, err := a.shared.Save(users)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for u := range changes {
		if a.revs[u] >= rev {
			continue // a newer change was watched meanwhile
		}
		a.revs[u] = rev
		if len(next[u]) == 0 {
			delete(a.altered, u)
		} else {
			a.altered[u] = next[u]
		}
	}
	return nil
}

// SharedCredential is one user's credentials as a CredentialStore keeps
// them, and the revision they were written at.
type SharedCredential struct {
	Value []byte
	Rev   int64
}

// ReplaceShared sets the credentials AlterUserScramCredentials set to
// what the CredentialStore held at rev: every user's, as listed at start
// or when a watch is lost. A user this node changed after rev keeps its
// change. A value that cannot be read is skipped and reported; the others
// apply.
func (a *Auth) ReplaceShared(all map[string]SharedCredential, rev int64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	next := map[string]map[string]storedCred{}
	revs := map[string]int64{}
	var errs []error
	for u, c := range all {
		creds, err := decodeShared(c.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("SCRAM credentials of user %q: %w", u, err))
			continue
		}
		next[u], revs[u] = creds, c.Rev
	}
	for u, r := range a.revs {
		if r > rev { // saved here after the list was read
			next[u], revs[u] = a.altered[u], r
			if next[u] == nil {
				delete(next, u)
			}
		}
	}
	a.altered, a.revs = next, revs
	return errors.Join(errs...)
}

// UpdateShared applies one watched change of a user's credentials,
// written at rev (value nil: removed), unless this node holds it already
// or a newer one; it says whether it applied it.
func (a *Auth) UpdateShared(user string, value []byte, rev int64) (bool, error) {
	creds, err := decodeShared(value)
	if err != nil {
		return false, fmt.Errorf("SCRAM credentials of user %q: %w", user, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.revs[user] >= rev {
		return false, nil
	}
	a.revs[user] = rev
	if len(creds) == 0 {
		delete(a.altered, user)
	} else {
		a.altered[user] = creds
	}
	return true, nil
}

func decodeShared(v []byte) (map[string]storedCred, error) {
	if len(v) == 0 {
		return nil, nil
	}
	var creds map[string]storedCred
	if err := json.Unmarshal(v, &creds); err != nil {
		return nil, err
	}
	for m := range creds {
		if scramHash(m) == nil {
			return nil, fmt.Errorf("unknown mechanism %q", m)
		}
	}
	return creds, nil
}

// writeFileSynced replaces path atomically and durably: a temporary file,
// fsynced, renamed over it, and the folder fsynced.
func writeFileSynced(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
