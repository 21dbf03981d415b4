// Package registry is strata's Schema Registry: subjects, their versions,
// the schemas they name by global id, compatibility levels and modes, as
// Confluent's Schema Registry keeps them (docs/registry.md). State holds
// the decisions, pure; Registry runs them over a Store, which makes them
// durable; registry/httpapi serves them as Confluent's REST API.
package registry

import (
	"fmt"
	"strconv"
	"strings"

	"strata/registry/format"
)

// Level is a compatibility level: which earlier versions a new one is
// checked against, and in which direction.
type Level string

const (
	None               Level = "NONE"
	Backward           Level = "BACKWARD"
	BackwardTransitive Level = "BACKWARD_TRANSITIVE"
	Forward            Level = "FORWARD"
	ForwardTransitive  Level = "FORWARD_TRANSITIVE"
	Full               Level = "FULL"
	FullTransitive     Level = "FULL_TRANSITIVE"
)

// DefaultLevel is the global level until one is set, as Confluent's.
const DefaultLevel = Backward

// ParseLevel reads a level in any case, as Confluent does.
func ParseLevel(s string) (Level, error) {
	switch l := Level(strings.ToUpper(s)); l {
	case None, Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive:
		return l, nil
	}
	return "", errInvalidLevel()
}

func (l Level) backward() bool {
	return l == Backward || l == BackwardTransitive || l == Full || l == FullTransitive
}
func (l Level) forward() bool {
	return l == Forward || l == ForwardTransitive || l == Full || l == FullTransitive
}
func (l Level) transitive() bool {
	return l == BackwardTransitive || l == ForwardTransitive || l == FullTransitive
}

// Mode says whether a subject (or the registry) takes new schemas.
type Mode string

const (
	ReadWrite Mode = "READWRITE"
	ReadOnly  Mode = "READONLY"
	// Import takes schemas with the id (and version) the client gives,
	// unchecked for compatibility: copying another registry.
	Import Mode = "IMPORT"
)

// ParseMode reads a mode in any case.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToUpper(s)); m {
	case ReadWrite, ReadOnly, Import:
		return m, nil
	}
	return "", errInvalidMode()
}

// Reference names another subject's version that a schema uses, under
// the name the schema's text refers to it by.
type Reference struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// Schema is a schema as registered: its type, text and references.
type Schema struct {
	Type       format.Type `json:"schemaType"`
	Text       string      `json:"schema"`
	References []Reference `json:"references,omitempty"`
}

// SubjectSchema is one version of a subject with its schema.
type SubjectSchema struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      int    `json:"id"`
	Schema
}

// SubjectVersion is one version of a subject, without its schema.
type SubjectVersion struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// Latest is the version number that means a subject's latest version.
const Latest = -1

// ParseVersion reads a version as the REST API names it: a number from 1
// to 2^31-1, or "latest" (or -1).
func ParseVersion(s string) (int, error) {
	if s == "latest" {
		return Latest, nil
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil || v == 0 || v < Latest {
		return 0, errInvalidVersion(s)
	}
	return int(v), nil
}

// Error is an answer the REST API carries: Confluent's error_code and a
// message naming what was wrong.
type Error struct {
	Code    int
	Message string
}

func (e *Error) Error() string { return e.Message }

// Status is the HTTP status for the code: its first three digits.
func (e *Error) Status() int {
	if e.Code < 1000 {
		return e.Code
	}
	return e.Code / 100
}

// Confluent's error codes.
const (
	CodeSubjectNotFound       = 40401
	CodeVersionNotFound       = 40402
	CodeSchemaNotFound        = 40403
	CodeSubjectSoftDeleted    = 40404
	CodeSubjectNotSoftDeleted = 40405
	CodeVersionSoftDeleted    = 40406
	CodeVersionNotSoftDeleted = 40407
	CodeSubjectLevelNotSet    = 40408
	CodeSubjectModeNotSet     = 40409
	CodeIncompatible          = 409
	CodeUnprocessable         = 422
	CodeInvalidSchema         = 42201
	CodeInvalidVersion        = 42202
	CodeInvalidLevel          = 42203
	CodeInvalidMode           = 42204
	CodeOperationNotPermitted = 42205
	CodeReferenceExists       = 42206
	CodeStore                 = 50001
	CodeStoreTimeout          = 50002
)

func errSubjectNotFound(s string) error {
	return &Error{CodeSubjectNotFound, fmt.Sprintf("Subject '%s' not found.", s)}
}

func errVersionNotFound(v int) error {
	return &Error{CodeVersionNotFound, fmt.Sprintf("Version %d not found.", v)}
}

func errSchemaIDNotFound(id int) error {
	return &Error{CodeSchemaNotFound, fmt.Sprintf("Schema %d not found", id)}
}

func errSchemaNotFound() error { return &Error{CodeSchemaNotFound, "Schema not found"} }

func errSubjectSoftDeleted(s string) error {
	return &Error{CodeSubjectSoftDeleted, fmt.Sprintf("Subject '%s' was soft deleted. Set permanent=true to delete permanently", s)}
}

func errSubjectNotSoftDeleted(s string) error {
	return &Error{CodeSubjectNotSoftDeleted, fmt.Sprintf("Subject '%s' was not deleted first before being permanently deleted", s)}
}

func errVersionSoftDeleted(s string, v int) error {
	return &Error{CodeVersionSoftDeleted, fmt.Sprintf("Subject '%s' Version %d was soft deleted. Set permanent=true to delete permanently", s, v)}
}

func errVersionNotSoftDeleted(s string, v int) error {
	return &Error{CodeVersionNotSoftDeleted, fmt.Sprintf("Subject '%s' Version %d was not deleted first before being permanently deleted", s, v)}
}

func errLevelNotSet(s string) error {
	return &Error{CodeSubjectLevelNotSet, fmt.Sprintf("Subject '%s' does not have subject-level compatibility configured", s)}
}

func errModeNotSet(s string) error {
	return &Error{CodeSubjectModeNotSet, fmt.Sprintf("Subject '%s' does not have subject-level mode configured", s)}
}

func errIncompatible(subject string, why []string) error {
	return &Error{CodeIncompatible, fmt.Sprintf("Schema being registered is incompatible with an earlier schema for subject \"%s\", details: %s", subject, strings.Join(why, "; "))}
}

func errInvalidSchema(why error) error {
	return &Error{CodeInvalidSchema, "Invalid schema: " + why.Error()}
}

func errInvalidVersion(v string) error {
	return &Error{CodeInvalidVersion, fmt.Sprintf("The specified version '%s' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"", v)}
}

func errInvalidLevel() error {
	return &Error{CodeInvalidLevel, "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive"}
}

func errInvalidMode() error {
	return &Error{CodeInvalidMode, "Invalid mode. Valid values are READWRITE, READONLY and IMPORT"}
}

func errNotPermitted(format string, args ...any) error {
	return &Error{CodeOperationNotPermitted, fmt.Sprintf(format, args...)}
}

func errReferenceExists(s string, v int, by []int) error {
	return &Error{CodeReferenceExists, fmt.Sprintf("One or more references exist to the schema {subject=%s,version=%d}: schema ids %v refer to it", s, v, by)}
}

// Unprocessable is the error for a request the API cannot read (a body
// that is not the JSON it wants).
func Unprocessable(why string) error { return &Error{CodeUnprocessable, why} }
