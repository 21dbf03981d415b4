// Package objtest is the acceptance suite every objstore backend must pass.
// A backend's test calls Run with a function that opens a fresh, empty
// bucket (a new prefix or folder) on the real service.
package objtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"strata/tiering/objstore"
)

// Options tunes the suite to a backend.
type Options struct {
	// LargeSize is the size of the "multi-part" object: big enough that the
	// backend splits it (S3 parts, HDFS blocks). Default 11 MiB.
	LargeSize int
	// Peer opens a second bucket on b's storage, as another process (another
	// node sharing the cold tier) opens it. Required: every backend is
	// shared by a cluster's nodes.
	Peer func(t *testing.T, b objstore.Bucket) objstore.Bucket
}

// Run runs every contract test against buckets made by open.
func Run(t *testing.T, open func(t *testing.T) objstore.Bucket, opts Options) {
	if opts.Peer == nil {
		t.Fatal("objtest.Options.Peer is required: a second bucket on the same storage, as another node opens it")
	}
	if opts.LargeSize == 0 {
		opts.LargeSize = 11 << 20
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, b objstore.Bucket)
	}{
		{"RoundTrip", func(t *testing.T, b objstore.Bucket) { testRoundTrip(t, b, opts.LargeSize) }},
		{"RangedReads", testRangedReads},
		{"ConcurrentRangedReads", testConcurrentReads},
		{"ConcurrentUploads", testConcurrentUploads},
		{"ListOrder", testListOrder},
		{"ListStopsOnError", testListStops},
		{"Overwrite", testOverwrite},
		{"Delete", testDelete},
		{"NotFound", testNotFound},
		{"InvalidNames", testInvalidNames},
		{"NoPartialUpload", testNoPartialUpload},
		{"FailedUploadKeepsOld", testFailedUploadKeepsOld},
		{"CancelledUpload", testCancelledUpload},
		{"CleanupAfterInterruptedUploads", testCleanup},
		{"ConditionalCreate", testConditionalCreate},
		{"ConditionalUpdate", testConditionalUpdate},
		{"ConditionalIncrementsLoseNothing", testConcurrentIncrements},
		{"ReplacedByAPeer", func(t *testing.T, b objstore.Bucket) { testReplacedByPeer(t, b, opts.Peer) }},
		{"Check", func(t *testing.T, b objstore.Bucket) {
			if err := b.Check(context.Background()); err != nil {
				t.Fatalf("Check on a working bucket: %v", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := open(t)
			t.Cleanup(func() { b.Close() })
			tc.fn(t, b)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// Random returns n reproducible pseudo-random bytes.
func Random(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n - n%8; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func upload(t *testing.T, b objstore.Bucket, name string, data []byte) {
	t.Helper()
	if err := b.Upload(ctx(t), name, bytes.NewReader(data)); err != nil {
		t.Fatalf("Upload(%q, %d bytes): %v", name, len(data), err)
	}
}

func mustRead(t *testing.T, b objstore.Bucket, name string) []byte {
	t.Helper()
	got, err := objstore.ReadAll(ctx(t), b, name)
	if err != nil {
		t.Fatalf("ReadAll(%q): %v", name, err)
	}
	return got
}

func testRoundTrip(t *testing.T, b objstore.Bucket, large int) {
	for _, tc := range []struct {
		name string
		size int
		// streamed hides the size, as a converter writing Parquet does.
		streamed bool
	}{
		{"empty", 0, false},
		{"one-byte", 1, false},
		{"small", 4093, false},
		{"small-streamed", 4093, true},
		{"multipart", large, false},
		{"multipart-streamed", large + 12345, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := Random(tc.size, uint64(tc.size))
			name := "round/" + tc.name + ".bin"
			var r io.Reader = bytes.NewReader(data)
			if tc.streamed {
				r = struct{ io.Reader }{r}
			}
			if err := b.Upload(ctx(t), name, r); err != nil {
				t.Fatalf("Upload: %v", err)
			}
			a, err := b.Stat(ctx(t), name)
			if err != nil {
				t.Fatalf("Stat: %v", err)
			}
			if a.Size != int64(tc.size) || a.Name != name {
				t.Fatalf("Stat = %+v, want name %q size %d", a, name, tc.size)
			}
			if got := mustRead(t, b, name); !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes that differ from the %d uploaded", len(got), len(data))
			}
		})
	}
}

func testRangedReads(t *testing.T, b objstore.Bucket) {
	const size = 1 << 20
	data := Random(size, 7)
	upload(t, b, "ranged/obj", data)
	for _, tc := range []struct {
		name    string
		off     int64
		len     int
		wantN   int
		wantEOF bool
	}{
		{"start", 0, 100, 100, false},
		{"middle", size / 2, 64 << 10, 64 << 10, false},
		{"exact-end", size - 100, 100, 100, false},
		{"across-end", size - 50, 100, 50, true},
		{"at-end", size, 10, 0, true},
		{"past-end", size + 1000, 10, 0, true},
		{"empty-buffer", 10, 0, 0, false},
		{"whole", 0, size, size, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := make([]byte, tc.len)
			n, err := b.ReadAt(ctx(t), "ranged/obj", p, tc.off)
			if n != tc.wantN {
				t.Fatalf("ReadAt(off %d, len %d) n = %d, want %d (err %v)", tc.off, tc.len, n, tc.wantN, err)
			}
			switch {
			case tc.wantEOF && !errors.Is(err, io.EOF):
				t.Fatalf("ReadAt(off %d, len %d) err = %v, want io.EOF", tc.off, tc.len, err)
			case !tc.wantEOF && err != nil && !(errors.Is(err, io.EOF) && n == tc.len):
				// io.ReaderAt allows io.EOF when a read ends exactly at the end.
				t.Fatalf("ReadAt(off %d, len %d) err = %v", tc.off, tc.len, err)
			}
			if tc.off < size {
				if want := data[tc.off : tc.off+int64(n)]; !bytes.Equal(p[:n], want) {
					t.Fatalf("ReadAt(off %d, len %d) returned the wrong bytes", tc.off, tc.len)
				}
			}
		})
	}
	if _, err := b.ReadAt(ctx(t), "ranged/obj", make([]byte, 1), -1); err == nil {
		t.Fatal("ReadAt at a negative offset succeeded")
	}
}

func testConcurrentReads(t *testing.T, b objstore.Bucket) {
	const size = 3 << 20
	data := Random(size, 11)
	upload(t, b, "concurrent/obj", data)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 12; i++ {
				off := r.Int64N(size)
				p := make([]byte, 1+r.IntN(96<<10))
				n, err := b.ReadAt(context.Background(), "concurrent/obj", p, off)
				if err != nil && !errors.Is(err, io.EOF) {
					errs <- fmt.Errorf("goroutine %d: ReadAt(%d): %v", g, off, err)
					return
				}
				if want := data[off : off+int64(n)]; !bytes.Equal(p[:n], want) || (n < len(p) && off+int64(n) != size) {
					errs <- fmt.Errorf("goroutine %d: ReadAt(%d, %d) = %d wrong or short bytes", g, off, len(p), n)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Uploads from many goroutines to a fresh bucket: the tiering job uploads
// several shards at once, and its first uploads are the riskiest.
func testConcurrentUploads(t *testing.T, b objstore.Bucket) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			name := fmt.Sprintf("many/%d", g)
			if err := b.Upload(context.Background(), name, bytes.NewReader(Random(70_000, uint64(g)))); err != nil {
				errs <- fmt.Errorf("upload %s: %v", name, err)
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for g := 0; g < 8; g++ {
		if got := mustRead(t, b, fmt.Sprintf("many/%d", g)); !bytes.Equal(got, Random(70_000, uint64(g))) {
			t.Fatalf("many/%d read back wrong", g)
		}
	}
}

func list(t *testing.T, b objstore.Bucket, prefix string) []string {
	t.Helper()
	var names []string
	err := b.List(ctx(t), prefix, func(a objstore.Attrs) error {
		names = append(names, a.Name)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return names
}

func testListOrder(t *testing.T, b objstore.Bucket) {
	// Chosen so that a depth-first walk and byte order disagree:
	// "l/a-b" < "l/a.b/c" < "l/a/x" in byte order.
	names := []string{"l/a/x", "l/a-b", "l/B", "l/a.b/c", "l/b", "l/a/y/z", "l/a0", "other/q"}
	for i, n := range names {
		upload(t, b, n, []byte{byte(i)})
	}
	all := append([]string(nil), names[:7]...)
	sort.Strings(all)
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"l/", all},
		{"l/a", []string{"l/a-b", "l/a.b/c", "l/a/x", "l/a/y/z", "l/a0"}},
		{"l/a/", []string{"l/a/x", "l/a/y/z"}},
		{"l/b", []string{"l/b"}},
		{"nothing/", nil},
		{"", append(all, "other/q")},
	} {
		got := list(t, b, tc.prefix)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	var sizes []int64
	b.List(ctx(t), "l/b", func(a objstore.Attrs) error { sizes = append(sizes, a.Size); return nil })
	if len(sizes) != 1 || sizes[0] != 1 {
		t.Errorf("List attrs sizes = %v, want [1]", sizes)
	}
}

func testListStops(t *testing.T, b objstore.Bucket) {
	for i := 0; i < 5; i++ {
		upload(t, b, fmt.Sprintf("stop/%d", i), []byte("x"))
	}
	stop := errors.New("stop here")
	seen := 0
	err := b.List(ctx(t), "stop/", func(objstore.Attrs) error {
		seen++
		if seen == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || seen != 2 {
		t.Fatalf("List with fn failing at the 2nd object: err %v after %d calls, want %v after 2", err, seen, stop)
	}
}

func testOverwrite(t *testing.T, b objstore.Bucket) {
	upload(t, b, "over/obj", []byte("first version, longer"))
	upload(t, b, "over/obj", []byte("second"))
	if got := mustRead(t, b, "over/obj"); string(got) != "second" {
		t.Fatalf("after overwrite read %q, want %q", got, "second")
	}
	upload(t, b, "over/obj", []byte("second")) // idempotent retry
	if got := list(t, b, "over/"); len(got) != 1 {
		t.Fatalf("after re-uploading one name, List shows %q", got)
	}
}

func testDelete(t *testing.T, b objstore.Bucket) {
	upload(t, b, "del/obj", []byte("bye"))
	upload(t, b, "del/keep", []byte("stay"))
	mustRead(t, b, "del/obj") // a backend may keep a reader open: Delete must still win
	if err := b.Delete(ctx(t), "del/obj"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := b.ReadAt(ctx(t), "del/obj", make([]byte, 3), 0); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("ReadAt after Delete: err %v, want ErrNotFound", err)
	}
	if _, err := b.Stat(ctx(t), "del/obj"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat after Delete: err %v, want ErrNotFound", err)
	}
	if err := b.Delete(ctx(t), "del/obj"); err != nil {
		t.Fatalf("Delete of a missing object: %v, want nil", err)
	}
	if got := list(t, b, "del/"); strings.Join(got, " ") != "del/keep" {
		t.Fatalf("List after Delete = %q, want [del/keep]", got)
	}
}

func testNotFound(t *testing.T, b objstore.Bucket) {
	upload(t, b, "nf/file", []byte("x"))
	for _, name := range []string{"nf/missing", "nf", "nf/file/below"} {
		if _, err := b.Stat(ctx(t), name); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), name) {
			t.Errorf("Stat(%q): err %v, want ErrNotFound naming the object", name, err)
		}
		if _, err := b.ReadAt(ctx(t), name, make([]byte, 4), 0); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("ReadAt(%q): err %v, want ErrNotFound", name, err)
		}
	}
}

func testInvalidNames(t *testing.T, b objstore.Bucket) {
	bad := []string{"", "/abs", "a/../b", "..", "a/./b", "nul\x00byte", "a//b", "dir/", strings.Repeat("n", 1025), objstore.TempDir + "/x"}
	for _, name := range bad {
		checks := map[string]error{
			"Upload":   b.Upload(ctx(t), name, strings.NewReader("x")),
			"UploadIf": b.UploadIf(ctx(t), name, strings.NewReader("x"), objstore.Absent),
			"Delete":   b.Delete(ctx(t), name),
		}
		_, _, checks["ReadVersioned"] = b.ReadVersioned(ctx(t), name)
		_, checks["Stat"] = b.Stat(ctx(t), name)
		_, checks["ReadAt"] = b.ReadAt(ctx(t), name, make([]byte, 1), 0)
		for op, err := range checks {
			if !errors.Is(err, objstore.ErrInvalidName) {
				t.Errorf("%s(%.40q): err %v, want ErrInvalidName", op, name, err)
			} else if shown := fmt.Sprintf("%q", name); len(name) < 80 && !strings.Contains(err.Error(), shown) {
				t.Errorf("%s(%.40q): error %q does not name the object", op, name, err)
			}
		}
	}
	for _, prefix := range []string{"/abs", "../up", "a/../../b"} {
		if err := b.List(ctx(t), prefix, func(objstore.Attrs) error { return nil }); !errors.Is(err, objstore.ErrInvalidName) {
			t.Errorf("List(%q): err %v, want ErrInvalidName", prefix, err)
		}
	}
	if got := list(t, b, ""); len(got) != 0 {
		t.Errorf("refused names left objects behind: %q", got)
	}
}

// blockingReader yields first, then blocks until released, then yields
// after and ends with end.
type blockingReader struct {
	first   []byte
	sent    chan struct{}
	release chan struct{}
	after   []byte
	end     error
	state   int
}

func (r *blockingReader) Read(p []byte) (int, error) {
	switch r.state {
	case 0:
		r.state = 1
		n := copy(p, r.first)
		r.first = r.first[n:]
		if len(r.first) > 0 {
			r.state = 0
			return n, nil
		}
		close(r.sent)
		return n, nil
	default:
		<-r.release
		if len(r.after) > 0 {
			n := copy(p, r.after)
			r.after = r.after[n:]
			return n, nil
		}
		return 0, r.end
	}
}

func testNoPartialUpload(t *testing.T, b objstore.Bucket) {
	half := Random(6<<20, 3)
	r := &blockingReader{first: half, sent: make(chan struct{}), release: make(chan struct{}), end: io.EOF}
	done := make(chan error, 1)
	go func() { done <- b.Upload(ctx(t), "partial/obj", r) }()
	select {
	case <-r.sent:
	case err := <-done:
		t.Fatalf("Upload returned before its stream ended: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // let the backend push what it has
	if _, err := b.Stat(ctx(t), "partial/obj"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat during upload: err %v, want ErrNotFound", err)
	}
	if _, err := b.ReadAt(ctx(t), "partial/obj", make([]byte, 10), 0); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("ReadAt during upload: err %v, want ErrNotFound", err)
	}
	if got := list(t, b, ""); len(got) != 0 {
		t.Errorf("List during upload shows %q", got)
	}
	close(r.release)
	if err := <-done; err != nil {
		t.Fatalf("Upload: %v", err)
	}
	if got := mustRead(t, b, "partial/obj"); !bytes.Equal(got, half) {
		t.Fatalf("after upload read %d bytes, want the %d sent", len(got), len(half))
	}
}

func testFailedUploadKeepsOld(t *testing.T, b objstore.Bucket) {
	old := []byte("the committed version")
	upload(t, b, "fail/obj", old)
	cut := errors.New("stream cut midway")
	r := &blockingReader{first: Random(6<<20, 5), sent: make(chan struct{}), release: make(chan struct{}), end: cut}
	close(r.release)
	err := b.Upload(ctx(t), "fail/obj", r)
	if !errors.Is(err, cut) && (err == nil || !strings.Contains(err.Error(), cut.Error())) {
		t.Fatalf("Upload with a failing stream: err %v, want it to carry %q", err, cut)
	}
	if got := mustRead(t, b, "fail/obj"); !bytes.Equal(got, old) {
		t.Fatalf("after a failed overwrite read %d bytes, want the old %d", len(got), len(old))
	}
	if err := b.Upload(ctx(t), "fail/new", &blockingReader{first: []byte("part"), sent: make(chan struct{}), release: r.release, end: cut}); err == nil {
		t.Fatal("Upload with a failing stream succeeded")
	}
	if _, err := b.Stat(ctx(t), "fail/new"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a failed upload left an object: Stat err %v", err)
	}
	if got := list(t, b, ""); strings.Join(got, " ") != "fail/obj" {
		t.Fatalf("after failed uploads List = %q, want [fail/obj]", got)
	}
}

func testCancelledUpload(t *testing.T, b objstore.Bucket) {
	c, cancel := context.WithCancel(context.Background())
	// Data keeps coming after the cancel, so only the context can stop it.
	r := &blockingReader{first: Random(1<<20, 9), sent: make(chan struct{}), release: make(chan struct{}), after: Random(8<<20, 10), end: io.EOF}
	done := make(chan error, 1)
	go func() { done <- b.Upload(c, "cancel/obj", r) }()
	<-r.sent
	cancel()
	close(r.release)
	if err := <-done; err == nil {
		t.Fatal("Upload whose context was cancelled succeeded")
	}
	if _, err := b.Stat(ctx(t), "cancel/obj"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a cancelled upload left an object: Stat err %v", err)
	}
}

// testCleanup: on a bucket whose uploads all finished, the clean-up of
// interrupted uploads finds nothing and harms nothing, whatever the backend
// keeps of them (S3 parts, staged files).
func testCleanup(t *testing.T, b objstore.Bucket) {
	upload(t, b, "kept", []byte("finished"))
	if n, err := b.AbortIncomplete(ctx(t), "kept", 0); err != nil || n != 0 {
		t.Fatalf("AbortIncomplete of a finished upload = %d, %v; want 0, nil", n, err)
	}
	if n, err := b.SweepTemp(ctx(t), 0); err != nil || n != 0 {
		t.Fatalf("SweepTemp with no upload under way = %d, %v; want 0, nil", n, err)
	}
	if got := mustRead(t, b, "kept"); string(got) != "finished" {
		t.Fatalf("after the clean-up the object reads %q", got)
	}
}

func readVersioned(t *testing.T, b objstore.Bucket, name string) ([]byte, objstore.Version) {
	t.Helper()
	data, v, err := b.ReadVersioned(ctx(t), name)
	if err != nil {
		t.Fatalf("ReadVersioned(%q): %v", name, err)
	}
	if v == objstore.Absent {
		t.Fatalf("ReadVersioned(%q) gave no version", name)
	}
	return data, v
}

func wantPrecondition(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("%s: err %v, want ErrPreconditionFailed", what, err)
	}
}

// Create-if-absent succeeds once; the second writer is refused and the
// first one's bytes stay.
func testConditionalCreate(t *testing.T, b objstore.Bucket) {
	if _, _, err := b.ReadVersioned(ctx(t), "cas/new"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("ReadVersioned of a missing object: err %v, want ErrNotFound", err)
	}
	if err := b.UploadIf(ctx(t), "cas/new", strings.NewReader("first"), objstore.Absent); err != nil {
		t.Fatalf("UploadIf(absent) of a new name: %v", err)
	}
	err := b.UploadIf(ctx(t), "cas/new", strings.NewReader("second"), objstore.Absent)
	wantPrecondition(t, "UploadIf(absent) of an existing object", err)
	if !strings.Contains(err.Error(), "cas/new") {
		t.Errorf("the refusal %q does not name the object", err)
	}
	if got, _ := readVersioned(t, b, "cas/new"); string(got) != "first" {
		t.Fatalf("after a refused create the object reads %q, want %q", got, "first")
	}
	// Once deleted, the name is absent again.
	if err := b.Delete(ctx(t), "cas/new"); err != nil {
		t.Fatal(err)
	}
	if err := b.UploadIf(ctx(t), "cas/new", strings.NewReader("third"), objstore.Absent); err != nil {
		t.Fatalf("UploadIf(absent) after Delete: %v", err)
	}
	if got := list(t, b, "cas/"); strings.Join(got, " ") != "cas/new" {
		t.Fatalf("List after conditional writes = %q, want [cas/new]", got)
	}
}

// Update-if-version succeeds with the version read and fails with a stale
// one, whoever made it stale (a conditional write, a plain upload, a delete).
func testConditionalUpdate(t *testing.T, b objstore.Bucket) {
	upload(t, b, "cas/obj", []byte("v1"))
	got, v1 := readVersioned(t, b, "cas/obj")
	if string(got) != "v1" {
		t.Fatalf("ReadVersioned = %q, want v1", got)
	}
	if _, again := readVersioned(t, b, "cas/obj"); again != v1 {
		t.Fatalf("two reads of an unchanged object gave versions %q and %q", v1, again)
	}
	if err := b.UploadIf(ctx(t), "cas/obj", strings.NewReader("v2"), v1); err != nil {
		t.Fatalf("UploadIf with the current version: %v", err)
	}
	got, v2 := readVersioned(t, b, "cas/obj")
	if string(got) != "v2" || v2 == v1 {
		t.Fatalf("after the update: %q at version %q (was %q)", got, v2, v1)
	}
	wantPrecondition(t, "UploadIf with a stale version", b.UploadIf(ctx(t), "cas/obj", strings.NewReader("v3-stale"), v1))
	wantPrecondition(t, "UploadIf(absent) of an existing object", b.UploadIf(ctx(t), "cas/obj", strings.NewReader("v3-absent"), objstore.Absent))
	if got, _ := readVersioned(t, b, "cas/obj"); string(got) != "v2" {
		t.Fatalf("refused writes changed the object: %q", got)
	}
	// Also stale after a plain upload and after a delete.
	upload(t, b, "cas/obj", []byte("v3"))
	wantPrecondition(t, "UploadIf after a plain Upload replaced the version", b.UploadIf(ctx(t), "cas/obj", strings.NewReader("x"), v2))
	_, v3 := readVersioned(t, b, "cas/obj")
	if err := b.Delete(ctx(t), "cas/obj"); err != nil {
		t.Fatal(err)
	}
	wantPrecondition(t, "UploadIf of a deleted object", b.UploadIf(ctx(t), "cas/obj", strings.NewReader("x"), v3))
	if _, err := b.Stat(ctx(t), "cas/obj"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a refused write brought a deleted object back: Stat err %v", err)
	}
	// The plain reads see what a conditional write wrote.
	if err := b.UploadIf(ctx(t), "cas/obj", strings.NewReader("v4"), objstore.Absent); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, b, "cas/obj"); string(got) != "v4" {
		t.Fatalf("ReadAll after UploadIf = %q, want v4", got)
	}
}

// Many writers read-modify-write one counter, retrying on a failed
// precondition: every increment lands (no lost update), each exactly once.
func testConcurrentIncrements(t *testing.T, b objstore.Bucket) {
	const writers, each = 6, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	var conflicts sync.Map
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				for attempt := 0; ; attempt++ {
					data, v, err := b.ReadVersioned(context.Background(), "cas/counter")
					n := 0
					switch {
					case errors.Is(err, objstore.ErrNotFound):
						v = objstore.Absent
					case err != nil:
						errs <- fmt.Errorf("writer %d: ReadVersioned: %v", g, err)
						return
					default:
						if _, err := fmt.Sscan(string(data), &n); err != nil {
							errs <- fmt.Errorf("writer %d: counter reads %q", g, data)
							return
						}
					}
					err = b.UploadIf(context.Background(), "cas/counter", strings.NewReader(fmt.Sprint(n+1)), v)
					if err == nil {
						break
					}
					if !errors.Is(err, objstore.ErrPreconditionFailed) || attempt > 200 {
						errs <- fmt.Errorf("writer %d: UploadIf after %d attempts: %v", g, attempt+1, err)
						return
					}
					conflicts.Store(g, true)
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if got := string(mustRead(t, b, "cas/counter")); got != fmt.Sprint(writers*each) {
		t.Fatalf("%d writers made %d increments each; the counter reads %s", writers, each, got)
	}
	n := 0
	conflicts.Range(func(any, any) bool { n++; return true })
	t.Logf("%d of %d writers had a write refused and retried", n, writers)
}

// testReplacedByPeer: nodes share one bucket, and an object one node has
// read may be replaced or deleted and written again by another (a deleted
// topic's object, then its re-created incarnation's at the same key). No
// read may serve the bytes of the object it read before: a handle cached
// by the first node's bucket must not outlive the object it was opened on.
func testReplacedByPeer(t *testing.T, b objstore.Bucket, peer func(*testing.T, objstore.Bucket) objstore.Bucket) {
	other := peer(t, b)
	t.Cleanup(func() { other.Close() })
	tests := []struct {
		name          string
		before, after []byte
		deleteFirst   bool
	}{
		{"longer", Random(1000, 1), Random(5000, 2), false},
		{"same size", Random(3000, 3), Random(3000, 4), false},
		{"shorter", Random(5000, 5), Random(1000, 6), false},
		{"deleted and written again", Random(2000, 7), Random(4000, 8), true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("peer/%d/obj", i)
			upload(t, b, name, tc.before)
			if got := mustRead(t, b, name); !bytes.Equal(got, tc.before) {
				t.Fatalf("first read: %d bytes, not the %d uploaded", len(got), len(tc.before))
			}
			if tc.deleteFirst {
				if err := other.Delete(ctx(t), name); err != nil {
					t.Fatalf("the peer's Delete: %v", err)
				}
			}
			upload(t, other, name, tc.after)
			a, err := b.Stat(ctx(t), name)
			if err != nil {
				t.Fatalf("Stat after the peer's upload: %v", err)
			}
			if a.Size != int64(len(tc.after)) {
				t.Fatalf("Stat after the peer's upload: size %d, want %d", a.Size, len(tc.after))
			}
			if got := mustRead(t, b, name); !bytes.Equal(got, tc.after) {
				t.Fatalf("read after the peer replaced the object: %d bytes, not the %d bytes the peer uploaded (first differing at %d)",
					len(got), len(tc.after), firstDiff(got, tc.after))
			}
			tail := make([]byte, 8)
			if _, err := b.ReadAt(ctx(t), name, tail, a.Size-8); err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("ReadAt of the last 8 bytes: %v", err)
			}
			if !bytes.Equal(tail, tc.after[len(tc.after)-8:]) {
				t.Fatalf("the last 8 bytes read %x, the peer's object ends %x", tail, tc.after[len(tc.after)-8:])
			}
			if err := other.Delete(ctx(t), name); err != nil {
				t.Fatalf("the peer's Delete: %v", err)
			}
			if _, err := b.ReadAt(ctx(t), name, tail, 0); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("ReadAt after the peer's Delete: err %v, want ErrNotFound", err)
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
