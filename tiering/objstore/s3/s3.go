// Package s3 is the Bucket for S3 and S3-compatible stores (MinIO), on
// minio-go.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"strata/tiering/objstore"
)

// Config says where the bucket lives and how to reach it.
type Config struct {
	Endpoint string // host:port, no scheme
	Region   string
	Bucket   string
	// Prefix is prepended (with a slash) to every object name.
	Prefix string
	// AccessKey and SecretKey; when empty, AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) from the environment.
	AccessKey, SecretKey string
	// TLS turns on https.
	TLS bool
	// Addressing is "path" (MinIO's usual), "virtual" (bucket.host) or "auto".
	Addressing string
	// PartSize is the multipart part size for uploads (default 16 MiB,
	// at least 5 MiB as S3 requires). A streamed upload holds up to two
	// parts in memory (uploadThreads).
	PartSize uint64
	// DialTimeout bounds each connection attempt (default 5s).
	DialTimeout time.Duration
}

const (
	defaultPartSize = 16 << 20
	minPartSize     = 5 << 20
	// uploadThreads is how many parts of a streamed upload are in flight
	// (and in memory) at once: two is enough for the next part to fill
	// while one is sent.
	uploadThreads = 2
)

// Bucket stores objects in one S3 bucket under Prefix.
type Bucket struct {
	cfg       Config
	client    *minio.Client
	core      minio.Core
	transport *http.Transport
}

// New builds a client; it does not contact the endpoint (see Check).
func New(cfg Config) (*Bucket, error) {
	if cfg.Endpoint == "" || strings.Contains(cfg.Endpoint, "://") {
		return nil, fmt.Errorf("s3 bucket: endpoint %q must be host:port without a scheme", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("s3 bucket: no bucket name given")
	}
	cfg.Prefix = strings.Trim(cfg.Prefix, "/")
	if cfg.PartSize == 0 {
		cfg.PartSize = defaultPartSize
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("s3 bucket: part size %d is below S3's minimum of %d bytes", cfg.PartSize, minPartSize)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	lookup := minio.BucketLookupPath
	switch cfg.Addressing {
	case "", "path":
	case "virtual":
		lookup = minio.BucketLookupDNS
	case "auto":
		lookup = minio.BucketLookupAuto
	default:
		return nil, fmt.Errorf("s3 bucket: addressing %q: want path, virtual or auto", cfg.Addressing)
	}
	creds := credentials.NewEnvAWS()
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	}
	transport, err := minio.DefaultTransport(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("s3 bucket: %w", err)
	}
	transport.DialContext = (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	transport.ResponseHeaderTimeout = 30 * time.Second
	transport.MaxIdleConnsPerHost = 64
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        creds,
		Secure:       cfg.TLS,
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    transport,
		// objstore.WithRetries decides what to retry, and how long to try.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 bucket at %s: %w", cfg.Endpoint, err)
	}
	return &Bucket{cfg: cfg, client: client, core: minio.Core{Client: client}, transport: transport}, nil
}

// Client exposes the minio-go client, for tests and benchmarks that compare
// against plain minio-go.
func (b *Bucket) Client() *minio.Client { return b.client }

func (b *Bucket) Kind() string { return "s3" }

// Close closes the bucket's idle connections: the client's keep-alive
// pool would otherwise hold them, and a goroutine for each, for good.
func (b *Bucket) Close() error {
	b.transport.CloseIdleConnections()
	return nil
}

func (b *Bucket) key(name string) string {
	if b.cfg.Prefix == "" {
		return name
	}
	return b.cfg.Prefix + "/" + name
}

// Upload streams r in parts of PartSize; S3 publishes an object only when
// the upload completes, and minio-go aborts the multipart upload on failure.
func (b *Bucket) Upload(ctx context.Context, name string, r io.Reader) error {
	if err := objstore.ValidateName(name); err != nil {
		return err
	}
	size := int64(-1)
	if s, ok := r.(interface{ Size() int64 }); ok {
		size = s.Size()
	}
	opts := minio.PutObjectOptions{PartSize: b.cfg.PartSize, ContentType: "application/octet-stream"}
	if size < 0 {
		// A stream of unknown length (the tiering conversion): parts are
		// filled one after another and sent up to uploadThreads at once, so
		// reading the stream goes on while a part is sent; one part at a
		// time made the converter wait for every part's round trip.
		opts.ConcurrentStreamParts, opts.NumThreads = true, uploadThreads
	}
	_, err := b.client.PutObject(ctx, b.cfg.Bucket, b.key(name), r, size, opts)
	if err != nil {
		return b.wrap("upload", name, err)
	}
	return nil
}

// ReadVersioned makes one GET: the body and the ETag come from the same
// response, so the version is that of the bytes returned (a Stat and a read
// could straddle another writer's PUT).
func (b *Bucket) ReadVersioned(ctx context.Context, name string) ([]byte, objstore.Version, error) {
	if err := objstore.ValidateName(name); err != nil {
		return nil, "", err
	}
	body, info, _, err := b.core.GetObject(ctx, b.cfg.Bucket, b.key(name), minio.GetObjectOptions{})
	if err != nil {
		return nil, "", b.wrap("read", name, err)
	}
	defer body.Close()
	if info.Size > objstore.MaxConditionalSize {
		return nil, "", fmt.Errorf("s3 read %q: %d bytes, more than a versioned read takes (%d)", name, info.Size, objstore.MaxConditionalSize)
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, "", b.wrap("read", name, err)
	}
	if info.ETag == "" {
		return nil, "", fmt.Errorf("s3 read %q at %s: the response carries no ETag, so it cannot be written conditionally", name, b.cfg.Endpoint)
	}
	return data, objstore.Version(info.ETag), nil
}

// UploadIf is one PUT with If-Match (the ETag read) or If-None-Match: *
// (absent), which the server checks and applies atomically: S3 since
// August 2024 (If-Match since November 2024), MinIO since its 2024
// releases; the MinIO that scripts/services runs does (objtest's
// ConditionalWrites cases). A store that ignores the headers would turn it
// into a plain PUT: objtest's cases catch that. The body is buffered so the
// PUT is a single request (conditions on multipart uploads are checked at
// completion, and not by every store).
func (b *Bucket) UploadIf(ctx context.Context, name string, r io.Reader, match objstore.Version) error {
	if err := objstore.ValidateName(name); err != nil {
		return err
	}
	data, err := objstore.ReadSmall(ctx, "s3", name, r)
	if err != nil {
		return err
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
	if match == objstore.Absent {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(string(match))
	}
	_, err = b.client.PutObject(ctx, b.cfg.Bucket, b.key(name), bytes.NewReader(data), int64(len(data)), opts)
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed",
		// S3: a conditional write raced another one to the same key.
		resp.StatusCode == http.StatusConflict && resp.Code == "ConditionalRequestConflict",
		// If-Match on an object that is gone.
		match != objstore.Absent && (resp.Code == "NoSuchKey" || resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket"):
		return objstore.PreconditionFailed("s3", name, match)
	}
	return b.wrap("upload", name, err)
}

// ReadAt makes one ranged GET.
func (b *Bucket) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	if err := objstore.CheckReadAt(name, off); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+int64(len(p))-1); err != nil {
		return 0, err
	}
	body, _, _, err := b.core.GetObject(ctx, b.cfg.Bucket, b.key(name), opts)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "InvalidRange" {
			return 0, io.EOF
		}
		return 0, b.wrap("read", name, err)
	}
	defer body.Close()
	n, err := io.ReadFull(body, p)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return n, io.EOF
	default:
		return n, b.wrap("read", name, err)
	}
}

func (b *Bucket) Stat(ctx context.Context, name string) (objstore.Attrs, error) {
	if err := objstore.ValidateName(name); err != nil {
		return objstore.Attrs{}, err
	}
	info, err := b.client.StatObject(ctx, b.cfg.Bucket, b.key(name), minio.StatObjectOptions{})
	if err != nil {
		return objstore.Attrs{}, b.wrap("stat", name, err)
	}
	return objstore.Attrs{Name: name, Size: info.Size, ModTime: info.LastModified, ETag: info.ETag}, nil
}

func (b *Bucket) List(ctx context.Context, prefix string, fn func(objstore.Attrs) error) error {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine if fn fails
	full := b.key(prefix)
	if prefix == "" && b.cfg.Prefix != "" {
		full = b.cfg.Prefix + "/"
	}
	strip := len(b.key(""))
	if b.cfg.Prefix == "" {
		strip = 0
	}
	objs := b.client.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true})
	defer func() {
		// Cancelled, minio-go's goroutine still sends the context's error,
		// and blocks until it is read: drain what is left, or it waits
		// for good.
		cancel()
		for range objs {
		}
	}()
	for obj := range objs {
		if obj.Err != nil {
			return b.wrap("list", prefix, obj.Err)
		}
		err := fn(objstore.Attrs{Name: obj.Key[strip:], Size: obj.Size, ModTime: obj.LastModified, ETag: obj.ETag})
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *Bucket) Delete(ctx context.Context, name string) error {
	if err := objstore.ValidateName(name); err != nil {
		return err
	}
	if err := b.client.RemoveObject(ctx, b.cfg.Bucket, b.key(name), minio.RemoveObjectOptions{}); err != nil {
		return b.wrap("delete", name, err)
	}
	return nil
}

// Check proves the endpoint answers, the credentials are accepted and the
// bucket exists.
func (b *Bucket) Check(ctx context.Context) error {
	ok, err := b.client.BucketExists(ctx, b.cfg.Bucket)
	if err != nil {
		return fmt.Errorf("s3 endpoint %s, bucket %q: %s", b.cfg.Endpoint, b.cfg.Bucket, describe(err))
	}
	if !ok {
		return fmt.Errorf("s3 endpoint %s: bucket %q does not exist", b.cfg.Endpoint, b.cfg.Bucket)
	}
	return nil
}

// AbortIncomplete aborts the unfinished multipart uploads of one object
// that started more than olderThan ago (olderThan <= 0: all of them): the
// parts a crashed writer left, which S3 keeps (and bills) until aborted.
// It takes a name, not a prefix, because MinIO lists incomplete uploads only
// by exact object name; the tiering job knows which names it was uploading.
// Returns how many it aborted.
func (b *Bucket) AbortIncomplete(ctx context.Context, name string, olderThan time.Duration) (int, error) {
	if err := objstore.ValidateName(name); err != nil {
		return 0, err
	}
	cutoff := time.Now().Add(-olderThan)
	n := 0
	for up := range b.client.ListIncompleteUploads(ctx, b.cfg.Bucket, b.key(name), false) {
		if up.Err != nil {
			return n, b.wrap("list incomplete uploads", name, up.Err)
		}
		if up.Key != b.key(name) || (olderThan > 0 && up.Initiated.After(cutoff)) {
			continue
		}
		if err := b.core.AbortMultipartUpload(ctx, b.cfg.Bucket, up.Key, up.UploadID); err != nil {
			return n, b.wrap("abort upload", name, err)
		}
		n++
	}
	return n, nil
}

// SweepTemp has nothing to do: S3 stages no files (unfinished multipart
// uploads are per object: AbortIncomplete).
func (b *Bucket) SweepTemp(context.Context, time.Duration) (int, error) { return 0, nil }

func (b *Bucket) wrap(op, name string, err error) error {
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == "NoSuchKey" || (resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket"):
		return objstore.NotFound("s3", name)
	case resp.StatusCode >= 500 || resp.Code == "SlowDown" || resp.Code == "RequestTimeout":
		err = objstore.Transient(err)
	}
	return fmt.Errorf("s3 %s %q at %s/%s: %s: %w", op, name, b.cfg.Endpoint, b.cfg.Bucket, describe(err), err)
}

// describe turns an S3 error response into words an operator can act on.
func describe(err error) string {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "InvalidAccessKeyId":
		return "access key not known to the server (check AWS_ACCESS_KEY_ID or the config's access key)"
	case "SignatureDoesNotMatch":
		return "secret key rejected (check AWS_SECRET_ACCESS_KEY or the config's secret key)"
	case "AccessDenied":
		return "access denied for these credentials"
	case "NoSuchBucket":
		return "bucket does not exist"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return "cannot reach the endpoint"
	}
	if resp.Code != "" {
		return resp.Code
	}
	return "request failed"
}
