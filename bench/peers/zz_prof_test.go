package peers

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"strata/engine/record"
	"strata/parquet"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkZZStrataOrders(b *testing.B) {
	recs := orders(100_000)
	var size int64
	for i := range recs {
		size += int64(record.Size(&recs[i]))
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	runtime.GC()
	c0 := cpuNow()
	var out int64
	n := 0
	for b.Loop() {
		c := &counter{}
		w, _ := parquet.NewWriter(c, parquet.Options{PageBytes: pageEnv()})
		for i := range recs {
			w.Write(&recs[i])
		}
		w.Close()
		out = c.n
		n++
	}
	cpu := cpuNow() - c0
	b.ReportMetric(float64(size)*float64(n)/1e6/cpu.Seconds(), "MB/cpu-s")
	b.ReportMetric(float64(out)/1e6, "MB-out")
}

func pageEnv() int {
	n, _ := strconv.Atoi(os.Getenv("PAGE"))
	return n
}
