package registry

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"strata/registry/format"
)

// maxReferenceDepth bounds how deep references may nest.
const maxReferenceDepth = 32

// Level is the subject's compatibility level, or the global one.
func (s *State) level(subject string) Level {
	if l, ok := s.levels[subject]; ok {
		return l
	}
	if l, ok := s.levels[""]; ok {
		return l
	}
	return DefaultLevel
}

// mode is the subject's mode, or the global one.
func (s *State) mode(subject string) Mode {
	if m, ok := s.modes[subject]; ok {
		return m
	}
	if m, ok := s.modes[""]; ok {
		return m
	}
	return ReadWrite
}

func (s *State) live(subject string) []versionRecord {
	var out []versionRecord
	for _, v := range s.subjects[subject] {
		if !v.Deleted {
			out = append(out, v)
		}
	}
	return out
}

// visible are the subject's versions a read sees: the live ones, or all
// with deleted. None is the subject not found.
func (s *State) visible(subject string, deleted bool) ([]versionRecord, error) {
	vs := s.subjects[subject]
	if !deleted {
		vs = s.live(subject)
	}
	if len(vs) == 0 {
		return nil, errSubjectNotFound(subject)
	}
	return vs, nil
}

// find is one version of a subject (Latest: its last visible one).
func (s *State) find(subject string, v int, deleted bool) (versionRecord, error) {
	vs, err := s.visible(subject, deleted)
	if err != nil {
		return versionRecord{}, err
	}
	if v == Latest {
		return vs[len(vs)-1], nil
	}
	for _, r := range vs {
		if r.Version == v {
			return r, nil
		}
	}
	return versionRecord{}, errVersionNotFound(v)
}

func (s *State) subjectSchema(r versionRecord) SubjectSchema {
	return SubjectSchema{Subject: r.Subject, Version: r.Version, ID: r.ID, Schema: s.schemas[r.ID].Schema}
}

// normalize checks a schema's type and references, each reference's
// version made a number (latest resolved), so one schema has one identity.
func (s *State) normalize(sc Schema) (Schema, error) {
	t, err := format.ParseType(string(sc.Type))
	if err != nil {
		return Schema{}, errInvalidSchema(err)
	}
	sc.Type = t
	if sc.Text == "" {
		return Schema{}, errInvalidSchema(errors.New("the schema is empty"))
	}
	refs := make([]Reference, 0, len(sc.References))
	for _, r := range sc.References {
		if r.Name == "" || r.Subject == "" {
			return Schema{}, errInvalidSchema(fmt.Errorf("reference %+v: name and subject are required", r))
		}
		v, err := s.find(r.Subject, r.Version, true)
		if err != nil {
			return Schema{}, errInvalidSchema(fmt.Errorf("reference %q: subject %q version %d: %w", r.Name, r.Subject, r.Version, err))
		}
		r.Version = v.Version
		refs = append(refs, r)
	}
	sc.References = refs
	if len(refs) == 0 {
		sc.References = nil
	}
	return sc, nil
}

// refTexts gathers the texts a schema references, each after its own.
func (s *State) refTexts(refs []Reference, depth int, seen map[string]bool, out *[]format.Ref) error {
	if depth > maxReferenceDepth {
		return fmt.Errorf("references nest deeper than %d", maxReferenceDepth)
	}
	for _, r := range refs {
		if seen[r.Name] {
			continue
		}
		seen[r.Name] = true
		v, err := s.find(r.Subject, r.Version, true)
		if err != nil {
			return fmt.Errorf("reference %q: subject %q version %d: %w", r.Name, r.Subject, r.Version, err)
		}
		rec := s.schemas[v.ID]
		if err := s.refTexts(rec.References, depth+1, seen, out); err != nil {
			return err
		}
		*out = append(*out, format.Ref{Name: r.Name, Text: rec.Text})
	}
	return nil
}

// parse parses a normalized schema with what it references.
func (s *State) parse(sc Schema) (*format.Schema, error) {
	var refs []format.Ref
	if err := s.refTexts(sc.References, 0, map[string]bool{}, &refs); err != nil {
		return nil, errInvalidSchema(err)
	}
	p, err := format.Parse(sc.Type, sc.Text, refs)
	if err != nil {
		return nil, errInvalidSchema(err)
	}
	return p, nil
}

// incompatibilities are why candidate may not follow the versions
// against (oldest first) at level: for a transitive level every one of
// them, else the last.
func (s *State) incompatibilities(level Level, candidate *format.Schema, against []versionRecord) []string {
	if level == None || len(against) == 0 {
		return nil
	}
	if !level.transitive() {
		against = against[len(against)-1:]
	}
	var out []string
	for _, v := range against {
		prev, err := s.parse(s.schemas[v.ID].Schema)
		if err != nil {
			out = append(out, fmt.Sprintf("version %d: %v", v.Version, err))
			continue
		}
		if level.backward() {
			for _, why := range format.Check(candidate, prev) {
				out = append(out, fmt.Sprintf("%s: version %d: %s", Backward, v.Version, why))
			}
		}
		if level.forward() {
			for _, why := range format.Check(prev, candidate) {
				out = append(out, fmt.Sprintf("%s: version %d: %s", Forward, v.Version, why))
			}
		}
	}
	return out
}

// RegisterRequest is a schema to register under a subject. ID and
// Version, when above 0, are the client's choice: IMPORT mode takes them.
type RegisterRequest struct {
	Subject     string
	Schema      Schema
	ID, Version int
}

// Register decides a registration: the version (and id) the schema has
// or takes under the subject, and the writes that record it; none when
// the subject already has it.
func (s *State) Register(req RegisterRequest) (SubjectSchema, []Write, error) {
	subject, mode := req.Subject, s.mode(req.Subject)
	if mode == ReadOnly {
		return SubjectSchema{}, nil, errNotPermitted("Subject %s is in read-only mode", subject)
	}
	sc, err := s.normalize(req.Schema)
	if err != nil {
		return SubjectSchema{}, nil, err
	}
	parsed, err := s.parse(sc)
	if err != nil {
		return SubjectSchema{}, nil, err
	}
	ident := identity(sc)
	for _, v := range s.live(subject) {
		if identity(s.schemas[v.ID].Schema) == ident {
			if req.ID > 0 && req.ID != v.ID {
				return SubjectSchema{}, nil, errNotPermitted("Schema already registered with id %d instead of input id %d", v.ID, req.ID)
			}
			return s.subjectSchema(v), nil, nil
		}
	}
	id, found := s.byCanon[ident]
	switch {
	case req.ID > 0 && found && id != req.ID:
		return SubjectSchema{}, nil, errNotPermitted("Schema already registered with id %d instead of input id %d", id, req.ID)
	case req.ID > 0 && !found && mode != Import:
		return SubjectSchema{}, nil, errNotPermitted("Subject %s is not in import mode: only IMPORT mode takes a new schema's id from the client", subject)
	case req.ID > 0 && !found:
		if _, taken := s.schemas[req.ID]; taken {
			return SubjectSchema{}, nil, errNotPermitted("Overwrite new schema with id %d is not permitted: another schema has it", req.ID)
		}
		id = req.ID
	case !found:
		id = s.nextID
	}
	all := s.subjects[subject]
	version := 1
	if len(all) > 0 {
		version = all[len(all)-1].Version + 1
	}
	if req.Version > 0 && req.Version != version {
		if mode != Import {
			return SubjectSchema{}, nil, &Error{CodeInvalidVersion, fmt.Sprintf("Version %d is not one more than the latest version of subject %s (%d)", req.Version, subject, version-1)}
		}
		if slices.ContainsFunc(all, func(r versionRecord) bool { return r.Version == req.Version }) {
			return SubjectSchema{}, nil, errNotPermitted("Subject %s already has version %d", subject, req.Version)
		}
		version = req.Version
	}
	if mode != Import {
		if why := s.incompatibilities(s.level(subject), parsed, s.live(subject)); len(why) > 0 {
			return SubjectSchema{}, nil, errIncompatible(subject, why)
		}
	}
	var writes []Write
	if !found {
		writes = append(writes, put(schemaKey(id), schemaRecord{ID: id, Schema: sc}))
	}
	if next := max(s.nextID, id+1); next != s.nextID {
		writes = append(writes, put(keyNextID, nextIDRecord{Next: next}))
	}
	rec := versionRecord{Subject: subject, Version: version, ID: id}
	writes = append(writes, put(versionKey(subject, version), rec))
	return SubjectSchema{Subject: subject, Version: version, ID: id, Schema: sc}, writes, nil
}

// Lookup is the version of the subject that has the schema (POST
// /subjects/{subject}); deleted looks among soft-deleted versions too.
func (s *State) Lookup(subject string, sc Schema, deleted bool) (SubjectSchema, error) {
	vs, err := s.visible(subject, deleted)
	if err != nil {
		return SubjectSchema{}, err
	}
	if sc, err = s.normalize(sc); err != nil {
		return SubjectSchema{}, err
	}
	if _, err := s.parse(sc); err != nil {
		return SubjectSchema{}, err
	}
	ident := identity(sc)
	for _, v := range slices.Backward(vs) {
		if identity(s.schemas[v.ID].Schema) == ident {
			return s.subjectSchema(v), nil
		}
	}
	return SubjectSchema{}, errSchemaNotFound()
}

// referrers are the ids of the schemas that reference a subject's version.
func (s *State) referrers(subject string, version int) []int {
	var out []int
	for _, id := range slices.Sorted(maps.Keys(s.schemas)) {
		if slices.ContainsFunc(s.schemas[id].References, func(r Reference) bool { return r.Subject == subject && r.Version == version }) {
			out = append(out, id)
		}
	}
	return out
}

// unused says whether no version but those dropping names the id.
func (s *State) unused(id int, dropping map[SubjectVersion]bool) bool {
	for subject, vs := range s.subjects {
		for _, v := range vs {
			if v.ID == id && !dropping[SubjectVersion{subject, v.Version}] {
				return false
			}
		}
	}
	return true
}

// drop are the writes that remove versions for good, and the schemas no
// other version names.
func (s *State) drop(vs []versionRecord) []Write {
	dropping := map[SubjectVersion]bool{}
	for _, v := range vs {
		dropping[SubjectVersion{v.Subject, v.Version}] = true
	}
	var writes []Write
	gone := map[int]bool{}
	for _, v := range vs {
		writes = append(writes, del(versionKey(v.Subject, v.Version)))
		if !gone[v.ID] && s.unused(v.ID, dropping) {
			gone[v.ID] = true
			writes = append(writes, del(schemaKey(v.ID)))
		}
	}
	return writes
}

// DeleteSubject soft-deletes a subject's live versions or, permanent,
// removes a soft-deleted subject; it returns the versions deleted.
func (s *State) DeleteSubject(subject string, permanent bool) ([]int, []Write, error) {
	if s.mode(subject) == ReadOnly {
		return nil, nil, errNotPermitted("Subject %s is in read-only mode", subject)
	}
	all := s.subjects[subject]
	if len(all) == 0 {
		return nil, nil, errSubjectNotFound(subject)
	}
	live := s.live(subject)
	switch {
	case !permanent && len(live) == 0:
		return nil, nil, errSubjectSoftDeleted(subject)
	case permanent && len(live) > 0:
		return nil, nil, errSubjectNotSoftDeleted(subject)
	}
	targets := live
	if permanent {
		targets = all
	}
	var versions []int
	var writes []Write
	for _, v := range targets {
		if by := s.referrers(subject, v.Version); len(by) > 0 {
			return nil, nil, errReferenceExists(subject, v.Version, by)
		}
		versions = append(versions, v.Version)
		if !permanent {
			v.Deleted = true
			writes = append(writes, put(versionKey(subject, v.Version), v))
		}
	}
	if permanent {
		writes = s.drop(targets)
		if _, ok := s.levels[subject]; ok {
			writes = append(writes, del(configKey(subject)))
		}
		if _, ok := s.modes[subject]; ok {
			writes = append(writes, del(modeKey(subject)))
		}
	}
	return versions, writes, nil
}

// DeleteVersion soft-deletes one live version or, permanent, removes a
// soft-deleted one; it returns the version deleted.
func (s *State) DeleteVersion(subject string, version int, permanent bool) (int, []Write, error) {
	if s.mode(subject) == ReadOnly {
		return 0, nil, errNotPermitted("Subject %s is in read-only mode", subject)
	}
	if len(s.subjects[subject]) == 0 {
		return 0, nil, errSubjectNotFound(subject)
	}
	// A numbered version is looked for among soft-deleted ones too, so
	// deleting one twice is 40406, not 40402.
	v, err := s.find(subject, version, permanent || version != Latest)
	if err != nil {
		return 0, nil, err
	}
	switch {
	case !permanent && v.Deleted:
		return 0, nil, errVersionSoftDeleted(subject, v.Version)
	case permanent && !v.Deleted:
		return 0, nil, errVersionNotSoftDeleted(subject, v.Version)
	}
	if by := s.referrers(subject, v.Version); len(by) > 0 {
		return 0, nil, errReferenceExists(subject, v.Version, by)
	}
	if permanent {
		return v.Version, s.drop([]versionRecord{v}), nil
	}
	v.Deleted = true
	return v.Version, []Write{put(versionKey(subject, v.Version), v)}, nil
}

// Check says why sc may not follow a subject's version (Latest: its
// latest), or with all, the versions its level checks a registration
// against; nothing when it may.
func (s *State) Check(subject string, version int, all bool, sc Schema) ([]string, error) {
	live, err := s.visible(subject, false)
	if err != nil {
		return nil, err
	}
	if sc, err = s.normalize(sc); err != nil {
		return nil, err
	}
	parsed, err := s.parse(sc)
	if err != nil {
		return nil, err
	}
	level := s.level(subject)
	if all {
		return s.incompatibilities(level, parsed, live), nil
	}
	v, err := s.find(subject, version, false)
	if err != nil {
		return nil, err
	}
	if level.transitive() {
		level = map[Level]Level{BackwardTransitive: Backward, ForwardTransitive: Forward, FullTransitive: Full}[level]
	}
	return s.incompatibilities(level, parsed, []versionRecord{v}), nil
}

// Config is a subject's compatibility level ("" the global one); a
// subject without one of its own is 40408 unless defaultToGlobal.
func (s *State) Config(subject string, defaultToGlobal bool) (Level, error) {
	if l, ok := s.levels[subject]; ok || subject == "" || defaultToGlobal {
		if !ok {
			l = s.level("")
		}
		return l, nil
	}
	return "", errLevelNotSet(subject)
}

// SetConfig sets a subject's level ("" the global one).
func (s *State) SetConfig(subject string, l Level) []Write {
	return []Write{put(configKey(subject), configRecord{Compatibility: l})}
}

// DeleteConfig drops a subject's own level (the global one back to the
// default); it returns the level that was in force.
func (s *State) DeleteConfig(subject string) (Level, []Write, error) {
	_, own := s.levels[subject]
	if subject != "" && !own && len(s.subjects[subject]) == 0 {
		return "", nil, errSubjectNotFound(subject)
	}
	prev := s.level(subject)
	if !own {
		return prev, nil, nil
	}
	return prev, []Write{del(configKey(subject))}, nil
}

// Mode is a subject's mode ("" the global one); a subject without one of
// its own is 40409 unless defaultToGlobal.
func (s *State) Mode(subject string, defaultToGlobal bool) (Mode, error) {
	if m, ok := s.modes[subject]; ok || subject == "" || defaultToGlobal {
		if !ok {
			m = s.mode("")
		}
		return m, nil
	}
	return "", errModeNotSet(subject)
}

// SetMode sets a subject's mode ("" the global one). IMPORT is only for
// an empty registry (or subject), unless force: imported ids must not
// meet ids this registry gave.
func (s *State) SetMode(subject string, m Mode, force bool) ([]Write, error) {
	if m == Import && !force {
		if subject == "" && len(s.subjects) > 0 {
			return nil, errNotPermitted("Cannot import since found existing subjects")
		}
		if subject != "" && len(s.subjects[subject]) > 0 {
			return nil, errNotPermitted("Cannot import since found existing subject %s", subject)
		}
	}
	return []Write{put(modeKey(subject), modeRecord{Mode: m})}, nil
}

// DeleteMode drops a subject's own mode; it returns the mode in force.
func (s *State) DeleteMode(subject string) (Mode, []Write, error) {
	_, own := s.modes[subject]
	if subject != "" && !own && len(s.subjects[subject]) == 0 {
		return "", nil, errSubjectNotFound(subject)
	}
	prev := s.mode(subject)
	if !own {
		return prev, nil, nil
	}
	return prev, []Write{del(modeKey(subject))}, nil
}
