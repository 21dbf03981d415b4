package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"strata/registry/format"
	"strata/typed"
)

// externalRegistry is a Schema Registry strata does not serve
// (schema_registry.url: Confluent's, Redpanda's, another strata's): the
// typed columns decode by its schemas (typed.Schemas) and produce
// validation asks it (kafka.SchemaChecker), through its REST API, with
// franz-go's client. A schema never changes under its id, so each id is
// fetched and parsed once.
type externalRegistry struct {
	url string // without the password
	cl  *sr.Client

	mu    sync.Mutex
	byID  map[int]*format.Schema
	known map[checked]time.Time // subject and id found registered, when
	// downUntil: the registry did not answer (downErr); asked again after.
	downUntil time.Time
	downErr   error
}

type checked struct {
	subject string
	id      int
}

// checkedFor is how long a subject's id found registered is taken as
// such by produce validation, without asking again.
const checkedFor = time.Minute

// openExternalRegistry is the client of the registry at rawURL; its
// user and password, if any, are sent as HTTP basic auth, as Confluent's
// clients send them.
func openExternalRegistry(rawURL string) (*externalRegistry, error) {
	u, err := registryURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts := []sr.ClientOpt{}
	if u.User != nil {
		pass, _ := u.User.Password()
		opts = append(opts, sr.BasicAuth(u.User.Username(), pass))
		u.User = nil
	}
	cl, err := sr.NewClient(append(opts, sr.URLs(u.String()))...)
	if err != nil {
		return nil, fmt.Errorf("schema_registry.url: %w", err)
	}
	return &externalRegistry{url: u.String(), cl: cl, byID: map[int]*format.Schema{}, known: map[checked]time.Time{}}, nil
}

// registryURL checks schema_registry.url; its error never shows the
// password.
func registryURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	bad := func(why string) (*url.URL, error) {
		shown := "(unparsable)"
		if err == nil {
			shown = u.Redacted()
		}
		return nil, fmt.Errorf("schema_registry.url %s: %s; want http(s)://HOST:PORT[/path], user:password@ in it for basic auth", shown, why)
	}
	switch {
	case err != nil:
		return bad("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return bad(fmt.Sprintf("scheme %q", u.Scheme))
	case u.Hostname() == "":
		return bad("no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad(fmt.Sprintf("port %q", p))
		}
	}
	return u, nil
}

// downFor is how long a registry that did not answer is taken as down,
// so a run's uploads of one topic do not each wait out the timeout.
const downFor = 30 * time.Second

// down is the error of the registry's last failure to answer, if within
// downFor.
func (e *externalRegistry) down() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if time.Now().Before(e.downUntil) {
		return e.downErr
	}
	return nil
}

// failed notes err, if the registry did not answer (not an answer that
// something is not there).
func (e *externalRegistry) failed(err error) error {
	var re *sr.ResponseError
	if err != nil && !errors.As(err, &re) {
		e.mu.Lock()
		e.downUntil, e.downErr = time.Now().Add(downFor), fmt.Errorf("%w (taken as down for %s)", err, downFor)
		e.mu.Unlock()
	}
	return err
}

func (e *externalRegistry) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func (e *externalRegistry) wrap(err error) error {
	return fmt.Errorf("the schema registry at %s: %w", e.url, e.failed(err))
}

// ByID is the schema of an id, with what it references.
func (e *externalRegistry) ByID(id int) (*format.Schema, error) {
	e.mu.Lock()
	p, ok := e.byID[id]
	e.mu.Unlock()
	if ok {
		return p, nil
	}
	if err := e.down(); err != nil {
		return nil, err
	}
	ctx, cancel := e.ctx()
	defer cancel()
	s, err := e.cl.SchemaByID(ctx, id)
	if err != nil {
		return nil, e.wrap(err)
	}
	if p, err = e.parse(ctx, s); err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	e.mu.Lock()
	e.byID[id] = p
	e.mu.Unlock()
	return p, nil
}

// Versions are a subject's versions, soft-deleted ones too (their records
// are still in the topic), in order.
func (e *externalRegistry) Versions(subject string) ([]typed.Version, error) {
	if err := e.down(); err != nil {
		return nil, err
	}
	ctx, cancel := e.ctx()
	defer cancel()
	ctx = sr.WithParams(ctx, sr.ShowDeleted)
	ns, err := e.cl.SubjectVersions(ctx, subject)
	if err != nil {
		return nil, e.wrap(err)
	}
	slices.Sort(ns)
	var out []typed.Version
	for _, n := range ns {
		ss, err := e.cl.SchemaByVersion(ctx, subject, n)
		if err != nil {
			return nil, e.wrap(err)
		}
		p, err := e.ByID(ss.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, typed.Version{ID: ss.ID, Schema: p})
	}
	return out, nil
}

// Latest is a subject's latest live version.
func (e *externalRegistry) Latest(subject string) (int, *format.Schema, error) {
	if err := e.down(); err != nil {
		return 0, nil, err
	}
	ctx, cancel := e.ctx()
	defer cancel()
	ss, err := e.cl.SchemaByVersion(ctx, subject, -1)
	if err != nil {
		return 0, nil, e.wrap(err)
	}
	p, err := e.ByID(ss.ID)
	return ss.ID, p, err
}

// CheckWireHeader is strata.value.schema.validation's question: does the
// value start with the wire header of a schema a live version of subject
// names.
func (e *externalRegistry) CheckWireHeader(subject string, value []byte) error {
	if len(value) < 5 || value[0] != 0 {
		return fmt.Errorf("its value does not start with the schema registry's wire header (magic byte 0, then a 4-byte schema id)")
	}
	id := int(int32(binary.BigEndian.Uint32(value[1:5])))
	key := checked{subject, id}
	e.mu.Lock()
	at, ok := e.known[key]
	e.mu.Unlock()
	if ok && time.Since(at) < checkedFor {
		return nil
	}
	if err := e.down(); err != nil {
		return fmt.Errorf("its value names schema id %d, which %w", id, err)
	}
	ctx, cancel := e.ctx()
	defer cancel()
	svs, err := e.cl.SchemaVersionsByID(ctx, id)
	if err != nil {
		return fmt.Errorf("its value names schema id %d, which %w", id, e.wrap(err))
	}
	if !slices.ContainsFunc(svs, func(sv sr.SubjectVersion) bool { return sv.Subject == subject }) {
		return fmt.Errorf("its value names schema id %d, which is not registered under subject %s", id, subject)
	}
	e.mu.Lock()
	e.known[key] = time.Now()
	e.mu.Unlock()
	return nil
}

// parse parses a fetched schema with the schemas it references, each
// after what it references itself.
func (e *externalRegistry) parse(ctx context.Context, s sr.Schema) (*format.Schema, error) {
	t, err := format.ParseType(s.Type.String())
	if err != nil {
		return nil, err
	}
	var refs []format.Ref
	if err := e.refTexts(ctx, s.References, 0, map[string]bool{}, &refs); err != nil {
		return nil, err
	}
	return format.Parse(t, s.Schema, refs)
}

func (e *externalRegistry) refTexts(ctx context.Context, refs []sr.SchemaReference, depth int, seen map[string]bool, out *[]format.Ref) error {
	if depth > 32 {
		return fmt.Errorf("references nest deeper than 32")
	}
	for _, r := range refs {
		if seen[r.Name] {
			continue
		}
		seen[r.Name] = true
		ss, err := e.cl.SchemaByVersion(sr.WithParams(ctx, sr.ShowDeleted), r.Subject, r.Version)
		if err != nil {
			return fmt.Errorf("reference %q: subject %q version %d: %w", r.Name, r.Subject, r.Version, e.wrap(err))
		}
		if err := e.refTexts(ctx, ss.References, depth+1, seen, out); err != nil {
			return err
		}
		*out = append(*out, format.Ref{Name: r.Name, Text: ss.Schema.Schema})
	}
	return nil
}
