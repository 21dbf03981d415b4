package objstore_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	hdfsclient "github.com/colinmarc/hdfs/v2"
	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"

	"strata/bench"
	"strata/internal/testsvc"
	"strata/tiering/objstore"
	"strata/tiering/objstore/hdfs"
	"strata/tiering/objstore/local"
	"strata/tiering/objstore/objtest"
	"strata/tiering/objstore/s3"
)

// plain is the same work done with the backend's own client, no strata.
type plain struct {
	name   string // e.g. "plain minio-go"
	upload func(ctx context.Context, name string, r io.Reader) error
	// readAt reads len(p) bytes at off of an object strata uploaded.
	readAt func(ctx context.Context, name string, p []byte, off int64) error
}

const (
	uploadSize = 256 << 20
	readSize   = 64 << 10
	readObject = 64 << 20
	uploadRuns = 5
	readRuns   = 400
)

// production wraps a backend the way cmd/strata does.
func production(b objstore.Bucket) objstore.Bucket {
	return objstore.NewMetrics(prometheus.NewRegistry()).Instrument(objstore.WithRetries(b, objstore.RetryPolicy{}))
}

func benchBackend(b *testing.B, kind string, strata objstore.Bucket, ref plain) {
	ctx := context.Background()
	strata = production(strata)
	data := objtest.Random(uploadSize, 1)
	stream := func() io.Reader { return struct{ io.Reader }{bytes.NewReader(data)} } // size unknown, as a converter streams

	var strataMBs, plainMBs []float64
	for run := 0; run < uploadRuns; run++ {
		start := time.Now()
		if err := ref.upload(ctx, "bench/plain-upload", stream()); err != nil {
			b.Fatal(err)
		}
		plainMBs = append(plainMBs, float64(uploadSize)/1e6/time.Since(start).Seconds())
		start = time.Now()
		if err := strata.Upload(ctx, "bench/upload", stream()); err != nil {
			b.Fatal(err)
		}
		strataMBs = append(strataMBs, float64(uploadSize)/1e6/time.Since(start).Seconds())
	}
	report(b, bench.Figure{Name: "objstore/" + kind + " upload 256MiB", Value: bench.Median(strataMBs), Unit: "MB/s",
		Reference: ref.name, ReferenceValue: bench.Median(plainMBs), Target: ">= 0.90", Runs: uploadRuns})

	if err := strata.Upload(ctx, "bench/read", bytes.NewReader(data[:readObject])); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(2, 3))
	p := make([]byte, readSize)
	var strataLat, plainLat []time.Duration
	for i := 0; i < readRuns; i++ {
		off := r.Int64N(readObject - readSize)
		start := time.Now()
		if err := ref.readAt(ctx, "bench/read", p, off); err != nil {
			b.Fatal(err)
		}
		plainLat = append(plainLat, time.Since(start))
		start = time.Now()
		if _, err := strata.ReadAt(ctx, "bench/read", p, off); err != nil {
			b.Fatal(err)
		}
		strataLat = append(strataLat, time.Since(start))
		if !bytes.Equal(p, data[off:off+readSize]) {
			b.Fatal("ranged read returned the wrong bytes")
		}
	}
	for _, pct := range []float64{50, 99} {
		report(b, bench.Figure{Name: "objstore/" + kind + " 64KiB ranged read p" + strconv.Itoa(int(pct)), Value: bench.Ms(bench.Percentile(strataLat, pct)),
			Unit: "ms", Reference: ref.name, ReferenceValue: bench.Ms(bench.Percentile(plainLat, pct)), Target: "<= 1.10", Runs: readRuns})
	}
}

func report(b *testing.B, f bench.Figure) {
	bench.Must(b, "make bench (go test -bench Objstore ./tiering/objstore)", f)
}

func BenchmarkObjstoreS3(b *testing.B) {
	m := testsvc.StartMinIO(b)
	prefix := testsvc.UniquePrefix(b)
	bucket := m.Bucket(b, "strata-bench")
	const part = 16 << 20
	sb, err := s3.New(s3.Config{Endpoint: m.Endpoint, Bucket: bucket, Prefix: prefix, AccessKey: m.AccessKey, SecretKey: m.SecretKey, PartSize: part})
	if err != nil {
		b.Fatal(err)
	}
	// Closed, as every client here is, for goleak's check after the run.
	b.Cleanup(func() { sb.Close() })
	c := m.Client(b)
	core := minio.Core{Client: c}
	benchBackend(b, "s3", sb, plain{
		name: "plain minio-go",
		upload: func(ctx context.Context, name string, r io.Reader) error {
			_, err := c.PutObject(ctx, bucket, prefix+"/"+name, r, -1, minio.PutObjectOptions{PartSize: part})
			return err
		},
		readAt: func(ctx context.Context, name string, p []byte, off int64) error {
			opts := minio.GetObjectOptions{}
			opts.SetRange(off, off+int64(len(p))-1)
			body, _, _, err := core.GetObject(ctx, bucket, prefix+"/"+name, opts)
			if err != nil {
				return err
			}
			defer body.Close()
			_, err = io.ReadFull(body, p)
			return err
		},
	})
}

func BenchmarkObjstoreHDFS(b *testing.B) {
	nn := testsvc.StartHDFS(b)
	root := "/" + testsvc.UniquePrefix(b)
	hb, err := hdfs.New(hdfs.Config{NameNodes: []string{nn}, Root: root})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { hb.Close() })
	c, err := hdfsclient.NewClient(hdfsclient.ClientOptions{Addresses: []string{nn}, User: "root"})
	if err != nil {
		b.Fatal(err)
	}
	c.MkdirAll(root+"/bench", 0o755)
	var reader *hdfsclient.FileReader // a plain single-goroutine user keeps one open
	b.Cleanup(func() {
		if reader != nil {
			reader.Close()
		}
		c.Close()
	})
	benchBackend(b, "hdfs", hb, plain{
		name: "plain colinmarc/hdfs",
		upload: func(ctx context.Context, name string, r io.Reader) error {
			c.Remove(root + "/" + name)
			w, err := c.Create(root + "/" + name)
			if err != nil {
				return err
			}
			if _, err := io.Copy(w, r); err != nil {
				return err
			}
			for { // the NameNode may still be replicating the last block
				if err := w.Close(); !hdfsclient.IsErrReplicating(err) {
					return err
				}
				time.Sleep(50 * time.Millisecond)
			}
		},
		readAt: func(ctx context.Context, name string, p []byte, off int64) error {
			if reader == nil {
				if reader, err = c.Open(root + "/" + name); err != nil {
					return err
				}
			}
			_, err := reader.ReadAt(p, off)
			return err
		},
	})
}

func BenchmarkObjstoreLocal(b *testing.B) {
	dir := b.TempDir()
	lb, err := local.New(dir)
	if err != nil {
		b.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "bench"), 0o755)
	var f *os.File
	benchBackend(b, "local", lb, plain{
		name: "plain os.File (write+fsync)",
		upload: func(ctx context.Context, name string, r io.Reader) error {
			w, err := os.Create(filepath.Join(dir, "plain-"+filepath.Base(name)))
			if err != nil {
				return err
			}
			defer w.Close()
			if _, err := io.Copy(w, r); err != nil {
				return err
			}
			return w.Sync()
		},
		readAt: func(ctx context.Context, name string, p []byte, off int64) error {
			if f == nil {
				if f, err = os.Open(filepath.Join(dir, name)); err != nil {
					return err
				}
			}
			_, err := f.ReadAt(p, off)
			return err
		},
	})
}
