package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/tiering/objstore"
	"strata/tiering/objstore/faulty"
	"strata/tiering/objstore/local"
)

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		why  string
	}{
		{"topic=t/partition=0/00000000000000000000-00000000000000000099.parquet", true, ""},
		{"a", true, ""},
		{"a/.hidden", true, ""},
		{"a/..b", true, ""},
		{strings.Repeat("x", 1024), true, ""},
		{"", false, "empty"},
		{"/etc/passwd", false, "absolute"},
		{"a/../../etc", false, `".." path segment`},
		{"..", false, `".." path segment`},
		{"a/./b", false, `"." path segment`},
		{"a//b", false, "empty path segment"},
		{"a/", false, "ends with /"},
		{"a\x00b", false, "NUL"},
		{strings.Repeat("x", 1025), false, "1025 bytes long"},
		{".strata-tmp/upload-1", false, "reserved"},
	} {
		err := objstore.ValidateName(tc.name)
		if tc.ok {
			if err != nil {
				t.Errorf("ValidateName(%.30q) = %v, want nil", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, objstore.ErrInvalidName) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ValidateName(%.30q) = %v, want ErrInvalidName saying %q", tc.name, err, tc.why)
		}
	}
}

func TestIsTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{objstore.Transient(errors.New("503 slow down")), true},
		{fmt.Errorf("wrapped: %w", objstore.Transient(errors.New("500"))), true},
		{syscall.ECONNREFUSED, true},
		{syscall.ECONNRESET, true},
		{io.ErrUnexpectedEOF, true},
		{objstore.NotFound("s3", "x"), false},
		{objstore.Transient(objstore.NotFound("s3", "x")), false},
		{objstore.ValidateName(""), false},
		{context.Canceled, false},
		{errors.New("access denied"), false},
		{objstore.PreconditionFailed("s3", "x", "etag"), false},
		{objstore.Transient(objstore.PreconditionFailed("s3", "x", objstore.Absent)), false},
	} {
		if got := objstore.IsTransient(tc.err); got != tc.want {
			t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func newFaulty(t *testing.T) *faulty.Bucket {
	b, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return faulty.Wrap(b)
}

var fast = objstore.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}

func TestRetriesTransientOnly(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		failures  []error
		wantCalls int
		wantErr   bool
	}{
		{"one transient failure", []error{objstore.Transient(faulty.ErrInjected)}, 2, false},
		{"two transient failures", []error{syscall.ECONNRESET, syscall.ECONNREFUSED}, 3, false},
		{"more failures than attempts", []error{syscall.ECONNRESET, syscall.ECONNRESET, syscall.ECONNRESET}, 3, true},
		{"a final failure", []error{errors.New("access denied")}, 1, true},
		{"not found is an answer", []error{objstore.NotFound("local", "x")}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFaulty(t)
			if err := f.Upload(ctx, "obj", strings.NewReader("payload")); err != nil {
				t.Fatal(err)
			}
			for i, e := range tc.failures {
				f.FailNth(objstore.OpReadAt, i+1, e)
			}
			before := f.Calls(objstore.OpReadAt)
			p := make([]byte, 7)
			_, err := objstore.WithRetries(f, fast).ReadAt(ctx, "obj", p, 0)
			if calls := f.Calls(objstore.OpReadAt) - before; calls != tc.wantCalls {
				t.Errorf("backend called %d times, want %d", calls, tc.wantCalls)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("ReadAt err = %v, want error: %v", err, tc.wantErr)
			}
			if err == nil && string(p) != "payload" {
				t.Fatalf("read %q after retries", p)
			}
		})
	}
}

func TestRetriedUploadRewinds(t *testing.T) {
	f := newFaulty(t)
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	f.CutNextUpload(300_000, objstore.Transient(faulty.ErrInjected))
	if err := objstore.WithRetries(f, fast).Upload(context.Background(), "obj", bytes.NewReader(data)); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	if f.Calls(objstore.OpUpload) != 2 {
		t.Fatalf("upload tried %d times, want 2", f.Calls(objstore.OpUpload))
	}
	got, err := objstore.ReadAll(context.Background(), f, "obj")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after a retried upload read %d bytes (err %v), want the %d sent", len(got), err, len(data))
	}
}

// A failed precondition is the answer, not a failure: retrying the same
// write could only fail again (or, worse, succeed on a later version it was
// not based on, if the backend's token came back). A transient failure of a
// conditional write is retried like an upload's.
func TestConditionalWriteRetries(t *testing.T) {
	ctx := context.Background()
	f := newFaulty(t)
	b := objstore.WithRetries(f, fast)
	f.FailNth(objstore.OpUploadIf, 1, objstore.PreconditionFailed("local", "obj", objstore.Absent))
	err := b.UploadIf(ctx, "obj", strings.NewReader("x"), objstore.Absent)
	if !errors.Is(err, objstore.ErrPreconditionFailed) || f.Calls(objstore.OpUploadIf) != 1 {
		t.Fatalf("a failed precondition: err %v after %d tries; want it after 1", err, f.Calls(objstore.OpUploadIf))
	}
	f.FailNth(objstore.OpUploadIf, 1, syscall.ECONNRESET)
	if err := b.UploadIf(ctx, "obj", strings.NewReader("x"), objstore.Absent); err != nil {
		t.Fatalf("UploadIf after one transient failure: %v", err)
	}
	if f.Calls(objstore.OpUploadIf) != 3 {
		t.Fatalf("UploadIf tried %d times in all, want 3 (1 refused, 1 transient, 1 written)", f.Calls(objstore.OpUploadIf))
	}
	// Its own earlier write makes a repeat fail its precondition: the real
	// backend's answer, passed through untouched.
	err = b.UploadIf(ctx, "obj", strings.NewReader("y"), objstore.Absent)
	if !errors.Is(err, objstore.ErrPreconditionFailed) || f.Calls(objstore.OpUploadIf) != 4 {
		t.Fatalf("UploadIf(absent) of an existing object: err %v after %d tries in all, want the refusal after 4", err, f.Calls(objstore.OpUploadIf))
	}
	f.FailNth(objstore.OpReadVersioned, 1, syscall.ECONNRESET)
	if data, v, err := b.ReadVersioned(ctx, "obj"); err != nil || string(data) != "x" || v == objstore.Absent {
		t.Fatalf("ReadVersioned after one transient failure: %q, %q, %v", data, v, err)
	}
}

func TestUnseekableUploadIsNotRetried(t *testing.T) {
	f := newFaulty(t)
	f.CutNextUpload(10, objstore.Transient(faulty.ErrInjected))
	err := objstore.WithRetries(f, fast).Upload(context.Background(), "obj", struct{ io.Reader }{strings.NewReader(strings.Repeat("x", 100))})
	if !errors.Is(err, faulty.ErrInjected) || f.Calls(objstore.OpUpload) != 1 {
		t.Fatalf("an unseekable stream: err %v after %d tries; want the failure after 1", err, f.Calls(objstore.OpUpload))
	}
}

func TestTimeoutBoundsEachTry(t *testing.T) {
	f := newFaulty(t)
	f.Delay(objstore.OpStat, time.Minute)
	b := objstore.WithRetries(f, objstore.RetryPolicy{Attempts: 2, BaseDelay: time.Millisecond, Timeout: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() { _, err := b.Stat(context.Background(), "obj"); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no answer within 50ms") {
			t.Fatalf("Stat of a backend that never answers: %v", err)
		}
		if f.Calls(objstore.OpStat) != 2 {
			t.Fatalf("a timed-out try was tried %d times, want 2", f.Calls(objstore.OpStat))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the timeout did not end the operation")
	}
}

func TestListIsNotRepeatedAfterItStarted(t *testing.T) {
	b, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		b.Upload(context.Background(), n, strings.NewReader(n))
	}
	var seen []string
	err = objstore.WithRetries(b, fast).List(context.Background(), "", func(a objstore.Attrs) error {
		seen = append(seen, a.Name)
		if a.Name == "b" {
			return objstore.Transient(errors.New("consumer hiccup"))
		}
		return nil
	})
	if err == nil || strings.Join(seen, "") != "ab" {
		t.Fatalf("List whose callback failed at b: saw %q, err %v; want [a b] and the error", seen, err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFaulty(t)
	b := objstore.NewMetrics(reg).Instrument(f)
	ctx := context.Background()
	b.Upload(ctx, "obj", strings.NewReader("12345"))
	b.ReadAt(ctx, "obj", make([]byte, 3), 0)
	b.Stat(ctx, "missing") // not found: counted, not a failure
	f.FailNth(objstore.OpDelete, 1, nil)
	b.Delete(ctx, "obj")
	b.UploadIf(ctx, "cas", strings.NewReader("ab"), objstore.Absent)
	b.UploadIf(ctx, "cas", strings.NewReader("ab"), objstore.Absent) // refused: a conflict, not a failure
	b.ReadVersioned(ctx, "cas")

	for _, tc := range []struct {
		metric, op string
		want       float64
	}{
		{"strata_objstore_operations_total", "upload", 1},
		{"strata_objstore_operations_total", "read_at", 1},
		{"strata_objstore_operations_total", "stat", 1},
		{"strata_objstore_operations_total", "delete", 1},
		{"strata_objstore_operations_total", "list", 0},
		{"strata_objstore_bytes_total", "upload", 5},
		{"strata_objstore_bytes_total", "read_at", 3},
		{"strata_objstore_operation_failures_total", "stat", 0},
		{"strata_objstore_operation_failures_total", "delete", 1},
		{"strata_objstore_operations_total", "upload_if", 2},
		{"strata_objstore_bytes_total", "upload_if", 4},
		{"strata_objstore_operation_failures_total", "upload_if", 0},
		{"strata_objstore_preconditions_failed_total", "upload_if", 1},
		{"strata_objstore_operations_total", "read_versioned", 1},
		{"strata_objstore_bytes_total", "read_versioned", 2},
	} {
		if got := metricValue(t, reg, tc.metric, tc.op); got != tc.want {
			t.Errorf("%s{operation=%q} = %v, want %v", tc.metric, tc.op, got, tc.want)
		}
	}
	if got := metricValue(t, reg, "strata_objstore_operation_duration_seconds", "read_at"); got != 1 {
		t.Errorf("read latency histogram holds %v samples, want 1", got)
	}
}

// metricValue reads a counter, or a histogram's sample count, for one operation.
func metricValue(t *testing.T, reg *prometheus.Registry, name, op string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" && l.GetValue() == op {
					if h := m.GetHistogram(); h != nil {
						return float64(h.GetSampleCount())
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{operation=%q}", name, op)
	return 0
}

// Whatever a caller passes, a name ValidateName accepts stays inside the
// bucket's folder when joined to it: the file-system backends rely on this.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a/b.parquet", "../x", "a/../../b", "/abs", "a//b", ".", "a\x00", ".strata-tmp/x", "topic=t/partition=0/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if objstore.ValidateName(name) != nil {
			return
		}
		root := "/bucket/root"
		p := filepath.Join(root, filepath.FromSlash(name))
		if !strings.HasPrefix(p, root+"/") {
			t.Fatalf("accepted name %q resolves to %q, outside %s", name, p, root)
		}
		if p == filepath.Join(root, objstore.TempDir) || strings.HasPrefix(p, filepath.Join(root, objstore.TempDir)+"/") {
			t.Fatalf("accepted name %q lands in the reserved %s", name, objstore.TempDir)
		}
		if filepath.ToSlash(p[len(root)+1:]) != name {
			t.Fatalf("accepted name %q is not its own clean path (%q)", name, p)
		}
	})
}
