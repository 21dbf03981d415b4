package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/url"
	"slices"
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
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("schema_registry.url %q: want http(s)://HOST:PORT[/path], a user and password in it for basic auth", rawURL)
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

func (e *externalRegistry) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func (e *externalRegistry) wrap(err error) error {
	return fmt.Errorf("the schema registry at %s: %w", e.url, err)
}

// ByID is the schema of an id, with what it references.
func (e *externalRegistry) ByID(id int) (*format.Schema, error) {
	e.mu.Lock()
	p, ok := e.byID[id]
	e.mu.Unlock()
	if ok {
		return p, nil
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
