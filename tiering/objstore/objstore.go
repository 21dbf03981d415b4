// Package objstore is strata's one interface to object storage: the cold tier
// lives behind a Bucket, whether that is S3/MinIO, HDFS or a local folder.
//
// Every backend passes the same acceptance suite (objstore/objtest), so code
// above this package never asks which backend it has. Decorators add metrics
// (Instrument), retries and timeouts (WithRetries), and, in tests, faults
// (objstore/faulty).
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Bucket is a flat namespace of immutable objects named by slash-separated
// paths.
type Bucket interface {
	// Upload stores everything r yields under name. It is atomic (a reader sees
	// the previous object or the whole new one, never a part) and idempotent
	// (uploading the same bytes again is harmless). If r fails, nothing is
	// published and the error is returned.
	Upload(ctx context.Context, name string, r io.Reader) error

	// ReadAt reads len(p) bytes of the object starting at off, with the
	// semantics of io.ReaderAt: n < len(p) only together with an error, io.EOF
	// when the object ends first. Safe for concurrent use.
	ReadAt(ctx context.Context, name string, p []byte, off int64) (n int, err error)

	// Stat returns the object's attributes.
	Stat(ctx context.Context, name string) (Attrs, error)

	// List calls fn for every object whose name starts with prefix, in
	// lexical (byte) order of name. An error from fn stops the listing and is
	// returned.
	List(ctx context.Context, prefix string, fn func(Attrs) error) error

	// Delete removes the object. Deleting a missing object is not an error.
	Delete(ctx context.Context, name string) error

	// Check verifies the backend is reachable and usable with the configured
	// credentials, so a misconfiguration shows at start-up, not at the first
	// upload.
	Check(ctx context.Context) error

	// AbortIncomplete removes the unfinished uploads of the object name
	// that began more than olderThan ago (0: all of them), which an
	// interrupted writer left: S3's multipart parts. Backends that stage
	// uploads as files sweep them with SweepTemp instead and return 0 here.
	AbortIncomplete(ctx context.Context, name string, olderThan time.Duration) (int, error)

	// SweepTemp removes staged upload files older than olderThan that a
	// dead process left (local and HDFS backends); S3 stages nothing and
	// returns 0.
	SweepTemp(ctx context.Context, olderThan time.Duration) (int, error)

	// ReadVersioned reads a whole small object (at most MaxConditionalSize
	// bytes) together with the Version of exactly the bytes it returns, for
	// a later UploadIf. A missing object is ErrNotFound (write it back with
	// Absent).
	ReadVersioned(ctx context.Context, name string) ([]byte, Version, error)

	// UploadIf stores what r yields under name only if the object is still
	// at version match, or, with match Absent, only if there is none. Of
	// several writers that read the same version, exactly one succeeds; the
	// others get an error wrapping ErrPreconditionFailed, re-read and try
	// again. It is for small objects several writers read-modify-write (the
	// tiering manifests): at most MaxConditionalSize bytes, and as atomic
	// as Upload. The condition and the write are one step against every
	// other UploadIf of the name; a plain Upload or Delete of the same name
	// is not guaranteed to be ordered with them on every backend, so a name
	// is written either always conditionally or never.
	//
	// A conditional write that failed on the way back (a timeout) may have
	// happened: a retry then finds its precondition failed. Callers that
	// re-read and re-apply their change after ErrPreconditionFailed must
	// make that change idempotent.
	UploadIf(ctx context.Context, name string, r io.Reader, match Version) error

	// Kind names the backend ("s3", "hdfs", "local") for logs and metrics.
	Kind() string

	Close() error
}

// The conditional write (ReadVersioned, UploadIf) is part of Bucket, not an
// optional interface found by type assertion: every backend must have it,
// since several nodes update one shard's manifest, and the decorators must
// see it, to count it and to never retry a failed precondition. An optional
// interface would vanish behind a decorator that does not know it, or be
// passed through uncounted by one that embeds Bucket.

// Version names one stored state of an object, for UploadIf. It is opaque,
// and only meaningful to the backend that issued it: S3's ETag (MD5 of the
// content for a single PUT), HDFS's inode id (unique in the namespace, never
// reused, new at every upload), or the SHA-256 of a local file's content.
// Each compares the stored state exactly, with no ABA: a token never comes
// back for different bytes.
type Version string

// Absent, as UploadIf's condition, means "only if no object has the name".
const Absent Version = ""

// MaxConditionalSize bounds the objects ReadVersioned and UploadIf take:
// they are read-modify-written whole, in memory.
const MaxConditionalSize = 64 << 20

// Attrs describes a stored object.
type Attrs struct {
	Name    string
	Size    int64
	ModTime time.Time
	// ETag is the backend's content tag when it has one (S3), else empty.
	ETag string
}

// Op names a Bucket operation, for metrics, timeouts and fault injection.
type Op string

const (
	OpUpload Op = "upload"
	OpReadAt Op = "read_at"
	OpStat   Op = "stat"
	OpList   Op = "list"
	OpDelete Op = "delete"
	OpCheck  Op = "check"
	// OpAbort and OpSweep clean up after interrupted uploads.
	OpAbort Op = "abort_incomplete"
	OpSweep Op = "sweep_temp"
	// OpReadVersioned and OpUploadIf are the conditional write's two halves.
	OpReadVersioned Op = "read_versioned"
	OpUploadIf      Op = "upload_if"
)

// Ops lists every operation, for decorators that set something up per op.
var Ops = []Op{OpUpload, OpReadAt, OpStat, OpList, OpDelete, OpCheck, OpAbort, OpSweep, OpReadVersioned, OpUploadIf}

// ErrNotFound is wrapped by every error that reports a missing object.
var ErrNotFound = errors.New("object not found")

// NotFound returns an error that names the missing object and satisfies
// errors.Is(err, ErrNotFound).
func NotFound(kind, name string) error {
	return fmt.Errorf("%s: %q: %w", kind, name, ErrNotFound)
}

// ErrPreconditionFailed is wrapped by the error of an UploadIf whose
// condition did not hold: the object changed (or appeared, or went) since
// its version was read. The caller re-reads and tries again.
var ErrPreconditionFailed = errors.New("precondition failed: the object is not at the version the write was based on")

// PreconditionFailed returns an error that names the object and the version
// the write expected, and satisfies errors.Is(err, ErrPreconditionFailed).
func PreconditionFailed(kind, name string, match Version) error {
	want := "absent"
	if match != Absent {
		want = "at version " + string(match)
	}
	return fmt.Errorf("%s: %q: conditional write expected it %s: %w", kind, name, want, ErrPreconditionFailed)
}

// ReadSmall reads what r yields for a conditional write, refusing more than
// MaxConditionalSize bytes.
func ReadSmall(ctx context.Context, kind, name string, r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(ContextReader(ctx, r), MaxConditionalSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s upload %q: %w", kind, name, err)
	}
	if len(data) > MaxConditionalSize {
		return nil, fmt.Errorf("%s upload %q: a conditional write takes at most %d bytes", kind, name, MaxConditionalSize)
	}
	return data, nil
}

// ErrInvalidName is wrapped by every error that refuses an object name.
var ErrInvalidName = errors.New("invalid object name")

// MaxNameLen is the longest object name accepted, S3's own limit.
const MaxNameLen = 1024

// TempDir is where the file-system backends stage uploads before renaming
// them into place. Names under it are reserved; listings never show them.
// The leading dot makes Spark and Hive skip it too.
const TempDir = ".strata-tmp"

// ValidateName refuses names that are not safe on every backend: empty,
// absolute, with an empty, "." or ".." segment, a NUL byte, a trailing slash,
// longer than MaxNameLen, or under TempDir.
func ValidateName(name string) error {
	reason := ""
	switch {
	case name == "":
		reason = "empty"
	case len(name) > MaxNameLen:
		reason = fmt.Sprintf("%d bytes long, more than %d", len(name), MaxNameLen)
	case strings.IndexByte(name, 0) >= 0:
		reason = "contains a NUL byte"
	case strings.HasPrefix(name, "/"):
		reason = "absolute (starts with /)"
	case strings.HasSuffix(name, "/"):
		reason = "ends with /"
	case name == TempDir || strings.HasPrefix(name, TempDir+"/"):
		reason = "under the reserved folder " + TempDir
	default:
		for _, seg := range strings.Split(name, "/") {
			switch seg {
			case "":
				reason = "has an empty path segment (//)"
			case ".", "..":
				reason = fmt.Sprintf("has a %q path segment", seg)
			}
			if reason != "" {
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	shown := name
	if len(shown) > 80 {
		shown = shown[:80] + "..."
	}
	return fmt.Errorf("object name %q: %s: %w", shown, reason, ErrInvalidName)
}

// ValidatePrefix refuses list prefixes that could escape the bucket's root.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if strings.IndexByte(prefix, 0) >= 0 || strings.HasPrefix(prefix, "/") || len(prefix) > MaxNameLen {
		return fmt.Errorf("list prefix %q: must be relative, without NUL, at most %d bytes: %w", prefix, MaxNameLen, ErrInvalidName)
	}
	for _, seg := range strings.Split(prefix, "/") {
		if seg == ".." {
			return fmt.Errorf("list prefix %q: has a \"..\" path segment: %w", prefix, ErrInvalidName)
		}
	}
	return nil
}

// ReadAll reads a whole object; for small objects such as manifests.
func ReadAll(ctx context.Context, b Bucket, name string) ([]byte, error) {
	a, err := b.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, a.Size)
	n, err := b.ReadAt(ctx, name, buf, 0)
	if err != nil && !(errors.Is(err, io.EOF) && int64(n) == a.Size) {
		return nil, err
	}
	return buf[:n], nil
}

// CheckReadAt validates ReadAt arguments the same way for every backend.
func CheckReadAt(name string, off int64) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if off < 0 {
		return fmt.Errorf("read %q: negative offset %d", name, off)
	}
	return nil
}

// ContextReader stops a long upload copy once ctx is cancelled.
func ContextReader(ctx context.Context, r io.Reader) io.Reader {
	return ctxReader{ctx, r}
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
