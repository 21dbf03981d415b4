package parquet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"strata/engine/record"
)

func footer(t *testing.T, data []byte) *format.FileMetaData {
	t.Helper()
	n := int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	md := new(format.FileMetaData)
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), data[len(data)-8-n:len(data)-8], md); err != nil {
		t.Fatal(err)
	}
	return md
}

// statBound is parquet-go's bound b as strata writes it: none when either
// bound is longer than maxStatisticsBytes.
func statBound(lo, hi, b []byte) []byte {
	if max(len(lo), len(hi)) > maxStatisticsBytes {
		return nil
	}
	return b
}

// The file strata's page writer makes says what parquet-go's writer said
// of the same records in the same row groups: the schema, and per column
// chunk its values, nulls, bounds, level histograms and byte counts (the
// pages themselves differ: PLAIN byte arrays, other page boundaries).
func TestWriterMatchesParquetGo(t *testing.T) {
	recs := edgeRecords(77)
	recs[7].Tags = []string{"x"}
	recs[9].Headers = []record.Header{{Key: "only", Value: nil}}
	opts := Options{RowGroupBytes: 32 << 10, PageBytes: 4 << 10}
	ours := write(t, recs, opts)

	// parquet-go's writer, flushed where ours ends a row group.
	var buf bytes.Buffer
	w := pq.NewGenericWriter[Row](&buf, pq.PageBufferSize(opts.PageBytes), pq.Compression(newZstd()),
		pq.DataPageStatistics(true), pq.CreatedBy("strata", FormatVersion, ""))
	inGroup := 0
	for i := range recs {
		if _, err := w.Write([]Row{testRow(&recs[i])}); err != nil {
			t.Fatal(err)
		}
		if inGroup += record.Size(&recs[i]); inGroup >= opts.RowGroupBytes {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			inGroup = 0
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, want := footer(t, ours), footer(t, buf.Bytes())
	if !reflect.DeepEqual(got.Schema, want.Schema) || !reflect.DeepEqual(got.ColumnOrders, want.ColumnOrders) || got.NumRows != want.NumRows {
		t.Fatalf("schema, column orders or rows differ:\n got %+v\nwant %+v", got.Schema, want.Schema)
	}
	if len(got.RowGroups) != len(want.RowGroups) || len(got.RowGroups) < 5 {
		t.Fatalf("%d row groups, parquet-go %d", len(got.RowGroups), len(want.RowGroups))
	}
	for gi := range got.RowGroups {
		g, wg := got.RowGroups[gi], want.RowGroups[gi]
		if g.NumRows != wg.NumRows || int(g.Ordinal) != gi || g.FileOffset != g.Columns[0].MetaData.DataPageOffset {
			t.Fatalf("row group %d: %d rows (parquet-go %d), ordinal %d, file offset %d", gi, g.NumRows, wg.NumRows, g.Ordinal, g.FileOffset)
		}
		for c := range g.Columns {
			m, wm := g.Columns[c].MetaData, wg.Columns[c].MetaData
			where := fmt.Sprintf("row group %d column %v", gi, m.PathInSchema)
			for _, f := range []struct {
				what      string
				got, want any
			}{
				{"path", m.PathInSchema, wm.PathInSchema},
				{"type", m.Type, wm.Type},
				{"codec", m.Codec, wm.Codec},
				{"values", m.NumValues, wm.NumValues},
				{"nulls", m.Statistics.NullCount, wm.Statistics.NullCount},
				{"min", m.Statistics.MinValue, statBound(wm.Statistics.MinValue, wm.Statistics.MaxValue, wm.Statistics.MinValue)},
				{"max", m.Statistics.MaxValue, statBound(wm.Statistics.MinValue, wm.Statistics.MaxValue, wm.Statistics.MaxValue)},
				{"unencoded bytes", m.SizeStatistics.UnencodedByteArrayDataBytes, wm.SizeStatistics.UnencodedByteArrayDataBytes},
				{"repetition histogram", m.SizeStatistics.RepetitionLevelHistogram, wm.SizeStatistics.RepetitionLevelHistogram},
				{"definition histogram", m.SizeStatistics.DefinitionLevelHistogram, wm.SizeStatistics.DefinitionLevelHistogram},
			} {
				if !reflect.DeepEqual(f.got, f.want) {
					t.Fatalf("%s: %s %v, parquet-go %v", where, f.what, f.got, f.want)
				}
			}
			if m.DataPageOffset <= 0 || m.TotalCompressedSize <= 0 || m.TotalUncompressedSize <= 0 || g.Columns[c].ColumnIndexLength <= 0 || g.Columns[c].OffsetIndexLength <= 0 {
				t.Fatalf("%s: offsets and sizes %+v", where, g.Columns[c])
			}
		}
	}
	// And it reads back, through parquet-go's reader and the column-wise one.
	sameRecords(t, "parquet-go's reader", readAll(t, ours), recs)
	f, err := Open(bytes.NewReader(ours), int64(len(ours)))
	if err != nil || f.slow != nil {
		t.Fatalf("open: %v, column-wise: %v", err, f.slow)
	}
	var all []record.Record
	for gi, g := range f.Groups() {
		rs, err := f.DecodeRows(gi, 0, g.Rows, spanBytes(ours, []Span{{g.Start, g.End}}))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rs...)
	}
	sameRecords(t, "column-wise", all, recs)
}

// Pages end at the first row that fills them: none holds much more than
// the page size, except a page of one value larger than that.
func TestWriterPageBoundaries(t *testing.T) {
	recs := edgeRecords(0)
	big := bytes.Repeat([]byte{0xff}, 20<<10)
	recs[100].Value = big
	const pageBytes = 4 << 10
	longest := 0 // but big
	for i := range recs {
		if i != 100 {
			longest = max(longest, len(recs[i].Value), len(recs[i].Key))
		}
	}
	data := write(t, recs, Options{RowGroupBytes: 256 << 10, PageBytes: pageBytes})
	md := footer(t, data)
	pages, first := 0, int64(0)
	for gi, g := range md.RowGroups {
		for c, ch := range g.Columns {
			var oi format.OffsetIndex
			if err := thrift.Unmarshal(new(thrift.CompactProtocol), data[ch.OffsetIndexOffset:ch.OffsetIndexOffset+int64(ch.OffsetIndexLength)], &oi); err != nil {
				t.Fatal(err)
			}
			for p, l := range oi.PageLocations {
				h, _, err := pageHeader(data[l.Offset : l.Offset+int64(l.CompressedPageSize)])
				if err != nil {
					t.Fatalf("row group %d column %d page %d: %v", gi, c, p, err)
				}
				rows := int64(h.DataPageHeaderV2.V.NumRows)
				row := first + l.FirstRowIndex
				holdsBig := c == colValue && row <= 100 && 100 < row+rows
				if int(h.UncompressedPageSize) > pageBytes+longest+16 && !holdsBig {
					t.Fatalf("row group %d column %d page %d: %d bytes in %d rows", gi, c, p, h.UncompressedPageSize, rows)
				}
				pages++
			}
		}
		first += g.NumRows
	}
	if pages < 50 {
		t.Fatalf("%d pages", pages)
	}
	// The footer keeps no bounds of byte columns longer than
	// 64 bytes (the 20 KiB value, the largest), and keeps the keys'.
	for gi, g := range md.RowGroups {
		st := g.Columns[colValue].MetaData.Statistics
		if len(st.MinValue) > 64 || len(st.MaxValue) > 64 {
			t.Fatalf("row group %d: value bounds of %d and %d bytes in the footer", gi, len(st.MinValue), len(st.MaxValue))
		}
		if st := g.Columns[colKey].MetaData.Statistics; st.MaxValue == nil {
			t.Fatalf("row group %d: no key bounds", gi)
		}
	}
	sameRecords(t, "read back", readAll(t, data), recs)
}
