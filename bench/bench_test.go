package bench

import (
	"os"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(101-i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {1, time.Millisecond}} {
		if got := Percentile(ds, tc.p); got != tc.want {
			t.Errorf("Percentile(1..100ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if Median([]float64{3, 1, 2}) != 2 || Median([]float64{4, 1, 3, 2}) != 2.5 {
		t.Error("Median is wrong")
	}
}

func TestDiskLimit(t *testing.T) {
	dir := t.TempDir()
	mbs, err := DiskLimit(dir, 1<<20, 64<<10, 2)
	if err != nil || mbs <= 0 {
		t.Fatalf("DiskLimit(1MiB, 64KiB chunks, 2 files) = %v, %v; want a positive rate", mbs, err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("DiskLimit left %d files behind", len(left))
	}
	for _, bad := range []struct{ total, chunk int64 }{{0, 1}, {1, 0}} {
		if _, err := DiskLimit(dir, bad.total, bad.chunk, 1); err == nil {
			t.Errorf("DiskLimit(%d bytes, %d-byte chunks) took it; want an error", bad.total, bad.chunk)
		}
	}
}
