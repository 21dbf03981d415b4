package parquet

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"strata/engine/record"
)

// Objects tiered before value became the last column (format 1, value
// fourth) still read: testdata/format1.parquet was written by the format-1
// writer (commit 2942253) from edgeRecords(9_000)[:400], 16 KiB row groups
// of 2 KiB pages.
func TestReadsFormat1Objects(t *testing.T) {
	data, err := os.ReadFile("testdata/format1.parquet")
	if err != nil {
		t.Fatal(err)
	}
	want := edgeRecords(9_000)[:400]
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Lookup(MetaVersion); v != "1" {
		t.Fatalf("the fixture says format %q, want 1", v)
	}
	if f.slow != nil {
		t.Fatalf("a format-1 object is not readable column-wise: %v", f.slow)
	}
	if f.leaf[colValue] != 3 {
		t.Fatalf("format 1's value column found at leaf %d, want 3", f.leaf[colValue])
	}
	if len(f.Groups()) < 3 {
		t.Fatalf("%d row groups: the fixture should have several", len(f.Groups()))
	}
	var cols, rows []record.Record
	for gi, g := range f.Groups() {
		got, err := f.DecodeRows(gi, 0, g.Rows, spanBytes(data, []Span{{g.Start, g.End}}))
		if err != nil {
			t.Fatalf("row group %d column-wise: %v", gi, err)
		}
		cols = append(cols, got...)
		got, err = f.ReadGroup(gi)
		if err != nil {
			t.Fatalf("row group %d, parquet-go's row reader: %v", gi, err)
		}
		rows = append(rows, got...)
	}
	sameRecords(t, "column-wise", cols, want)
	sameRecords(t, "row reader", rows, want)
	for _, off := range []int{0, 4, 137, 250, 399} {
		gi, _ := f.GroupOf(want[off].Offset)
		from := int64(off) - f.Groups()[gi].FirstRow
		spans, err := f.PageSpans(gi, from, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) > maxSpans {
			t.Fatalf("offset %d: %d spans", want[off].Offset, len(spans))
		}
		got, err := f.DecodeRows(gi, from, 3, spanBytes(data, spans))
		if err != nil {
			t.Fatalf("offset %d from spans %v: %v", want[off].Offset, spans, err)
		}
		sameRecords(t, "point", got, want[off:min(off+3, int(f.Groups()[gi].FirstRow+f.Groups()[gi].Rows))])
	}
}

// Format 2 writes value last: the small columns of a row group lie
// together before it, so a point read of a 1 KiB record fetches two spans,
// or one when its page lies within spanGap of the row group's start, and
// never the offset column, whose statistics give the offsets.
func TestValueIsTheLastColumn(t *testing.T) {
	recs := storetestRecords1K(3000)
	data := write(t, recs, Options{})
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Lookup(MetaVersion); v != FormatVersion || FormatVersion != "2" {
		t.Fatalf("format %q", v)
	}
	var names []string
	for _, fl := range f.pf.Schema().Fields() {
		names = append(names, fl.Name())
	}
	if !slices.Equal(names, []string{"offset", "timestamp", "key", "headers", "tags", "protocol_data", "value"}) {
		t.Fatalf("columns %v", names)
	}
	md := f.pf.Metadata()
	for gi := range f.Groups() {
		cs := md.RowGroups[gi].Columns
		v := cs[f.leaf[colValue]].MetaData
		for c, ch := range cs {
			if c != f.leaf[colValue] && ch.MetaData.DataPageOffset > v.DataPageOffset {
				t.Fatalf("row group %d: column %v after value", gi, ch.MetaData.PathInSchema)
			}
		}
		if !f.offsetsKnown[gi] {
			t.Fatalf("row group %d: the offset statistics do not give the offsets", gi)
		}
	}
	offsetCol := md.RowGroups[0].Columns[f.leaf[colOffset]].MetaData
	ones := 0
	rows := int64(0)
	for row := int64(0); row < f.Groups()[0].Rows; row += 7 { // every page, several rows of each
		rows++
		spans, err := f.PageSpans(0, row, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) > 2 {
			t.Fatalf("row %d: %d spans %v", row, len(spans), spans)
		}
		if spans[0].Start < offsetCol.DataPageOffset+offsetCol.TotalCompressedSize {
			t.Fatalf("row %d: spans %v fetch the offset column", row, spans)
		}
		if len(spans) == 1 {
			ones++
			if spans[0].End-spans[0].Start > spanGap+2*DefaultPageBytes {
				t.Fatalf("row %d: one span of %d bytes", row, spans[0].End-spans[0].Start)
			}
		}
		got, err := f.DecodeRows(0, row, 1, spanBytes(data, spans))
		if err != nil {
			t.Fatalf("row %d: %v", row, err)
		}
		sameRecords(t, "point", got, recs[row:row+1])
	}
	if ones == 0 || ones == int(rows) {
		t.Fatalf("%d of %d rows read with one span: want those near the start only", ones, rows)
	}
}

// CopyRows' records own their bytes: neither overwriting the bytes they
// were decoded from nor the next reads (which reuse the page buffers)
// changes them.
func TestCopyRowsOwnTheirBytes(t *testing.T) {
	recs := edgeRecords(100)
	for _, codec := range []string{"zstd", "none"} {
		t.Run(codec, func(t *testing.T) {
			data := write(t, recs, Options{Codec: codec, RowGroupBytes: 32 << 10, PageBytes: 4 << 10})
			f, err := Open(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			read := func(buf []byte, off int) []record.Record {
				gi, _ := f.GroupOf(recs[off].Offset)
				from := int64(off) - f.Groups()[gi].FirstRow
				spans, err := f.PageSpans(gi, from, 4)
				if err != nil {
					t.Fatal(err)
				}
				got, err := f.CopyRows(gi, from, 4, spanBytes(buf, spans))
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			for _, off := range []int{0, 3, 700, 1500} {
				buf := bytes.Clone(data)
				got := read(buf, off)
				for i := range buf {
					buf[i] = 0xff
				}
				for k := 0; k < 20; k++ { // other reads take the same page buffers
					read(data, (off+97*k)%(len(recs)-4))
				}
				end := min(off+4, off+int(f.Groups()[0].Rows)) // rows past the group are not returned
				sameRecords(t, "after reuse", got, recs[off:off+len(got)])
				if len(got) == 0 || len(got) > end-off {
					t.Fatalf("offset %d: %d records", off, len(got))
				}
			}
		})
	}
}
