package registry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"strata/registry/format"
)

// SchemaByID is the schema an id names, while some version names it.
func (s *State) SchemaByID(id int) (Schema, error) {
	rec, ok := s.schemas[id]
	if !ok {
		return Schema{}, errSchemaIDNotFound(id)
	}
	return rec.Schema, nil
}

// Parsed is sc parsed with its references, as compatibility checks
// parse it: what a consumer of the schema decodes with.
func (s *State) Parsed(sc Schema) (*format.Schema, error) { return s.parse(sc) }

// VersionsByID are the subjects' versions that name an id, by subject.
func (s *State) VersionsByID(id int, deleted bool) ([]SubjectVersion, error) {
	if _, ok := s.schemas[id]; !ok {
		return nil, errSchemaIDNotFound(id)
	}
	out := []SubjectVersion{}
	for _, subject := range slices.Sorted(maps.Keys(s.subjects)) {
		for _, v := range s.subjects[subject] {
			if v.ID == id && (deleted || !v.Deleted) {
				out = append(out, SubjectVersion{subject, v.Version})
			}
		}
	}
	return out, nil
}

// SubjectsByID are the subjects with a version that names an id.
func (s *State) SubjectsByID(id int, deleted bool) ([]string, error) {
	vs, err := s.VersionsByID(id, deleted)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, v := range vs {
		if len(out) == 0 || out[len(out)-1] != v.Subject {
			out = append(out, v.Subject)
		}
	}
	return out, nil
}

// Subjects are the subjects with a live version (with deleted, a
// soft-deleted one too), in name order.
func (s *State) Subjects(deleted bool) []string {
	out := []string{}
	for _, subject := range slices.Sorted(maps.Keys(s.subjects)) {
		if deleted || len(s.live(subject)) > 0 {
			out = append(out, subject)
		}
	}
	return out
}

// Versions are a subject's version numbers, in order.
func (s *State) Versions(subject string, deleted bool) ([]int, error) {
	vs, err := s.visible(subject, deleted)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(vs))
	for i, v := range vs {
		out[i] = v.Version
	}
	return out, nil
}

// Version is one version of a subject (Latest: its latest).
func (s *State) Version(subject string, version int, deleted bool) (SubjectSchema, error) {
	v, err := s.find(subject, version, deleted)
	if err != nil {
		return SubjectSchema{}, err
	}
	return s.subjectSchema(v), nil
}

// ReferencedBy are the ids of the schemas that reference a version.
func (s *State) ReferencedBy(subject string, version int) ([]int, error) {
	v, err := s.find(subject, version, false)
	if err != nil {
		return nil, err
	}
	return append([]int{}, s.referrers(subject, v.Version)...), nil
}

// HasID says whether a live version of the subject names the id: what a
// produce with schema validation asks of a record's schema id.
func (s *State) HasID(subject string, id int) bool {
	return slices.ContainsFunc(s.live(subject), func(v versionRecord) bool { return v.ID == id })
}

// WireHeaderSize is the Confluent wire header's length: magic byte 0, then
// the schema id, 4 bytes big-endian.
const WireHeaderSize = 5

// CheckWireHeader says why a record value does not start with the wire
// header of a schema a live version of the subject names; nil when it
// does. strata.value.schema.validation asks it of every produced value.
func (s *State) CheckWireHeader(subject string, value []byte) error {
	if len(value) < WireHeaderSize || value[0] != 0 {
		return errors.New("its value does not start with the schema registry's wire header (magic byte 0, then a 4-byte schema id)")
	}
	id := binary.BigEndian.Uint32(value[1:WireHeaderSize])
	if !s.HasID(subject, int(id)) {
		return fmt.Errorf("its value names schema id %d, which is not registered under subject %s", id, subject)
	}
	return nil
}

// Serialized is sc with its text in the form the REST API's
// ?format=serialized asks for: a Protobuf schema's text becomes its
// compiled descriptor, base64-encoded (format.Schema.Serialized), which
// confluent-kafka-python's deserializers read; other types keep their
// text.
func (s *State) Serialized(sc Schema) (Schema, error) {
	if sc.Type != format.Protobuf {
		return sc, nil
	}
	p, err := s.parse(sc)
	if err != nil {
		return Schema{}, err
	}
	text, err := p.Serialized()
	if err != nil {
		return Schema{}, &Error{CodeInvalidSchema, err.Error()}
	}
	sc.Text = text
	return sc, nil
}
