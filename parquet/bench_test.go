package parquet

import (
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"strata/engine/record"
)

// benchRecords are n order-like records: a 1 KiB JSON value, a customer
// key, three headers (as bench/peers' orders, smaller and quicker to make).
func benchRecords(n int) []record.Record {
	rng := rand.New(rand.NewPCG(7, 11))
	recs := make([]record.Record, n)
	for i := range recs {
		v := fmt.Appendf(nil, `{"order_id":"ord-%09d","amount_cents":%d,"items":[`, i, rng.IntN(500_000))
		for len(v) < 1000 {
			v = fmt.Appendf(v, `{"sku":"SKU-%05d","qty":%d},`, rng.IntN(20_000), 1+rng.IntN(4))
		}
		v = append(v, "]}"...)
		trace := fmt.Appendf(nil, "%016x%016x", rng.Uint64(), rng.Uint64())
		recs[i] = record.Record{Offset: uint64(i), Timestamp: 1_764_460_800_000 + int64(i)*3,
			Key: fmt.Appendf(nil, "customer-%06d", rng.IntN(50_000)), Value: v,
			Headers: []record.Header{{Key: "trace-id", Value: trace}, {Key: "content-type", Value: []byte("application/json")},
				{Key: "source", Value: []byte("checkout")}}}
	}
	return recs
}

// BenchmarkWriter is the conversion alone (no pyarrow, no segment file),
// for profiles of the writer: go test -run '^$' -bench Writer -cpuprofile.
func BenchmarkWriter(b *testing.B) {
	recs := benchRecords(20_000)
	var size int64
	for i := range recs {
		size += int64(record.Size(&recs[i]))
	}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		w, err := NewWriter(io.Discard, Options{})
		if err != nil {
			b.Fatal(err)
		}
		for i := range recs {
			if err := w.Write(&recs[i]); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
