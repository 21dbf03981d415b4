package httpapi

import (
	"net/http"

	"strata/registry"
)

func (s *Server) read(w http.ResponseWriter, r *http.Request, fn func(*registry.State) (any, error)) int {
	var out any
	err := s.Registry.Read(func(st *registry.State) error {
		var err error
		out, err = fn(st)
		return err
	})
	if err != nil {
		return s.failed(w, r, err)
	}
	if text, ok := out.(rawSchema); ok {
		w.Header().Set("Content-Type", ContentType)
		w.Write([]byte(text))
		return http.StatusOK
	}
	return answer(w, out)
}

// asked is sc in the form the request's ?format= names: "serialized"
// makes a Protobuf schema its base64-encoded descriptor (what
// confluent-kafka-python's Protobuf deserializer asks for); any other
// format, or none, leaves the text as registered.
func asked(r *http.Request, st *registry.State, sc registry.Schema) (registry.Schema, error) {
	if r.URL.Query().Get("format") != "serialized" {
		return sc, nil
	}
	return st.Serialized(sc)
}

// rawSchema is an answer that is a schema's text itself (the /schema
// routes), not JSON of it.
type rawSchema string

func (s *Server) schemaByID(w http.ResponseWriter, r *http.Request) int {
	id, err := idParam(r)
	if err != nil {
		return fail(w, err)
	}
	return s.read(w, r, func(st *registry.State) (any, error) {
		sc, err := st.SchemaByID(id)
		if err == nil {
			sc, err = asked(r, st, sc)
		}
		out := toJSON(registry.SubjectSchema{Schema: sc})
		return out, err
	})
}

func (s *Server) schemaTextByID(w http.ResponseWriter, r *http.Request) int {
	id, err := idParam(r)
	if err != nil {
		return fail(w, err)
	}
	return s.read(w, r, func(st *registry.State) (any, error) {
		sc, err := st.SchemaByID(id)
		return rawSchema(sc.Text), err
	})
}

func (s *Server) subjectsByID(w http.ResponseWriter, r *http.Request) int {
	id, err := idParam(r)
	if err != nil {
		return fail(w, err)
	}
	return s.read(w, r, func(st *registry.State) (any, error) { return st.SubjectsByID(id, flag(r, "deleted")) })
}

func (s *Server) versionsByID(w http.ResponseWriter, r *http.Request) int {
	id, err := idParam(r)
	if err != nil {
		return fail(w, err)
	}
	return s.read(w, r, func(st *registry.State) (any, error) { return st.VersionsByID(id, flag(r, "deleted")) })
}

func (s *Server) subjects(w http.ResponseWriter, r *http.Request) int {
	return s.read(w, r, func(st *registry.State) (any, error) { return st.Subjects(flag(r, "deleted")), nil })
}

func (s *Server) versions(w http.ResponseWriter, r *http.Request) int {
	return s.read(w, r, func(st *registry.State) (any, error) {
		return st.Versions(r.PathValue("subject"), flag(r, "deleted"))
	})
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) int {
	v, err := versionParam(r)
	if err != nil {
		return fail(w, err)
	}
	return s.read(w, r, func(st *registry.State) (any, error) {
		ss, err := st.Version(r.PathValue("subject"), v, flag(r, "deleted"))
		if err == nil {
			ss.Schema, err = asked(r, st, ss.Schema)
		}
		return toJSON(ss), err
	})
}

func (s *Server) versionSchema(w http.ResponseWriter, r *http.Request) int {
	v, err := versionParam(r)
	if err != nil {
		return fail(w, err)
	}
	return s.read(w, r, func(st *registry.State) (any, error) {
		ss, err := st.Version(r.PathValue("subject"), v, flag(r, "deleted"))
		return rawSchema(ss.Text), err
	})
}

func (s *Server) referencedBy(w http.ResponseWriter, r *http.Request) int {
	v, err := versionParam(r)
	if err != nil {
		return fail(w, err)
	}
	return s.read(w, r, func(st *registry.State) (any, error) { return st.ReferencedBy(r.PathValue("subject"), v) })
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) int {
	var q schemaRequest
	if err := readBody(w, r, func(b []byte) (err error) { q, err = decodeSchemaRequest(b); return err }); err != nil {
		return fail(w, err)
	}
	var out registry.SubjectSchema
	var wrote bool
	err := s.Registry.Write(r.Context(), func(st *registry.State) ([]registry.Write, error) {
		ss, writes, err := st.Register(registry.RegisterRequest{Subject: r.PathValue("subject"), Schema: q.schema(), ID: q.ID, Version: q.Version})
		out, wrote = ss, len(writes) > 0
		return writes, err
	})
	if err != nil {
		return s.failed(w, r, err)
	}
	if wrote && s.Log != nil {
		s.Log.Info("schema registered", "subject", out.Subject, "version", out.Version, "id", out.ID, "type", out.Type)
	}
	return answer(w, struct {
		ID int `json:"id"`
	}{out.ID})
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) int {
	var q schemaRequest
	if err := readBody(w, r, func(b []byte) (err error) { q, err = decodeSchemaRequest(b); return err }); err != nil {
		return fail(w, err)
	}
	return s.read(w, r, func(st *registry.State) (any, error) {
		ss, err := st.Lookup(r.PathValue("subject"), q.schema(), flag(r, "deleted"))
		return toJSON(ss), err
	})
}

func (s *Server) deleteSubject(w http.ResponseWriter, r *http.Request) int {
	var versions []int
	err := s.Registry.Write(r.Context(), func(st *registry.State) (writes []registry.Write, err error) {
		versions, writes, err = st.DeleteSubject(r.PathValue("subject"), flag(r, "permanent"))
		return writes, err
	})
	if err != nil {
		return s.failed(w, r, err)
	}
	if s.Log != nil {
		s.Log.Info("schema registry: subject deleted", "subject", r.PathValue("subject"), "versions", versions, "permanent", flag(r, "permanent"))
	}
	return answer(w, versions)
}

func (s *Server) deleteVersion(w http.ResponseWriter, r *http.Request) int {
	v, err := versionParam(r)
	if err != nil {
		return fail(w, err)
	}
	var version int
	err = s.Registry.Write(r.Context(), func(st *registry.State) (writes []registry.Write, err error) {
		version, writes, err = st.DeleteVersion(r.PathValue("subject"), v, flag(r, "permanent"))
		return writes, err
	})
	if err != nil {
		return s.failed(w, r, err)
	}
	if s.Log != nil {
		s.Log.Info("schema registry: version deleted", "subject", r.PathValue("subject"), "version", version, "permanent", flag(r, "permanent"))
	}
	return answer(w, version)
}

type levelJSON struct {
	CompatibilityLevel registry.Level `json:"compatibilityLevel"`
}

func (s *Server) getConfig(w http.ResponseWriter, r *http.Request) int {
	return s.read(w, r, func(st *registry.State) (any, error) {
		l, err := st.Config(r.PathValue("subject"), flag(r, "defaultToGlobal"))
		return levelJSON{l}, err
	})
}

func (s *Server) putConfig(w http.ResponseWriter, r *http.Request) int {
	var l registry.Level
	if err := readBody(w, r, func(b []byte) (err error) { l, err = decodeLevel(b); return err }); err != nil {
		return fail(w, err)
	}
	if err := s.Registry.Write(r.Context(), func(st *registry.State) ([]registry.Write, error) {
		return st.SetConfig(r.PathValue("subject"), l), nil
	}); err != nil {
		return s.failed(w, r, err)
	}
	return answer(w, struct {
		Compatibility registry.Level `json:"compatibility"`
	}{l})
}

func (s *Server) deleteConfig(w http.ResponseWriter, r *http.Request) int {
	var prev registry.Level
	if err := s.Registry.Write(r.Context(), func(st *registry.State) (writes []registry.Write, err error) {
		prev, writes, err = st.DeleteConfig(r.PathValue("subject"))
		return writes, err
	}); err != nil {
		return s.failed(w, r, err)
	}
	return answer(w, levelJSON{prev})
}

type modeJSON struct {
	Mode registry.Mode `json:"mode"`
}

func (s *Server) getMode(w http.ResponseWriter, r *http.Request) int {
	return s.read(w, r, func(st *registry.State) (any, error) {
		m, err := st.Mode(r.PathValue("subject"), flag(r, "defaultToGlobal"))
		return modeJSON{m}, err
	})
}

func (s *Server) putMode(w http.ResponseWriter, r *http.Request) int {
	var m registry.Mode
	if err := readBody(w, r, func(b []byte) (err error) { m, err = decodeMode(b); return err }); err != nil {
		return fail(w, err)
	}
	if err := s.Registry.Write(r.Context(), func(st *registry.State) ([]registry.Write, error) {
		return st.SetMode(r.PathValue("subject"), m, flag(r, "force"))
	}); err != nil {
		return s.failed(w, r, err)
	}
	return answer(w, modeJSON{m})
}

func (s *Server) deleteMode(w http.ResponseWriter, r *http.Request) int {
	var prev registry.Mode
	if err := s.Registry.Write(r.Context(), func(st *registry.State) (writes []registry.Write, err error) {
		prev, writes, err = st.DeleteMode(r.PathValue("subject"))
		return writes, err
	}); err != nil {
		return s.failed(w, r, err)
	}
	return answer(w, modeJSON{prev})
}

func (s *Server) compatibility(w http.ResponseWriter, r *http.Request) int {
	v, err := versionParam(r)
	if err != nil {
		return fail(w, err)
	}
	var q schemaRequest
	if err := readBody(w, r, func(b []byte) (err error) { q, err = decodeSchemaRequest(b); return err }); err != nil {
		return fail(w, err)
	}
	return s.read(w, r, func(st *registry.State) (any, error) {
		why, err := st.Check(r.PathValue("subject"), v, r.PathValue("version") == "", q.schema())
		out := struct {
			IsCompatible bool `json:"is_compatible"`
			Messages     any  `json:"messages,omitempty"` // verbose: [] when compatible
		}{IsCompatible: len(why) == 0}
		if flag(r, "verbose") {
			out.Messages = append([]string{}, why...)
		}
		return out, err
	})
}
