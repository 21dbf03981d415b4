package typed

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"strata/registry/format"
)

// Schemas is the schema registry as a typed column asks it: a schema by
// id, a subject's versions (soft-deleted ones too: records of them are
// still in the topic) and its latest live one.
type Schemas interface {
	ByID(id int) (*format.Schema, error)
	Versions(subject string) ([]Version, error)
	Latest(subject string) (id int, s *format.Schema, err error)
}

// Version is one version of a subject: its schema id and schema.
type Version struct {
	ID     int
	Schema *format.Schema
}

// Start is what a column's type evolves from: the column as the topic's
// table holds it (Type set, with its ids), or nothing yet (Type nil), when
// the column's id is ID and its parts and error column are numbered after
// it.
type Start struct {
	Type    *Type
	ErrorID int // the table's error column's id, with Type
	Next    int // the first field id the table has not given, with Type
	ID      int // without Type
}

// A Column is one topic's typed column: its Type, evolved over every
// version of its subject, and how one raw value (or key) decodes to it.
type Column struct {
	Type Type
	// ErrorID is the field id of the column's error column.
	ErrorID int
	// Next is the first field id past the column's and the table's.
	Next int
	// Skipped are the subject's versions Type could not evolve to, with
	// why: their records keep their bytes, with the reason.
	Skipped map[int]error

	schemas Schemas
	fail    error // every value's error (Failing)
	mu      sync.Mutex
	byID    map[int]*schemaDecoders // the decoders of the ids seen
	latest  Decoder                 // decodes a value without the wire header (subject:NAME)
}

// schemaDecoders are one schema id's decoder, or why there is none: a
// Protobuf schema's by message. Each is made and checked against the
// column's type once, not per record.
type schemaDecoders struct {
	fd  *format.Schema
	one decoding // Avro and JSON Schema
	pb  map[string]decoding
}

type decoding struct {
	d   Decoder
	err error
}

// NewColumn is the column source (strata.value.schema: "schema_id" or
// "subject:NAME") makes of a topic's values: the subject's versions, in
// order, evolved from start (Evolve), the subject for schema_id being the
// topic's own (TopicNameStrategy's TOPIC-value, or TOPIC-key). A version
// whose schema the column cannot evolve to is left out (Skipped), so one
// incompatible version stops none of the others.
func NewColumn(source, topicSubject string, schemas Schemas, start Start) (*Column, error) {
	subject := topicSubject
	if name, ok := strings.CutPrefix(source, "subject:"); ok {
		subject = strings.TrimSpace(name)
	} else if source != "schema_id" {
		return nil, fmt.Errorf("typed column: source %q: want schema_id or subject:NAME", source)
	}
	versions, err := schemas.Versions(subject)
	if err != nil {
		return nil, fmt.Errorf("typed column: the versions of subject %s: %w", subject, err)
	}
	c := &Column{schemas: schemas, byID: map[int]*schemaDecoders{}, Skipped: map[int]error{}}
	has := start.Type != nil
	if has {
		c.Type, c.ErrorID, c.Next = clone(*start.Type), start.ErrorID, start.Next
	}
	for _, v := range versions {
		d, err := decoderOf(v.Schema)
		if err != nil {
			c.Skipped[v.ID] = fmt.Errorf("schema id %d (subject %s): %w", v.ID, subject, err)
			continue
		}
		t := d.Type()
		if !has {
			// The first version's columns, numbered as a new table's.
			t.ID = start.ID
			c.ErrorID = Number(&t, start.ID+1)
			c.Type, c.Next, has = t, c.ErrorID+1, true
			continue
		}
		evolved, next, err := Evolve(c.Type, t, c.Next)
		if err == nil {
			err = Check(evolved)
		}
		if err != nil {
			c.Skipped[v.ID] = fmt.Errorf("schema id %d (subject %s): %w", v.ID, subject, err)
			continue
		}
		c.Type, c.Next = evolved, next
	}
	if !has {
		return nil, fmt.Errorf("typed column: subject %s has no version a column can be made of: %w", subject, errors.Join(slices.Collect(maps.Values(c.Skipped))...))
	}
	// The column itself is null when a value does not decode.
	c.Type.Optional = true
	if source != "schema_id" {
		sid, s, err := schemas.Latest(subject)
		if err != nil {
			return nil, fmt.Errorf("typed column: the latest schema of subject %s: %w", subject, err)
		}
		d, err := decoderOf(s)
		if err == nil {
			err = c.checked(sid, d, nil).err
		}
		if err != nil {
			return nil, fmt.Errorf("typed column: schema id %d, subject %s's latest: %w", sid, subject, err)
		}
		c.latest = d
	}
	return c, nil
}

// Failing is a column of the table's type t that decodes nothing: every
// value's error is why (its subject has no schema now, or no registry is
// served). An object written with it carries the reason beside each
// record, and counts it, where leaving the column out would leave both
// null, as for a tombstone.
func Failing(t Type, errorID int, why error) *Column {
	return &Column{Type: t, ErrorID: errorID, fail: why}
}

// decoderOf is a decoder of s: for Protobuf, of the file's first
// message, as Confluent's serializers take a schema's message.
func decoderOf(s *format.Schema) (Decoder, error) {
	switch s.Type {
	case format.Avro:
		return NewAvroDecoder(s.Avro())
	case format.JSON:
		return NewJSONDecoder(s.JSON())
	}
	msgs := s.Protobuf().Messages()
	if msgs.Len() == 0 {
		return nil, fmt.Errorf("the Protobuf schema declares no message")
	}
	return NewProtobufDecoder(msgs.Get(0))
}

// Decode decodes one raw value: by the schema its wire header names, or,
// for subject:NAME, a value without the header by NAME's latest version.
// A value of a schema the column has not evolved to (another subject's,
// or an incompatible version) is an error: it keeps its bytes.
func (c *Column) Decode(raw []byte) (any, error) {
	if c.fail != nil {
		return nil, c.fail
	}
	id, payload, err := Header(raw)
	if err != nil {
		if c.latest == nil {
			return nil, err
		}
		return c.latest.Decode(raw)
	}
	d, err := c.decoder(int(id), &payload)
	if err != nil {
		if c.latest != nil {
			// A headerless value may start with a zero byte: NAME's
			// latest version may read it.
			if v, lerr := c.latest.Decode(raw); lerr == nil {
				return v, nil
			}
		}
		return nil, err
	}
	return d.Decode(payload)
}

// checked is a decoder of schema id if the column takes its values.
func (c *Column) checked(id int, d Decoder, err error) decoding {
	if skipped, ok := c.Skipped[id]; ok && err == nil {
		return decoding{err: skipped}
	}
	if err != nil {
		return decoding{err: fmt.Errorf("schema id %d: %w", id, err)}
	}
	if !Covers(c.Type, d.Type()) {
		_, _, why := Evolve(c.Type, d.Type(), c.Next)
		if why == nil {
			why = fmt.Errorf("its columns %s are not yet the table's", d.Type())
		}
		return decoding{err: fmt.Errorf("schema id %d is not a version the column was evolved to: %w", id, why)}
	}
	return decoding{d: d}
}

// decoder is the decoder of schema id, for Protobuf of the message the
// payload's indexes name (payload then starts after them).
func (c *Column) decoder(id int, payload *[]byte) (Decoder, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[id]
	if !ok {
		e = &schemaDecoders{pb: map[string]decoding{}}
		fd, err := c.schemas.ByID(id)
		if err == nil && fd.Type == format.Protobuf {
			e.fd = fd
		} else {
			var d Decoder
			if err == nil {
				d, err = decoderOf(fd)
			}
			e.one = c.checked(id, d, err)
		}
		c.byID[id] = e
	}
	if e.fd == nil {
		return e.one.d, e.one.err
	}
	md, rest, err := MessageIndexes(e.fd.Protobuf(), *payload)
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	*payload = rest
	name := string(md.FullName())
	dec, ok := e.pb[name]
	if !ok {
		d, err := NewProtobufDecoder(md)
		if err != nil {
			err = fmt.Errorf("message %s: %w", name, err)
		}
		dec = c.checked(id, d, err)
		if first := e.fd.Protobuf().Messages().Get(0).FullName(); dec.err != nil && string(first) != name {
			// The column is the schema's first message's.
			dec.err = fmt.Errorf("schema id %d: the value is a %s, and the column is made of the schema's first message, %s", id, name, first)
		}
		e.pb[name] = dec
	}
	return dec.d, dec.err
}
