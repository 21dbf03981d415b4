package registry

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"strata/registry/format"
)

// The keys a Store holds (docs/registry.md, "Storage"):
//
//	next_id                    {"next": N}: the id the next new schema takes
//	schema/ID (%010d)          schemaRecord: an id's schema
//	version/SUBJECT/V (%010d)  versionRecord: a subject's version and its id
//	config/SUBJECT             {"compatibility": L}; SUBJECT "" is global
//	mode/SUBJECT               {"mode": M}; SUBJECT "" is global
//
// SUBJECT is path-escaped, so a subject with a "/" stays one segment.
const (
	keyNextID   = "next_id"
	prefSchema  = "schema/"
	prefVersion = "version/"
	prefConfig  = "config/"
	prefMode    = "mode/"
)

type nextIDRecord struct {
	Next int `json:"next"`
}

type schemaRecord struct {
	ID int `json:"id"`
	Schema
}

type versionRecord struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      int    `json:"id"`
	Deleted bool   `json:"deleted,omitempty"`
}

type configRecord struct {
	Compatibility Level `json:"compatibility"`
}

type modeRecord struct {
	Mode Mode `json:"mode"`
}

func schemaKey(id int) string { return fmt.Sprintf("%s%010d", prefSchema, id) }

func versionKey(subject string, v int) string {
	return fmt.Sprintf("%s%s/%010d", prefVersion, url.PathEscape(subject), v)
}

func configKey(subject string) string { return prefConfig + url.PathEscape(subject) }
func modeKey(subject string) string   { return prefMode + url.PathEscape(subject) }

func put(key string, v any) Write {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err) // the records are plain structs: never
	}
	return Write{Key: key, Value: raw}
}

func del(key string) Write { return Write{Key: key} }

// State is the registry's whole state in memory, as the store's keys
// decode. Its decision methods never change it: they return the writes
// that would, which apply makes true once the store has them.
type State struct {
	nextID   int
	schemas  map[int]schemaRecord
	subjects map[string][]versionRecord // by version, soft-deleted ones too
	levels   map[string]Level           // "" is global
	modes    map[string]Mode            // "" is global
	// byCanon finds the id a schema already has (identity, an id).
	byCanon map[string]int
}

// NewState is the state of an empty store.
func NewState() *State {
	return &State{nextID: 1, schemas: map[int]schemaRecord{}, subjects: map[string][]versionRecord{},
		levels: map[string]Level{}, modes: map[string]Mode{}, byCanon: map[string]int{}}
}

// LoadState decodes a store's keys; a key it cannot read is named.
func LoadState(kv map[string][]byte) (*State, error) {
	s := NewState()
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		if err := s.apply(Write{Key: k, Value: kv[k]}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// apply makes one write true of the state.
func (s *State) apply(w Write) error {
	bad := func(err error) error { return fmt.Errorf("schema registry key %q: %w", w.Key, err) }
	switch {
	case w.Key == keyNextID:
		var r nextIDRecord
		if err := json.Unmarshal(w.Value, &r); err != nil {
			return bad(err)
		}
		s.nextID = r.Next
	case strings.HasPrefix(w.Key, prefSchema):
		id, err := strconv.Atoi(strings.TrimPrefix(w.Key, prefSchema))
		if err != nil {
			return bad(err)
		}
		if old, ok := s.schemas[id]; ok {
			delete(s.byCanon, identity(old.Schema))
		}
		if w.Value == nil {
			delete(s.schemas, id)
			return nil
		}
		var r schemaRecord
		if err := json.Unmarshal(w.Value, &r); err != nil {
			return bad(err)
		}
		s.schemas[id] = r
		s.byCanon[identity(r.Schema)] = id
	case strings.HasPrefix(w.Key, prefVersion):
		esc, num, ok := strings.Cut(strings.TrimPrefix(w.Key, prefVersion), "/")
		subject, err1 := url.PathUnescape(esc)
		v, err2 := strconv.Atoi(num)
		if !ok || err1 != nil || err2 != nil {
			return bad(fmt.Errorf("not %sSUBJECT/VERSION", prefVersion))
		}
		vs := slices.DeleteFunc(s.subjects[subject], func(r versionRecord) bool { return r.Version == v })
		if w.Value != nil {
			var r versionRecord
			if err := json.Unmarshal(w.Value, &r); err != nil {
				return bad(err)
			}
			i, _ := slices.BinarySearchFunc(vs, v, func(r versionRecord, v int) int { return r.Version - v })
			vs = slices.Insert(vs, i, r)
		}
		if len(vs) == 0 {
			delete(s.subjects, subject)
		} else {
			s.subjects[subject] = vs
		}
	case strings.HasPrefix(w.Key, prefConfig):
		subject, err := url.PathUnescape(strings.TrimPrefix(w.Key, prefConfig))
		if err != nil {
			return bad(err)
		}
		if w.Value == nil {
			delete(s.levels, subject)
			return nil
		}
		var r configRecord
		if err := json.Unmarshal(w.Value, &r); err != nil {
			return bad(err)
		}
		s.levels[subject] = r.Compatibility
	case strings.HasPrefix(w.Key, prefMode):
		subject, err := url.PathUnescape(strings.TrimPrefix(w.Key, prefMode))
		if err != nil {
			return bad(err)
		}
		if w.Value == nil {
			delete(s.modes, subject)
			return nil
		}
		var r modeRecord
		if err := json.Unmarshal(w.Value, &r); err != nil {
			return bad(err)
		}
		s.modes[subject] = r.Mode
	default:
		return bad(fmt.Errorf("not a key of the schema registry's"))
	}
	return nil
}

// identity is what makes two registrations one schema: type, canonical
// text and references.
func identity(sc Schema) string {
	var refs []byte
	if len(sc.References) > 0 {
		refs, _ = json.Marshal(sc.References)
	}
	return string(sc.Type) + "\x00" + format.Canonical(sc.Type, sc.Text) + "\x00" + string(refs)
}
