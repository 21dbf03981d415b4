package parquet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"strata/engine/record"
	"strata/engine/store/storetest"
)

func edgeRecords(from uint64) []record.Record {
	recs := []record.Record{
		{Value: []byte{}},           // empty value, null key
		{Key: []byte{}, Value: nil}, // empty key, tombstone
		{Timestamp: -5, Value: []byte("before the epoch")},
		{Headers: []record.Header{{Key: "n", Value: nil}, {Key: "e", Value: []byte{}}}, Value: []byte("v")},
		{Tags: []string{"", "t"}, ProtocolData: []byte{0, 1, 2}, Value: bytes.Repeat([]byte{0}, 3000)},
	}
	recs = append(recs, storetest.Records(2000, 3)...)
	for i := range recs {
		recs[i].Offset = from + uint64(i)
	}
	return recs
}

func write(t testing.TB, recs []record.Record, opts Options) []byte {
	t.Helper()
	data, _ := writeSummary(t, recs, opts)
	return data
}

// writeSummary writes recs as one file and returns it with the writer's
// summary, checked against recs.
func writeSummary(t testing.TB, recs []record.Record, opts Options) ([]byte, Summary) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rows != int64(len(recs)) || sum.FirstOffset != recs[0].Offset || sum.LastOffset != recs[len(recs)-1].Offset {
		t.Fatalf("summary %+v for %d records from %d", sum, len(recs), recs[0].Offset)
	}
	return buf.Bytes(), sum
}

func readAll(t testing.TB, data []byte) []record.Record {
	t.Helper()
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var out []record.Record
	for i := range f.Groups() {
		recs, err := f.ReadGroup(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
	}
	return out
}

// Lossless: every record read back encodes to exactly the bytes the
// segment held, whatever the codec.
func TestRoundTripIsByteIdentical(t *testing.T) {
	recs := edgeRecords(1_000_000)
	for _, c := range []string{"zstd", "snappy", "gzip", "none"} {
		t.Run(c, func(t *testing.T) {
			got := readAll(t, write(t, recs, Options{Codec: c, RowGroupBytes: 64 << 10}))
			if len(got) != len(recs) {
				t.Fatalf("read %d records, wrote %d", len(got), len(recs))
			}
			for i := range recs {
				want, _ := record.Append(nil, &recs[i])
				have, _ := record.Append(nil, &got[i])
				if !bytes.Equal(want, have) {
					t.Fatalf("record %d (offset %d) changed:\n got %+v\nwant %+v", i, recs[i].Offset, got[i], recs[i])
				}
			}
		})
	}
}

func TestRowGroupsPageIndexAndStatistics(t *testing.T) {
	recs := edgeRecords(500)
	data := write(t, recs, Options{RowGroupBytes: 32 << 10, PageBytes: 8 << 10})
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Groups()) < 5 {
		t.Fatalf("%d row groups for %d records in 32 KiB groups", len(f.Groups()), len(recs))
	}
	if v, _ := f.Lookup(MetaFirstOffset); v != "500" {
		t.Fatalf("footer first offset %q", v)
	}
	for gi, rg := range f.pf.RowGroups() {
		for ci, c := range rg.ColumnChunks() {
			oi, err := c.OffsetIndex()
			if err != nil || oi.NumPages() == 0 {
				t.Fatalf("row group %d column %d: no offset index (%v)", gi, ci, err)
			}
			if _, err := c.ColumnIndex(); err != nil {
				t.Fatalf("row group %d column %d: no column index: %v", gi, ci, err)
			}
		}
		// The offset column's statistics bound the group's offsets.
		st := f.pf.Metadata().RowGroups[gi].Columns[0].MetaData.Statistics
		lo := pq.Int64Value(int64(500) + f.Groups()[gi].FirstRow)
		if !bytes.Equal(st.MinValue, lo.Bytes()) {
			t.Fatalf("row group %d: offset min statistic %x, want %x", gi, st.MinValue, lo.Bytes())
		}
	}
	for _, off := range []uint64{500, 777, 500 + uint64(len(recs)) - 1} {
		gi, err := f.GroupOf(off)
		if err != nil {
			t.Fatal(err)
		}
		g := f.Groups()[gi]
		if row := int64(off - 500); row < g.FirstRow || row >= g.FirstRow+g.Rows {
			t.Fatalf("GroupOf(%d) = group %d holding rows %d..%d", off, gi, g.FirstRow, g.FirstRow+g.Rows-1)
		}
	}
	// A few rows from the middle of a group decode alone, and equal the same
	// rows of the whole group.
	whole, _ := f.ReadGroup(2)
	part, err := f.ReadRows(2, 5, 3)
	if err != nil || len(part) != 3 {
		t.Fatalf("ReadRows: %d records, %v", len(part), err)
	}
	for j := range part {
		a, _ := record.Append(nil, &part[j])
		b, _ := record.Append(nil, &whole[5+j])
		if !bytes.Equal(a, b) {
			t.Fatalf("ReadRows row %d differs from the whole group's", 5+j)
		}
	}
	if _, err := f.GroupOf(499); err == nil {
		t.Fatal("GroupOf below the file's first offset succeeded")
	}
}

func TestWriterRefusesGaps(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, Options{})
	w.Write(&record.Record{Offset: 1})
	if err := w.Write(&record.Record{Offset: 3}); err == nil {
		t.Fatal("a gap in offsets was accepted")
	}
	if _, err := NewWriter(&buf, Options{Codec: "lzma"}); err == nil {
		t.Fatal("an unknown codec was accepted")
	}
}

func TestNotStrataOrDamaged(t *testing.T) {
	var buf bytes.Buffer
	type other struct {
		A int64 `parquet:"a"`
	}
	w := pq.NewGenericWriter[other](&buf)
	w.Write([]other{{1}})
	w.Close()
	if _, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len())); !errors.Is(err, ErrNotStrata) {
		t.Fatalf("a foreign Parquet file: %v", err)
	}
	data := write(t, edgeRecords(0), Options{})
	for _, cut := range []int{0, 4, len(data) / 2, len(data) - 1} {
		if _, err := Open(bytes.NewReader(data[:cut]), int64(cut)); err == nil {
			t.Fatalf("a file cut to %d bytes opened", cut)
		}
	}
}

// Whatever bytes come back from a bucket, opening and reading them fails
// cleanly or yields records with the offsets their rows claim.
func FuzzOpen(f *testing.F) {
	recs := edgeRecords(10)[:50]
	f.Add(write(f, recs, Options{RowGroupBytes: 4096}))
	f.Add(write(f, recs, Options{Codec: "none"}))
	f.Add([]byte("PAR1PAR1"))
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
		for i := range pf.Groups() {
			recs, err := pf.ReadGroup(i)
			if err != nil {
				continue
			}
			for j, r := range recs {
				if want := pf.FirstOffset() + uint64(pf.Groups()[i].FirstRow) + uint64(j); r.Offset != want {
					t.Fatal(fmt.Sprintf("row group %d row %d: offset %d, want %d", i, j, r.Offset, want))
				}
			}
		}
	})
}

func TestHiveDDL(t *testing.T) {
	ddl := HiveDDL("clicks.v2-eu", "s3a://b/p/topic=clicks.v2-eu")
	for _, want := range []string{"CREATE EXTERNAL TABLE IF NOT EXISTS `clicks_v2_eu`", "PARTITIONED BY (`partition` INT)",
		"STORED AS PARQUET", "LOCATION 's3a://b/p/topic=clicks.v2-eu'", "`offset` BIGINT", "`timestamp` TIMESTAMP"} {
		if !strings.Contains(ddl, want) {
			t.Errorf("DDL lacks %q:\n%s", want, ddl)
		}
	}
}

// A column chunk claiming a codec strata never writes is refused before any
// page is read (parquet-go's LZ4 decoder grows its buffer forever on a
// corrupt page).
func TestOpenRefusesForeignCodecs(t *testing.T) {
	data := write(t, edgeRecords(10)[:20], Options{Codec: "snappy"})
	pf, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(pf.Groups()) == 0 {
		t.Fatal("no row groups")
	}
	// The same file with its footer saying LZ4 for every column chunk.
	footerLen := int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	var meta format.FileMetaData
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), data[len(data)-8-footerLen:len(data)-8], &meta); err != nil {
		t.Fatal(err)
	}
	for g := range meta.RowGroups {
		for c := range meta.RowGroups[g].Columns {
			meta.RowGroups[g].Columns[c].MetaData.Codec = format.Lz4Raw
		}
	}
	footer, err := thrift.Marshal(new(thrift.CompactProtocol), &meta)
	if err != nil {
		t.Fatal(err)
	}
	data = append(data[:len(data)-8-footerLen], footer...)
	data = binary.LittleEndian.AppendUint32(data, uint32(len(footer)))
	data = append(data, "PAR1"...)
	_, err = Open(bytes.NewReader(data), int64(len(data)))
	if err == nil || !strings.Contains(err.Error(), "codec") {
		t.Fatalf("Open of a file claiming LZ4: %v; want a codec error", err)
	}
}

// Null, empty and non-empty keys, values and header values in every
// mixture come back exactly: parquet-go once wrote a null header value as
// an empty one when the row before held bytes there (found by the
// randomized workload through a cold read).
func TestNullsSurviveTheRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() []byte {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return []byte{}
		}
		return []byte("v")
	}
	var in []record.Record
	for i := 0; i < 2000; i++ {
		r := record.Record{Offset: uint64(i), Key: pick(), Value: pick()}
		for range rng.IntN(5) {
			r.Headers = append(r.Headers, record.Header{Key: "h", Value: pick()})
		}
		in = append(in, r)
	}
	for _, opts := range []Options{{}, {Codec: "none"}, {RowGroupBytes: 16 << 10, PageBytes: 4 << 10}} {
		raw := write(t, in, opts)
		f, err := Open(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			t.Fatal(err)
		}
		var got []record.Record
		for gi := range f.Groups() {
			recs, err := f.ReadGroup(gi)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, recs...)
		}
		if len(got) != len(in) {
			t.Fatalf("%+v: %d records back of %d", opts, len(got), len(in))
		}
		same := func(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
		for i := range in {
			ok := same(got[i].Key, in[i].Key) && same(got[i].Value, in[i].Value) && len(got[i].Headers) == len(in[i].Headers)
			for h := 0; ok && h < len(in[i].Headers); h++ {
				ok = same(got[i].Headers[h].Value, in[i].Headers[h].Value)
			}
			if !ok {
				t.Fatalf("%+v: record %d came back as %+v, written as %+v", opts, i, got[i], in[i])
			}
		}
	}
}

// The writer copies what it is given: the tiering job decodes every record
// of a segment into one reused buffer, so a record's bytes are overwritten
// as soon as Write returns and must not end up in the file.
func TestWriterCopiesRecordBytes(t *testing.T) {
	recs := edgeRecords(40)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Options{RowGroupBytes: 16 << 10, PageBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var scratch []byte
	for i := range recs {
		scratch, _ = record.Append(scratch[:0], &recs[i])
		r, _, err := record.Decode(scratch)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
		for j := range scratch {
			scratch[j] = 0xA5 // what the next record's read would leave
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, buf.Bytes())
	if len(got) != len(recs) {
		t.Fatalf("read %d records, wrote %d", len(got), len(recs))
	}
	for i := range recs {
		want, _ := record.Append(nil, &recs[i])
		have, _ := record.Append(nil, &got[i])
		if !bytes.Equal(want, have) {
			t.Fatalf("record %d (offset %d) changed once its buffer was reused:\n got %+v\nwant %+v", i, recs[i].Offset, got[i], recs[i])
		}
	}
}

// Page headers carry no min and max of the opaque byte columns (value,
// protocol_data, header values), which made a quarter of an object of
// 1 KiB values; the column index still bounds every page of every column
// truly, since readers skip pages by it.
func TestStatisticsWhereReadersUseThem(t *testing.T) {
	recs := edgeRecords(0)
	data := write(t, recs, Options{RowGroupBytes: 64 << 10, PageBytes: 4 << 10})
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	noHeaderStats := map[int]bool{colValue: true, colHeaderValue: true, colProtocolData: true}
	pagesChecked := 0
	for gi, rg := range f.pf.RowGroups() {
		for ci, c := range rg.ColumnChunks() {
			oi, err := c.OffsetIndex()
			if err != nil {
				t.Fatal(err)
			}
			ci2, err := c.ColumnIndex()
			if err != nil {
				t.Fatal(err)
			}
			vals := make([][]byte, 0)
			for _, r := range recs[f.Groups()[gi].FirstRow : f.Groups()[gi].FirstRow+f.Groups()[gi].Rows] {
				switch ci {
				case colValue:
					vals = append(vals, r.Value)
				case colKey:
					vals = append(vals, r.Key)
				}
			}
			for p := 0; p < oi.NumPages(); p++ {
				off, size := oi.Offset(p), oi.CompressedPageSize(p)
				h, _, err := pageHeader(data[off : off+size])
				if err != nil {
					t.Fatal(err)
				}
				st := h.DataPageHeaderV2.V.Statistics
				hasStats := st.MinValue != nil || st.MaxValue != nil || st.Min != nil || st.Max != nil
				if noHeaderStats[ci] && hasStats {
					t.Fatalf("row group %d column %s page %d: the page header carries min/max", gi, wantLeaves[ci].path, p)
				}
				if ci == colOffset && !hasStats {
					t.Fatalf("row group %d: offset page %d has no statistics", gi, p)
				}
				if ci != colValue && ci != colKey || ci2.NullPage(p) {
					continue
				}
				// Every non-null value of the page lies within its column
				// index bounds (truncated, so compared as the index says).
				first := oi.FirstRowIndex(p)
				end := int64(len(vals))
				if p+1 < oi.NumPages() {
					end = oi.FirstRowIndex(p + 1)
				}
				lo, hi := ci2.MinValue(p).ByteArray(), ci2.MaxValue(p).ByteArray()
				if len(hi) == 0 && end > first {
					nonEmpty := false
					for _, v := range vals[first:end] {
						nonEmpty = nonEmpty || len(v) > 0
					}
					if nonEmpty {
						t.Fatalf("row group %d column %s page %d: empty max over non-empty values", gi, wantLeaves[ci].path, p)
					}
				}
				for _, v := range vals[first:end] {
					if v == nil {
						continue
					}
					if bytes.Compare(v, lo) < 0 || bytes.Compare(v, hi) > 0 {
						t.Fatalf("row group %d column %s page %d: value %.20q outside the column index's [%.20q, %.20q]", gi, wantLeaves[ci].path, p, v, lo, hi)
					}
				}
				pagesChecked++
			}
		}
	}
	if pagesChecked < 10 {
		t.Fatalf("only %d pages checked", pagesChecked)
	}
}
