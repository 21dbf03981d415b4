package curves

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"strata/bench"
	"strata/internal/testsvc"
)

var strataBin string

func TestMain(m *testing.M) { os.Exit(testsvc.RunWithStrata(m, &strataBin)) }

const command = "make bench (go test -bench Curve ./bench/curves)"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func report(b testing.TB, f bench.Figure) {
	bench.Must(b, command, f)
}

// points is the first STRATA_CURVE_POINTS of xs (all when unset): while
// developing, on two shared cores, only the small end of a curve runs.
// STRATA_CURVE_X=x,... runs those points alone instead (e.g. 1048576, to
// profile one). The first point, each curve's reference, always runs.
func points(b testing.TB, xs []int) []int {
	if v := os.Getenv("STRATA_CURVE_X"); v != "" {
		out := xs[:1]
		for _, f := range strings.Split(v, ",") {
			x, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || !slices.Contains(xs, x) {
				b.Fatalf("STRATA_CURVE_X=%q: %q is not a point of this curve (%v)", v, f, xs)
			}
			if x != xs[0] {
				out = append(out, x)
			}
		}
		return out
	}
	v := os.Getenv("STRATA_CURVE_POINTS")
	if v == "" {
		return xs
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("STRATA_CURVE_POINTS=%q: want a number of points, at least 1", v)
	}
	return xs[:min(n, len(xs))]
}

// text is 72 MiB of text-like bytes (what a log or JSON value compresses
// like, neither all zeros nor noise), made once when first asked for;
// records take slices of it.
var text = sync.OnceValue(func() []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	t := make([]byte, 72<<20)
	for i := 0; i < len(t); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			t[i+j] = byte(v>>(8*j))&63 + 32
		}
	}
	return t
})

// value returns record i's size bytes: consecutive records get
// consecutive slices of text, so the records of one 64 MiB segment never
// repeat one another (repeats would let zstd, with its window across
// records, look faster than Parquet's page-by-page compression can be).
func value(i, size int) []byte {
	t := text()
	start := (i * size) % (len(t) - size)
	return t[start : start+size]
}

// sizeName is how a record size reads on a chart: 100B, 1KiB, 16KiB, 1MiB.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// ptr is a topic config's value, as kadm takes them.
func ptr(s string) *string { return &s }
