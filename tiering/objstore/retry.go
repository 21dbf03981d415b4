package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"
)

// transientError marks an error a backend knows to be worth retrying
// (a 5xx, a throttling reply).
type transientError struct{ err error }

func (t transientError) Error() string { return t.err.Error() }
func (t transientError) Unwrap() error { return t.err }

// Transient marks err as worth retrying.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return transientError{err}
}

// IsTransient says whether retrying might succeed: errors a backend marked
// Transient, and network failures (refused, reset, timed out). Not-found,
// invalid names, bad credentials and cancellations are final, and so is a
// failed precondition: the object changed, and only the caller, reading it
// again, can make a write that may succeed.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidName) || errors.Is(err, context.Canceled) ||
		errors.Is(err, ErrPreconditionFailed) {
		return false
	}
	var t transientError
	if errors.As(err, &t) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF)
}

// RetryPolicy bounds how long any one operation can take.
type RetryPolicy struct {
	// Attempts is the most tries per operation (default 4).
	Attempts int
	// BaseDelay doubles after each failed try, up to MaxDelay, with jitter
	// (defaults 100ms and 2s).
	BaseDelay, MaxDelay time.Duration
	// Timeout bounds each try of a read, stat, list, delete or check
	// (default 30s); UploadTimeout each try of an upload (default 10m).
	Timeout, UploadTimeout time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = 4
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 100 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 2 * time.Second
	}
	if p.Timeout <= 0 {
		p.Timeout = 30 * time.Second
	}
	if p.UploadTimeout <= 0 {
		p.UploadTimeout = 10 * time.Minute
	}
	return p
}

// WithRetries retries transient failures with backoff and bounds every try
// with a timeout. An upload is retried only when its reader can seek back to
// where it started.
func WithRetries(b Bucket, p RetryPolicy) Bucket {
	return &retrying{Bucket: b, p: p.withDefaults()}
}

type retrying struct {
	Bucket
	p RetryPolicy
}

func (r *retrying) do(ctx context.Context, op Op, canRetry bool, rewind func() error, f func(context.Context) error) error {
	timeout := r.p.Timeout
	if op == OpUpload || op == OpUploadIf {
		timeout = r.p.UploadTimeout
	}
	delay := r.p.BaseDelay
	var err error
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, timeout)
		err = f(tctx)
		timedOut := tctx.Err() == context.DeadlineExceeded && ctx.Err() == nil
		cancel()
		if err == nil {
			return nil
		}
		if timedOut {
			err = fmt.Errorf("%s %s: no answer within %s: %w", r.Kind(), op, timeout, err)
		}
		if !canRetry || attempt >= r.p.Attempts || ctx.Err() != nil || !(timedOut || IsTransient(err)) {
			return err
		}
		if rewind != nil {
			if rerr := rewind(); rerr != nil {
				return err
			}
		}
		sleep := delay/2 + rand.N(delay/2+1)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(sleep):
		}
		delay = min(2*delay, r.p.MaxDelay)
	}
}

func (r *retrying) Upload(ctx context.Context, name string, rd io.Reader) error {
	seeker, ok := rd.(io.Seeker)
	var start int64
	if ok {
		var err error
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			ok = false
		}
	}
	rewind := func() error { _, err := seeker.Seek(start, io.SeekStart); return err }
	return r.do(ctx, OpUpload, ok, rewind, func(ctx context.Context) error {
		return r.Bucket.Upload(ctx, name, rd)
	})
}

// UploadIf is retried, like Upload, only on transient failures and when
// its stream can rewind; never on a failed precondition. A try that timed out
// may have written: the retry then fails its precondition, and the caller
// re-reads (see Bucket.UploadIf).
func (r *retrying) UploadIf(ctx context.Context, name string, rd io.Reader, match Version) error {
	seeker, ok := rd.(io.Seeker)
	var start int64
	if ok {
		var err error
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			ok = false
		}
	}
	rewind := func() error { _, err := seeker.Seek(start, io.SeekStart); return err }
	return r.do(ctx, OpUploadIf, ok, rewind, func(ctx context.Context) error {
		return r.Bucket.UploadIf(ctx, name, rd, match)
	})
}

func (r *retrying) ReadVersioned(ctx context.Context, name string) (data []byte, v Version, err error) {
	err = r.do(ctx, OpReadVersioned, true, nil, func(ctx context.Context) error {
		var e error
		data, v, e = r.Bucket.ReadVersioned(ctx, name)
		return e
	})
	return data, v, err
}

func (r *retrying) ReadAt(ctx context.Context, name string, p []byte, off int64) (n int, err error) {
	var eof error // io.EOF is an answer, not a failure to retry
	err = r.do(ctx, OpReadAt, true, nil, func(ctx context.Context) error {
		var e error
		n, e = r.Bucket.ReadAt(ctx, name, p, off)
		if errors.Is(e, io.EOF) {
			eof, e = e, nil
		}
		return e
	})
	if err != nil {
		return n, err
	}
	return n, eof
}

func (r *retrying) Stat(ctx context.Context, name string) (a Attrs, err error) {
	err = r.do(ctx, OpStat, true, nil, func(ctx context.Context) error {
		var e error
		a, e = r.Bucket.Stat(ctx, name)
		return e
	})
	return a, err
}

// List is retried only until fn has seen an object, so fn never sees one twice.
func (r *retrying) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	seen := false
	var fnErr error
	err := r.do(ctx, OpList, true, nil, func(ctx context.Context) error {
		e := r.Bucket.List(ctx, prefix, func(a Attrs) error {
			seen = true
			fnErr = fn(a)
			return fnErr
		})
		if seen && e != nil {
			return final{e}
		}
		return e
	})
	var f final
	if errors.As(err, &f) {
		return f.err
	}
	return err
}

// final stops retries of an operation that must not repeat.
type final struct{ err error }

func (f final) Error() string { return f.err.Error() }

func (r *retrying) Delete(ctx context.Context, name string) error {
	return r.do(ctx, OpDelete, true, nil, func(ctx context.Context) error { return r.Bucket.Delete(ctx, name) })
}

func (r *retrying) Check(ctx context.Context) error {
	return r.do(ctx, OpCheck, true, nil, func(ctx context.Context) error { return r.Bucket.Check(ctx) })
}

func (r *retrying) AbortIncomplete(ctx context.Context, name string, olderThan time.Duration) (n int, err error) {
	err = r.do(ctx, OpAbort, true, nil, func(ctx context.Context) error {
		var e error
		n, e = r.Bucket.AbortIncomplete(ctx, name, olderThan)
		return e
	})
	return n, err
}

func (r *retrying) SweepTemp(ctx context.Context, olderThan time.Duration) (n int, err error) {
	err = r.do(ctx, OpSweep, true, nil, func(ctx context.Context) error {
		var e error
		n, e = r.Bucket.SweepTemp(ctx, olderThan)
		return e
	})
	return n, err
}
