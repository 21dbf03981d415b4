// Package faulty wraps a real Bucket to inject failures in tests: fail the
// Nth call of an operation, slow an operation down, or cut an upload's
// stream midway. The wrapped backend stays real; only the faults are fake.
package faulty

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"strata/tiering/objstore"
)

// ErrInjected is the error injected faults return unless told otherwise.
var ErrInjected = errors.New("faulty: injected failure")

// Bucket is a Bucket with faults. Safe for concurrent use.
type Bucket struct {
	objstore.Bucket

	mu     sync.Mutex
	calls  map[objstore.Op]int
	fails  map[objstore.Op]map[int]error // op -> call number -> error
	delays map[objstore.Op]time.Duration
	cutAt  int64 // cut the next upload after this many bytes; -1: no cut
	cutErr error
}

// Wrap returns b with no faults armed yet.
func Wrap(b objstore.Bucket) *Bucket {
	return &Bucket{
		Bucket: b,
		calls:  map[objstore.Op]int{},
		fails:  map[objstore.Op]map[int]error{},
		delays: map[objstore.Op]time.Duration{},
		cutAt:  -1,
	}
}

// FailNth makes the nth call of op from now (1 = the next) fail with err
// (ErrInjected when nil), without reaching the backend.
func (f *Bucket) FailNth(op objstore.Op, n int, err error) {
	if err == nil {
		err = ErrInjected
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails[op] == nil {
		f.fails[op] = map[int]error{}
	}
	f.fails[op][f.calls[op]+n] = err
}

// Delay makes every later call of op wait d first (or until its context ends).
func (f *Bucket) Delay(op objstore.Op, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delays[op] = d
}

// CutNextUpload makes the next upload's stream fail with err (ErrInjected
// when nil) after n bytes reached the backend.
func (f *Bucket) CutNextUpload(n int64, err error) {
	if err == nil {
		err = ErrInjected
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutAt, f.cutErr = n, err
}

// Calls says how many times op was called, faulted or not.
func (f *Bucket) Calls(op objstore.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *Bucket) enter(ctx context.Context, op objstore.Op) error {
	f.mu.Lock()
	f.calls[op]++
	err := f.fails[op][f.calls[op]]
	delete(f.fails[op], f.calls[op])
	d := f.delays[op]
	f.mu.Unlock()
	if d > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	return err
}

func (f *Bucket) Upload(ctx context.Context, name string, r io.Reader) error {
	if err := f.enter(ctx, objstore.OpUpload); err != nil {
		return err
	}
	f.mu.Lock()
	cutAt, cutErr := f.cutAt, f.cutErr
	f.cutAt = -1
	f.mu.Unlock()
	if cutAt >= 0 {
		r = &cutReader{r: r, left: cutAt, err: cutErr}
	}
	return f.Bucket.Upload(ctx, name, r)
}

// UploadIf faults like Upload (the cut included), and otherwise reaches the
// backend's own conditional write.
func (f *Bucket) UploadIf(ctx context.Context, name string, r io.Reader, match objstore.Version) error {
	if err := f.enter(ctx, objstore.OpUploadIf); err != nil {
		return err
	}
	f.mu.Lock()
	cutAt, cutErr := f.cutAt, f.cutErr
	f.cutAt = -1
	f.mu.Unlock()
	if cutAt >= 0 {
		r = &cutReader{r: r, left: cutAt, err: cutErr}
	}
	return f.Bucket.UploadIf(ctx, name, r, match)
}

func (f *Bucket) ReadVersioned(ctx context.Context, name string) ([]byte, objstore.Version, error) {
	if err := f.enter(ctx, objstore.OpReadVersioned); err != nil {
		return nil, "", err
	}
	return f.Bucket.ReadVersioned(ctx, name)
}

type cutReader struct {
	r    io.Reader
	left int64
	err  error
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, c.err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func (f *Bucket) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	if err := f.enter(ctx, objstore.OpReadAt); err != nil {
		return 0, err
	}
	return f.Bucket.ReadAt(ctx, name, p, off)
}

func (f *Bucket) Stat(ctx context.Context, name string) (objstore.Attrs, error) {
	if err := f.enter(ctx, objstore.OpStat); err != nil {
		return objstore.Attrs{}, err
	}
	return f.Bucket.Stat(ctx, name)
}

func (f *Bucket) List(ctx context.Context, prefix string, fn func(objstore.Attrs) error) error {
	if err := f.enter(ctx, objstore.OpList); err != nil {
		return err
	}
	return f.Bucket.List(ctx, prefix, fn)
}

func (f *Bucket) Delete(ctx context.Context, name string) error {
	if err := f.enter(ctx, objstore.OpDelete); err != nil {
		return err
	}
	return f.Bucket.Delete(ctx, name)
}

func (f *Bucket) Check(ctx context.Context) error {
	if err := f.enter(ctx, objstore.OpCheck); err != nil {
		return err
	}
	return f.Bucket.Check(ctx)
}

func (f *Bucket) AbortIncomplete(ctx context.Context, name string, olderThan time.Duration) (int, error) {
	if err := f.enter(ctx, objstore.OpAbort); err != nil {
		return 0, err
	}
	return f.Bucket.AbortIncomplete(ctx, name, olderThan)
}

func (f *Bucket) SweepTemp(ctx context.Context, olderThan time.Duration) (int, error) {
	if err := f.enter(ctx, objstore.OpSweep); err != nil {
		return 0, err
	}
	return f.Bucket.SweepTemp(ctx, olderThan)
}
