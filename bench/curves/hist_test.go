package curves

import (
	"testing"
	"time"
)

// The soak's per-window percentiles come from a histogram with 2% buckets:
// they must land within a bucket of the exact percentile.
func TestLatencyHistPercentile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"one sample", []time.Duration{5 * time.Millisecond}, 99, 5 * time.Millisecond},
		{"p50 of 1..100 ms", ramp(100, time.Millisecond), 50, 50 * time.Millisecond},
		{"p99 of 1..100 ms", ramp(100, time.Millisecond), 99, 99 * time.Millisecond},
		{"p99 with one slow outlier in 1000", append(ramp(999, time.Microsecond), 3*time.Second), 99, 990 * time.Microsecond},
		{"p100 is the slowest", append(ramp(999, time.Microsecond), 3*time.Second), 100, 3 * time.Second},
		{"below a microsecond counts as one", []time.Duration{10 * time.Nanosecond}, 50, time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h latencyHist
			for _, d := range tc.samples {
				h.add(d)
			}
			got := h.percentile(tc.p)
			want := float64(tc.want) / float64(time.Millisecond)
			if got < want || got > want*1.0405 { // the bucket's upper bound, at most two 2% steps above
				t.Fatalf("p%.0f = %.4f ms, want %.4f ms (up to 4%% above)", tc.p, got, want)
			}
		})
	}
	var empty latencyHist
	if got := empty.percentile(99); got != 0 {
		t.Fatalf("p99 of no samples = %v, want 0", got)
	}
}

func ramp(n int, step time.Duration) []time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		ds[i] = time.Duration(i+1) * step
	}
	return ds
}
