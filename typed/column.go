package typed

import (
	"fmt"
	"strings"
	"sync"

	"strata/registry/format"
)

// Schemas is the schema registry as a typed column asks it: a schema by
// id, a subject's latest version.
type Schemas interface {
	ByID(id int) (*format.Schema, error)
	Latest(subject string) (id int, s *format.Schema, err error)
}

// A Column is one topic's typed column: its Type, numbered from the
// field id it was given, and how one raw value (or key) decodes to it.
type Column struct {
	Type Type
	// ID is the schema id whose columns Type is.
	ID int
	// Next is the first field id past Type's.
	Next int

	schemas Schemas
	typ     string // Type as a string, what a schema's type is checked against
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
// "subject:NAME") makes of a topic's values: its columns those of the
// latest version of NAME, or for schema_id of the topic's own subject
// (TopicNameStrategy's TOPIC-value, or TOPIC-key), given field ids from
// id on.
func NewColumn(source, topicSubject string, schemas Schemas, id int) (*Column, error) {
	subject := topicSubject
	if name, ok := strings.CutPrefix(source, "subject:"); ok {
		subject = strings.TrimSpace(name)
	} else if source != "schema_id" {
		return nil, fmt.Errorf("typed column: source %q: want schema_id or subject:NAME", source)
	}
	sid, s, err := schemas.Latest(subject)
	if err != nil {
		return nil, fmt.Errorf("typed column: the latest schema of subject %s: %w", subject, err)
	}
	d, err := decoderOf(s)
	if err != nil {
		return nil, fmt.Errorf("typed column: schema id %d (subject %s): %w", sid, subject, err)
	}
	t := d.Type()
	t.ID = id
	c := &Column{ID: sid, Next: Number(&t, id+1), schemas: schemas, typ: t.String(), byID: map[int]*schemaDecoders{}}
	c.Type = t
	if source != "schema_id" {
		c.latest = d
	}
	return c, nil
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
// A value whose schema has other columns than the column's is an error:
// it keeps its bytes until schema evolution widens the column.
func (c *Column) Decode(raw []byte) (any, error) {
	id, payload, err := Header(raw)
	if err != nil {
		if c.latest == nil {
			return nil, err
		}
		return c.latest.Decode(raw)
	}
	d, err := c.decoder(int(id), &payload)
	if err != nil {
		return nil, err
	}
	return d.Decode(payload)
}

// checked is a decoder of schema id if its type is the column's.
func (c *Column) checked(id int, d Decoder, err error) decoding {
	if err != nil {
		return decoding{err: fmt.Errorf("schema id %d: %w", id, err)}
	}
	if got := d.Type().String(); got != c.typ {
		return decoding{err: fmt.Errorf("schema id %d has other columns than the table's (schema id %d): %s, not %s", id, c.ID, got, c.typ)}
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
		e.pb[name] = dec
	}
	return dec.d, dec.err
}
