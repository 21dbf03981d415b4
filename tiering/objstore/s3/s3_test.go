package s3_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"strata/internal/testsvc"
	"strata/tiering/objstore"
	"strata/tiering/objstore/faulty"
	"strata/tiering/objstore/objtest"
	"strata/tiering/objstore/s3"
)

const bucket = "strata-objstore-test"

func open(t *testing.T) *s3.Bucket { return openAt(t, testsvc.UniquePrefix(t)) }

func openAt(t *testing.T, prefix string) *s3.Bucket {
	m := testsvc.StartMinIO(t)
	b, err := s3.New(s3.Config{
		Endpoint:  m.Endpoint,
		Bucket:    m.Bucket(t, bucket),
		Prefix:    prefix,
		AccessKey: m.AccessKey,
		SecretKey: m.SecretKey,
		PartSize:  5 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestContract(t *testing.T) {
	prefixes := map[objstore.Bucket]string{}
	objtest.Run(t, func(t *testing.T) objstore.Bucket {
		prefix := testsvc.UniquePrefix(t)
		b := openAt(t, prefix)
		prefixes[b] = prefix
		return b
	}, objtest.Options{
		// Another node's client on the same bucket and prefix.
		Peer: func(t *testing.T, b objstore.Bucket) objstore.Bucket { return openAt(t, prefixes[b]) },
	})
}

func incomplete(t *testing.T, c *minio.Client, prefix string) []string {
	var keys []string
	for up := range c.ListIncompleteUploads(context.Background(), bucket, prefix, true) {
		if up.Err != nil {
			t.Fatal(up.Err)
		}
		keys = append(keys, up.Key)
	}
	return keys
}

// A stream cut after two parts went up must not leave their bytes behind.
func TestCutMultipartUploadIsAborted(t *testing.T) {
	prefix := testsvc.UniquePrefix(t)
	b := openAt(t, prefix)
	f := faulty.Wrap(b)
	f.CutNextUpload(11<<20, nil)
	data := objtest.Random(20<<20, 1)
	err := f.Upload(context.Background(), "cut/obj", struct{ *bytes.Reader }{bytes.NewReader(data)})
	if !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Upload with a cut stream: err %v, want the injected failure", err)
	}
	if _, err := b.Stat(context.Background(), "cut/obj"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat after a cut upload: %v, want ErrNotFound", err)
	}
	if left := incomplete(t, b.Client(), prefix+"/cut/obj"); len(left) != 0 {
		t.Fatalf("cut upload left incomplete multipart uploads: %q", left)
	}
}

// Parts a crashed writer left behind are aborted by AbortIncomplete.
func TestAbortIncomplete(t *testing.T) {
	prefix := testsvc.UniquePrefix(t)
	b := openAt(t, prefix)
	// Begun, never finished: what a writer killed mid-upload leaves.
	key := prefix + "/orphan"
	if _, err := (minio.Core{Client: b.Client()}).NewMultipartUpload(context.Background(), bucket, key, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := incomplete(t, b.Client(), key); len(got) != 1 {
		t.Fatalf("setup: incomplete uploads %q, want one", got)
	}
	n, err := b.AbortIncomplete(context.Background(), "orphan", time.Hour)
	if err != nil || n != 0 {
		t.Fatalf("AbortIncomplete(1h) of a fresh upload = %d, %v; want 0, nil", n, err)
	}
	n, err = b.AbortIncomplete(context.Background(), "orphan", 0)
	if err != nil || n != 1 {
		t.Fatalf("AbortIncomplete(0) = %d, %v; want 1, nil", n, err)
	}
	if got := incomplete(t, b.Client(), key); len(got) != 0 {
		t.Fatalf("after AbortIncomplete: incomplete uploads %q", got)
	}
}

func TestWrongCredentials(t *testing.T) {
	m := testsvc.StartMinIO(t)
	for _, tc := range []struct{ access, secret, want string }{
		{"nobody", m.SecretKey, "access key not known"},
		{m.AccessKey, "wrong-secret", "secret key rejected"},
	} {
		b, err := s3.New(s3.Config{Endpoint: m.Endpoint, Bucket: m.Bucket(t, bucket), AccessKey: tc.access, SecretKey: tc.secret})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		err = objstore.WithRetries(b, objstore.RetryPolicy{}).Check(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), m.Endpoint) {
			t.Errorf("Check with access key %q: %v; want an error naming %s and saying %q", tc.access, err, m.Endpoint, tc.want)
		}
	}
}

func TestMissingBucket(t *testing.T) {
	m := testsvc.StartMinIO(t)
	b, err := s3.New(s3.Config{Endpoint: m.Endpoint, Bucket: "no-such-bucket", AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Check(context.Background()); err == nil || !strings.Contains(err.Error(), `"no-such-bucket" does not exist`) {
		t.Fatalf("Check of a missing bucket: %v", err)
	}
}

// Nothing listens on the endpoint: the error must come, name it, and come soon.
func TestUnreachableEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	b, err := s3.New(s3.Config{Endpoint: addr, Bucket: bucket, AccessKey: "a", SecretKey: "b"})
	if err != nil {
		t.Fatal(err)
	}
	rb := objstore.WithRetries(b, objstore.RetryPolicy{Attempts: 3, Timeout: 2 * time.Second})
	done := make(chan error, 1)
	go func() { done <- rb.Check(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "cannot reach") {
			t.Fatalf("Check against a closed port: %v; want an error naming %s and saying it cannot be reached", err, addr)
		}
	case <-time.After(time.Minute):
		t.Fatal("Check against a closed port hangs")
	}
}
