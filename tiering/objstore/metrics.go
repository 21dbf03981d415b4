package objstore

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what every instrumented Bucket does, labelled by backend
// and operation. Create one per registry and Instrument each bucket with it.
type Metrics struct {
	ops       *prometheus.CounterVec
	failures  *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	conflicts *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

// NewMetrics registers the object-store metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	labels := []string{"backend", "operation"}
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_objstore_operations_total",
			Help: "Object-store operations started.",
		}, labels),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_objstore_operation_failures_total",
			Help: "Object-store operations that failed (a missing object is not a failure).",
		}, labels),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_objstore_bytes_total",
			Help: "Bytes uploaded (operation=upload, upload_if) and read (operation=read_at, read_versioned).",
		}, labels),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_objstore_preconditions_failed_total",
			Help: "Conditional writes refused because the object had changed since it was read (another writer won; the caller re-reads). Not failures.",
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "strata_objstore_operation_duration_seconds",
			Help:    "Object-store operation latency.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5ms .. ~65s
		}, labels),
	}
	reg.MustRegister(m.ops, m.failures, m.bytes, m.conflicts, m.duration)
	return m
}

// Instrument returns b with every operation counted and timed.
func (m *Metrics) Instrument(b Bucket) Bucket {
	i := &instrumented{Bucket: b, ops: map[Op]opMetrics{}}
	for _, op := range Ops {
		l := prometheus.Labels{"backend": b.Kind(), "operation": string(op)}
		// Children are looked up once here, not on every read.
		i.ops[op] = opMetrics{m.ops.With(l), m.failures.With(l), m.bytes.With(l), m.conflicts.With(l), m.duration.With(l)}
	}
	return i
}

type opMetrics struct {
	ops, failures, bytes, conflicts prometheus.Counter
	duration                        prometheus.Observer
}

type instrumented struct {
	Bucket
	ops map[Op]opMetrics
}

func (i *instrumented) observe(op Op, start time.Time, n int64, err error) {
	m := i.ops[op]
	m.ops.Inc()
	m.duration.Observe(time.Since(start).Seconds())
	if n > 0 {
		m.bytes.Add(float64(n))
	}
	switch {
	case err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, io.EOF):
	case errors.Is(err, ErrPreconditionFailed):
		m.conflicts.Inc()
	default:
		m.failures.Inc()
	}
}

func (i *instrumented) Upload(ctx context.Context, name string, r io.Reader) error {
	start := time.Now()
	cr := &countingReader{r: r}
	var rd io.Reader = cr
	if s, ok := r.(io.ReadSeeker); ok { // keep the upload retryable and its size known
		rd = &countingReadSeeker{countingReader: cr, s: s}
	}
	err := i.Bucket.Upload(ctx, name, rd)
	i.observe(OpUpload, start, cr.n, err)
	return err
}

func (i *instrumented) UploadIf(ctx context.Context, name string, r io.Reader, match Version) error {
	start := time.Now()
	cr := &countingReader{r: r}
	var rd io.Reader = cr
	if s, ok := r.(io.ReadSeeker); ok {
		rd = &countingReadSeeker{countingReader: cr, s: s}
	}
	err := i.Bucket.UploadIf(ctx, name, rd, match)
	i.observe(OpUploadIf, start, cr.n, err)
	return err
}

func (i *instrumented) ReadVersioned(ctx context.Context, name string) ([]byte, Version, error) {
	start := time.Now()
	data, v, err := i.Bucket.ReadVersioned(ctx, name)
	i.observe(OpReadVersioned, start, int64(len(data)), err)
	return data, v, err
}

func (i *instrumented) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	start := time.Now()
	n, err := i.Bucket.ReadAt(ctx, name, p, off)
	i.observe(OpReadAt, start, int64(n), err)
	return n, err
}

func (i *instrumented) Stat(ctx context.Context, name string) (Attrs, error) {
	start := time.Now()
	a, err := i.Bucket.Stat(ctx, name)
	i.observe(OpStat, start, 0, err)
	return a, err
}

func (i *instrumented) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	start := time.Now()
	err := i.Bucket.List(ctx, prefix, fn)
	i.observe(OpList, start, 0, err)
	return err
}

func (i *instrumented) Delete(ctx context.Context, name string) error {
	start := time.Now()
	err := i.Bucket.Delete(ctx, name)
	i.observe(OpDelete, start, 0, err)
	return err
}

func (i *instrumented) Check(ctx context.Context) error {
	start := time.Now()
	err := i.Bucket.Check(ctx)
	i.observe(OpCheck, start, 0, err)
	return err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type countingReadSeeker struct {
	*countingReader
	s io.ReadSeeker
}

// Seek restarts the count with the stream, so a retried upload counts once.
func (c *countingReadSeeker) Seek(off int64, whence int) (int64, error) {
	pos, err := c.s.Seek(off, whence)
	if err == nil && whence == io.SeekStart {
		c.n = pos
	}
	return pos, err
}

// Size passes on a known length, so a backend can skip multipart for it.
func (c *countingReadSeeker) Size() int64 {
	if s, ok := c.s.(interface{ Size() int64 }); ok {
		return s.Size()
	}
	return -1
}

func (i *instrumented) AbortIncomplete(ctx context.Context, name string, olderThan time.Duration) (int, error) {
	start := time.Now()
	n, err := i.Bucket.AbortIncomplete(ctx, name, olderThan)
	i.observe(OpAbort, start, 0, err)
	return n, err
}

func (i *instrumented) SweepTemp(ctx context.Context, olderThan time.Duration) (int, error) {
	start := time.Now()
	n, err := i.Bucket.SweepTemp(ctx, olderThan)
	i.observe(OpSweep, start, 0, err)
	return n, err
}
