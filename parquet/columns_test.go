package parquet

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"strata/engine/record"
)

// spanBytes serves only the spans named, as a cold reader that fetched
// just those would.
func spanBytes(data []byte, spans []Span) Bytes {
	return func(start, end int64) ([]byte, bool) {
		for _, s := range spans {
			if s.Start <= start && end <= s.End {
				return data[start:end:end], true
			}
		}
		return nil, false
	}
}

func sameRecords(t testing.TB, what string, got, want []record.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		w, _ := record.Append(nil, &want[i])
		g, _ := record.Append(nil, &got[i])
		if !bytes.Equal(w, g) {
			t.Fatalf("%s: record %d (offset %d):\n got %+v\nwant %+v", what, i, want[i].Offset, got[i], want[i])
		}
		// Null and empty stay apart (the encoding above does not tell them).
		if (got[i].Key == nil) != (want[i].Key == nil) || (got[i].Value == nil) != (want[i].Value == nil) {
			t.Fatalf("%s: record %d: key/value null-ness changed: got %+v want %+v", what, i, got[i], want[i])
		}
		for h := range want[i].Headers {
			if (got[i].Headers[h].Value == nil) != (want[i].Headers[h].Value == nil) {
				t.Fatalf("%s: record %d header %d: null-ness changed", what, i, h)
			}
		}
	}
}

// The column-wise reader gives exactly what parquet-go's row reader gives,
// for whole row groups and for point reads served from the page spans
// alone, whatever the codec and page size.
func TestColumnWiseMatchesRowReader(t *testing.T) {
	recs := edgeRecords(7_000)
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"zstd", Options{RowGroupBytes: 64 << 10}},
		{"zstd small pages", Options{RowGroupBytes: 64 << 10, PageBytes: 4 << 10}},
		{"snappy", Options{Codec: "snappy", RowGroupBytes: 32 << 10, PageBytes: 8 << 10}},
		{"gzip", Options{Codec: "gzip"}},
		{"none", Options{Codec: "none", RowGroupBytes: 16 << 10, PageBytes: 1 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := write(t, recs, tc.opts)
			f, err := Open(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			if f.slow != nil {
				t.Fatalf("strata's own file is not readable column-wise: %v", f.slow)
			}
			var all []record.Record
			for gi, g := range f.Groups() {
				got, err := f.DecodeRows(gi, 0, g.Rows, spanBytes(data, []Span{{g.Start, g.End}}))
				if err != nil {
					t.Fatalf("row group %d: %v", gi, err)
				}
				want, err := f.ReadGroup(gi)
				if err != nil {
					t.Fatal(err)
				}
				sameRecords(t, "group", got, want)
				all = append(all, got...)
			}
			sameRecords(t, "file", all, recs)
			rng := rand.New(rand.NewPCG(5, 6))
			for k := 0; k < 60; k++ {
				off := rng.IntN(len(recs))
				n := int64(1 + rng.IntN(20))
				gi, err := f.GroupOf(recs[off].Offset)
				if err != nil {
					t.Fatal(err)
				}
				from := int64(off) - f.Groups()[gi].FirstRow
				spans, err := f.PageSpans(gi, from, n)
				if err != nil {
					t.Fatal(err)
				}
				got, err := f.DecodeRows(gi, from, n, spanBytes(data, spans))
				if err != nil {
					t.Fatalf("rows %d+%d of group %d from spans %v: %v", from, n, gi, spans, err)
				}
				want, err := f.ReadRows(gi, from, n)
				if err != nil {
					t.Fatal(err)
				}
				sameRecords(t, "point", got, want)
				if k%3 != 0 {
					continue
				}
				// CopyRows: the same records, owning their bytes.
				owned, err := f.CopyRows(gi, from, n, spanBytes(data, spans))
				if err != nil {
					t.Fatalf("CopyRows %d+%d of group %d: %v", from, n, gi, err)
				}
				sameRecords(t, "copied point", owned, want)
			}
		})
	}
}

// Damaged pages fail the read with ErrCorrupt (or are left to the row
// reader), never panic and never return wrong records.
func TestColumnWiseDamage(t *testing.T) {
	recs := edgeRecords(0)
	data := write(t, recs, Options{RowGroupBytes: 64 << 10, PageBytes: 8 << 10})
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	g := f.Groups()[0]
	rng := rand.New(rand.NewPCG(7, 8))
	for k := 0; k < 300; k++ {
		bad := bytes.Clone(data)
		for j := 0; j < 1+rng.IntN(4); j++ {
			bad[g.Start+rng.Int64N(g.End-g.Start)] ^= byte(1 + rng.IntN(255))
		}
		got, err := f.DecodeRows(0, 0, g.Rows, spanBytes(bad, []Span{{g.Start, g.End}}))
		if err != nil {
			if !errors.Is(err, record.ErrCorrupt) && !errors.Is(err, ErrNoFastPath) {
				t.Fatalf("damage %d: error %v is neither corruption nor a fallback", k, err)
			}
			continue
		}
		// A flip inside a value's bytes decodes; offsets and counts held.
		if len(got) != int(g.Rows) || got[0].Offset != 0 {
			t.Fatalf("damage %d: %d records from %d", k, len(got), got[0].Offset)
		}
	}
}

// Whatever bytes a bucket returns, the column-wise reader fails cleanly or
// yields records with the offsets their rows claim, and what it yields is
// what the row reader yields.
func FuzzDecodeRows(f *testing.F) {
	recs := edgeRecords(10)[:60]
	f.Add(write(f, recs, Options{RowGroupBytes: 4096, PageBytes: 1024}))
	f.Add(write(f, recs, Options{Codec: "none", PageBytes: 2048}))
	f.Add(write(f, recs, Options{Codec: "snappy"}))
	if old, err := os.ReadFile("testdata/format1.parquet"); err == nil { // format 1's column order
		f.Add(old)
	} else {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pf, err := Open(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for i, g := range pf.Groups() {
			if g.Rows == 0 {
				continue
			}
			got, err := pf.DecodeRows(i, 0, g.Rows, spanBytes(data, []Span{{g.Start, g.End}}))
			if err != nil {
				continue
			}
			for j, r := range got {
				if want := pf.FirstOffset() + uint64(g.FirstRow) + uint64(j); r.Offset != want {
					t.Fatalf("row group %d row %d: offset %d, want %d", i, j, r.Offset, want)
				}
			}
			// A point read of rows the whole group gave: the same records,
			// from its pages alone (the values of the rows wanted only).
			mid := g.Rows / 2
			if spans, err := pf.PageSpans(i, mid, 3); err == nil {
				point, err := pf.CopyRows(i, mid, 3, spanBytes(data, spans))
				if err != nil {
					t.Fatalf("row group %d decodes whole, but not rows %d+3 from %v: %v", i, mid, spans, err)
				}
				sameRecords(t, "fuzzed point", point, got[mid:min(mid+3, g.Rows)])
			}
			if want, err := pf.ReadGroup(i); err == nil {
				sameRecords(t, "fuzzed group", got, want)
			}
		}
	})
}

// rowOtherEncodings is Row with the encodings other writers choose
// (dictionary, delta): the same schema, so the column-wise reader must read
// it or leave it to the row reader, never misread it.
type rowOtherEncodings struct {
	Offset       int64                  `parquet:"offset,delta"`
	Timestamp    int64                  `parquet:"timestamp,timestamp(millisecond),delta"`
	Key          *[]byte                `parquet:"key,optional,dict"`
	Value        *[]byte                `parquet:"value,optional,dict"`
	Headers      []headerOtherEncodings `parquet:"headers,list"`
	Tags         []string               `parquet:"tags,list,dict"`
	ProtocolData *[]byte                `parquet:"protocol_data,optional"`
}

type headerOtherEncodings struct {
	Key   string  `parquet:"key,dict"`
	Value *[]byte `parquet:"value,optional"`
}

func TestColumnWiseOtherEncodings(t *testing.T) {
	recs := edgeRecords(40)
	var buf bytes.Buffer
	w := pq.NewGenericWriter[rowOtherEncodings](&buf, pq.PageBufferSize(4<<10))
	for i := range recs {
		r := testRow(&recs[i])
		o := rowOtherEncodings{Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value, Tags: r.Tags, ProtocolData: r.ProtocolData}
		for _, h := range r.Headers {
			o.Headers = append(o.Headers, headerOtherEncodings{h.Key, h.Value})
		}
		if _, err := w.Write([]rowOtherEncodings{o}); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 {
			w.Flush()
		}
	}
	w.SetKeyValueMetadata(MetaFirstOffset, "40")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if f.slow != nil {
		t.Fatalf("not readable column-wise: %v", f.slow)
	}
	m := f.pf.Metadata().RowGroups[0].Columns
	if m[f.leaf[colKey]].MetaData.DictionaryPageOffset == 0 || !slices.Contains(m[f.leaf[colOffset]].MetaData.Encoding, format.DeltaBinaryPacked) {
		t.Fatalf("the file is not dictionary- and delta-encoded: %+v", m)
	}
	var all []record.Record
	for gi, g := range f.Groups() {
		got, err := f.DecodeRows(gi, 0, g.Rows, spanBytes(data, []Span{{g.Start, g.End}}))
		if err != nil {
			t.Fatalf("row group %d: %v", gi, err)
		}
		all = append(all, got...)
		spans, _ := f.PageSpans(gi, g.Rows/2, 3)
		got, err = f.DecodeRows(gi, g.Rows/2, 3, spanBytes(data, spans))
		if err != nil {
			t.Fatalf("row group %d, point read from %v: %v", gi, spans, err)
		}
		want, _ := f.ReadRows(gi, g.Rows/2, 3)
		sameRecords(t, "point", got, want)
	}
	sameRecords(t, "file", all, recs)
}

// A cold point read's decoding: one record out of a 1 MiB row group of 1
// KiB records, from its pages alone.
func BenchmarkDecodePointRow(b *testing.B) {
	recs := storetestRecords1K(4000)
	data := write(b, recs, Options{PageBytes: 32 << 10})
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []struct {
		name   string
		decode func(int, int64, int64, Bytes) ([]record.Record, error)
	}{{"views", f.DecodeRows}, {"copy", f.CopyRows}} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			rng := rand.New(rand.NewPCG(1, 2))
			for b.Loop() {
				off := rng.Int64N(int64(len(recs)))
				gi, _ := f.GroupOf(uint64(off))
				from := off - f.Groups()[gi].FirstRow
				spans, _ := f.PageSpans(gi, from, 1)
				if _, err := m.decode(gi, from, 1, spanBytes(data, spans)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func storetestRecords1K(n int) []record.Record {
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]record.Record, n)
	for i := range recs {
		v := make([]byte, 1024)
		for j := range v {
			v[j] = byte(rng.IntN(64)) + 32
		}
		recs[i] = record.Record{Offset: uint64(i), Timestamp: int64(1_700_000_000_000 + i), Key: []byte(fmt.Sprintf("user-%d", rng.IntN(10000))),
			Value: v, Headers: []record.Header{{Key: "source", Value: []byte("bench")}}}
	}
	return recs
}

// A cold scan's decoding: whole 1 MiB row groups of 1 KiB records.
func BenchmarkDecodeGroup(b *testing.B) {
	recs := storetestRecords1K(4000)
	data := write(b, recs, Options{PageBytes: 32 << 10})
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for i := range recs {
		size += int64(record.Size(&recs[i]))
	}
	b.SetBytes(size / int64(len(f.Groups())))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		gi := i % len(f.Groups())
		g := f.Groups()[gi]
		if _, err := f.DecodeRows(gi, 0, g.Rows, spanBytes(data, []Span{{g.Start, g.End}})); err != nil {
			b.Fatal(err)
		}
	}
}

// The same with parquet-go's row reader, as the cold reader read before.
func BenchmarkReadGroupRows(b *testing.B) {
	recs := storetestRecords1K(4000)
	data := write(b, recs, Options{PageBytes: 32 << 10})
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for i := range recs {
		size += int64(record.Size(&recs[i]))
	}
	b.SetBytes(size / int64(len(f.Groups())))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.ReadGroup(i % len(f.Groups())); err != nil {
			b.Fatal(err)
		}
	}
}

// A file written with data page v1 (what other writers, pyarrow's default
// among them, produce) is left to parquet-go's row reader, which the cold
// reader falls back to: never misread.
func TestColumnWiseLeavesPageV1(t *testing.T) {
	recs := edgeRecords(3)
	var buf bytes.Buffer
	w := pq.NewGenericWriter[Row](&buf, pq.DataPageVersion(1), pq.PageBufferSize(4<<10))
	for i := range recs {
		if _, err := w.Write([]Row{testRow(&recs[i])}); err != nil {
			t.Fatal(err)
		}
	}
	w.SetKeyValueMetadata(MetaFirstOffset, "3")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	g := f.Groups()[0]
	if _, err := f.DecodeRows(0, 0, g.Rows, spanBytes(data, []Span{{g.Start, g.End}})); !errors.Is(err, ErrNoFastPath) {
		t.Fatalf("page v1 decoded column-wise: %v", err)
	}
	got, err := f.ReadGroup(0)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "row reader", got, recs)
}

// testRow is r as parquet-go's row writer takes it, for files written
// other ways than strata's Writer.
func testRow(r *record.Record) Row {
	opt := func(b []byte) *[]byte {
		if b == nil {
			return nil
		}
		return &b
	}
	row := Row{Offset: int64(r.Offset), Timestamp: r.Timestamp, Key: opt(r.Key), Value: opt(r.Value), Tags: r.Tags, ProtocolData: opt(r.ProtocolData)}
	for _, h := range r.Headers {
		row.Headers = append(row.Headers, Header{Key: h.Key, Value: opt(h.Value)})
	}
	return row
}
