// Package bench reports benchmark figures the same way everywhere: each
// figure beside the reference it is judged against (a limit or a peer
// measured in the same run) and their ratio, printed and appended to the file
// named by STRATA_BENCH_OUT, which scripts/bench turns into results.json.
package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Figure is one measured number and its reference.
type Figure struct {
	Name           string  `json:"name"`
	Value          float64 `json:"value"`
	Unit           string  `json:"unit"`
	Reference      string  `json:"reference"`
	ReferenceValue float64 `json:"reference_value"`
	// Ratio is Value / ReferenceValue.
	Ratio float64 `json:"ratio"`
	// Target says what ratio is wanted, e.g. "<= 1.10".
	Target  string `json:"target,omitempty"`
	Runs    int    `json:"runs"`
	Command string `json:"command"`
	// A point of a curve (how a cost grows with X) names the curve, which
	// becomes one chart (bench/charts/<Curve>.svg), the series, which
	// becomes one line on it, and its X; bench/report.py draws them.
	Curve  string  `json:"curve,omitempty"`
	Series string  `json:"series,omitempty"`
	X      float64 `json:"x,omitempty"`
	XUnit  string  `json:"x_unit,omitempty"`
}

var mu sync.Mutex

// Report prints f and appends it to $STRATA_BENCH_OUT when set.
func Report(f Figure) error {
	if f.ReferenceValue != 0 {
		f.Ratio = f.Value / f.ReferenceValue
	}
	if f.Command == "" {
		f.Command = "make bench"
	}
	target := ""
	if f.Target != "" {
		target = " (target " + f.Target + ")"
	}
	fmt.Printf("%-52s %10.3f %-5s vs %-30s %10.3f %-5s ratio %.2f%s [%d runs]\n",
		f.Name, f.Value, f.Unit, f.Reference, f.ReferenceValue, f.Unit, f.Ratio, target, f.Runs)
	path := os.Getenv("STRATA_BENCH_OUT")
	if path == "" {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	out, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	return json.NewEncoder(out).Encode(f)
}

// Must reports f, tagged with the command that reproduces it, and fails
// the benchmark if the figure cannot be recorded.
func Must(tb interface{ Fatal(...any) }, command string, f Figure) {
	f.Command = command
	if err := Report(f); err != nil {
		tb.Fatal(err)
	}
}

// Percentile returns the p-th percentile (0 < p <= 100) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Median returns the median of xs.
func Median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Ms turns a duration into milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// DiskLimit is what the disk under dir allows for a writer's I/O pattern
// without the writer: total bytes written by files goroutines, each to its
// own file, in chunks of chunk bytes with one fsync per chunk. Returns
// MB/s. The engine's append benchmark and the cluster's follower catch-up
// are both judged against it.
func DiskLimit(dir string, total, chunk int64, files int) (float64, error) {
	if total <= 0 || chunk <= 0 || files <= 0 {
		return 0, fmt.Errorf("bench: disk limit of %d bytes in %d-byte chunks over %d files: want all positive", total, chunk, files)
	}
	per := total / int64(files)
	errs := make([]error, files)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < files; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = writeSynced(filepath.Join(dir, fmt.Sprintf("disk-limit-%d", i)), per, chunk)
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(per*int64(files)) / 1e6 / elapsed.Seconds(), nil
}

func writeSynced(path string, total, chunk int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, chunk)
	for written := int64(0); written < total; written += chunk {
		if _, err := f.Write(buf); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return nil
}
