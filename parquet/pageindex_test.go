package parquet

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/encoding/rle"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"strata/engine/record"
)

// A filtering reader (Spark, Trino, DuckDB, parquet-go) trusts what the
// writer says of its pages without reading them: it skips a page by its
// column index bounds or null counts, seeks to it by the offset index, and
// skips a row group by the footer's statistics. A bound that does not bound,
// or a row index one off, drops rows silently. So every structure is
// checked here against the pages as they really are: each column chunk is
// walked page by page from its data page offset (not by the offset index,
// which is under test), each page decoded into its levels and values with
// parquet-go's level decoder, and the values compared with the records,
// shredded by the test into the same levels.
func TestPageIndexTellsTheTruth(t *testing.T) {
	recs := pageIndexRecords(2400)
	for _, tc := range []struct {
		name string
		opts Options
		// What the records must reach in this layout: pages of nulls only
		// where a page holds fewer levels than a run of nulls; every
		// boundary order where a row group has several timestamp pages.
		nullPages, allOrders bool
	}{
		{"zstd, small pages", Options{RowGroupBytes: 96 << 10, PageBytes: 2 << 10}, false, true},
		{"uncompressed, tiny pages", Options{Codec: "none", RowGroupBytes: 48 << 10, PageBytes: 512}, true, true},
		{"snappy, default page size", Options{Codec: "snappy", RowGroupBytes: 200 << 10}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := write(t, recs, tc.opts)
			cd, err := codec(tc.opts.Codec)
			if err != nil {
				t.Fatal(err)
			}
			md := footer(t, data)
			want := shred(recs)
			var seen pageIndexCoverage
			row, end := int64(0), int64(4) // after "PAR1"
			for gi, g := range md.RowGroups {
				chunks := make([][]decodedPage, len(g.Columns))
				for c, ch := range g.Columns {
					where := fmt.Sprintf("row group %d column %s", gi, wantLeaves[c].path)
					pages, err := decodeChunk(data, ch.MetaData, c, cd)
					if err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					chunks[c] = pages
					leaf := wantLeaves[c]
					for p := range pages {
						checkPageHeader(t, fmt.Sprintf("%s page %d", where, p), leaf, &pages[p])
					}
					ci, oi := pageIndex(t, where, data, &ch)
					checkColumnIndex(t, where, leaf, ci, pages, &seen)
					checkOffsetIndex(t, where, oi, pages)
					checkColumnChunk(t, where, leaf, &ch.MetaData, pages, cd.CompressionCodec())
					checkContents(t, where, pages, want[c], row, g.NumRows)
					seen.pages += len(pages)
				}
				end = checkRowGroup(t, gi, &g, chunks, end)
				row += g.NumRows
			}
			if md.NumRows != int64(len(recs)) || row != md.NumRows {
				t.Fatalf("the footer says %d rows, its row groups %d; %d written", md.NumRows, row, len(recs))
			}
			// The page index lies between the last column chunk and the footer.
			footerAt := int64(len(data)) - 8 - int64(binary.LittleEndian.Uint32(data[len(data)-8:]))
			for gi, g := range md.RowGroups {
				for c, ch := range g.Columns {
					for _, at := range [][2]int64{{ch.ColumnIndexOffset, int64(ch.ColumnIndexLength)}, {ch.OffsetIndexOffset, int64(ch.OffsetIndexLength)}} {
						if at[0] < end || at[0]+at[1] > footerAt {
							t.Fatalf("row group %d column %d: page index at %d-%d, outside %d-%d (after the row groups, before the footer)", gi, c, at[0], at[0]+at[1], end, footerAt)
						}
					}
				}
			}
			// The records must reach what the checks are for.
			if seen.pages <= len(md.RowGroups)*numLeaves || len(md.RowGroups) < 2 {
				t.Fatalf("%d pages in %d row groups: too few to test", seen.pages, len(md.RowGroups))
			}
			for c, n := range seen.nullPages {
				if tc.nullPages && n == 0 && wantLeaves[c].maxDef > 0 {
					t.Errorf("column %s: no page of nulls written", wantLeaves[c].path)
				}
			}
			for _, o := range []format.BoundaryOrder{format.Ascending, format.Descending, format.Unordered} {
				if tc.allOrders && !seen.orders[colTimestamp][o] {
					t.Errorf("no timestamp column index is %s", o)
				}
			}
			if seen.truncated == 0 {
				t.Error("no byte array bound was truncated")
			}
		})
	}
}

// pageIndexRecords exercise every column: null, empty, short, long and
// 0xff keys (a max bound that cannot be truncated upward), runs of null
// keys and of tombstones long enough to make pages of nulls, records of
// 0, 1 and several headers with null and empty values and empty keys,
// tags, protocol data, values larger than a page, and timestamps that
// ascend, then descend, then jump (including before the epoch) so the
// column indexes of different row groups have every boundary order.
func pageIndexRecords(n int) []record.Record {
	rng := rand.New(rand.NewPCG(7, 11))
	text := func(k int) []byte {
		b := make([]byte, k)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return b
	}
	recs := make([]record.Record, n)
	for i := range recs {
		r := &recs[i]
		r.Offset = 1_000_000 + uint64(i)
		switch {
		case i < n/3:
			r.Timestamp = 1_700_000_000_000 + int64(i)*10
		case i < 2*n/3:
			r.Timestamp = 1_700_000_000_000 - int64(i)*10
		default:
			r.Timestamp = rng.Int64N(2_000_000_000_000) - 1_000_000_000_000
		}
		switch {
		case i >= 200 && i < 900: // a run of null keys
		case i%7 == 0:
			r.Key = []byte{}
		case i%11 == 0:
			r.Key = bytes.Repeat([]byte{0xff}, 20+i%5)
		case i%13 == 0:
			r.Key = append(bytes.Repeat([]byte{0xff}, 17), 0x01, 0x02)
		case i%5 == 0:
			r.Key = text(40) // longer than a column index bound
		case i%3 != 0:
			r.Key = text(1 + rng.IntN(12))
		}
		switch {
		case i >= 900 && i < 1600: // a run of tombstones
		case i%97 == 0:
			r.Value = text(5000 + rng.IntN(3000)) // larger than a page
		case i%17 == 0:
			r.Value = []byte{}
		case i%23 == 0:
			r.Value = nil
		default:
			r.Value = text(20 + rng.IntN(200))
		}
		switch {
		case i >= 1200 && i < 1900: // a run of records without headers
		case i%4 == 1:
			r.Headers = []record.Header{{Key: "trace", Value: text(8)}}
		case i%4 == 2:
			r.Headers = []record.Header{{Key: "a", Value: nil}, {Key: "", Value: []byte{}}, {Key: "b", Value: text(30)}}
		case i%8 == 3:
			r.Headers = []record.Header{{Key: "only-null", Value: nil}}
		case i%8 == 7:
			// Longer than a bound, two-byte characters from an odd byte on:
			// a cut at the bound's length falls inside one.
			r.Headers = []record.Header{{Key: "k" + strings.Repeat("é", 10+i%3), Value: text(3)}}
		}
		if i >= 1500 && i%9 == 0 {
			r.Tags = []string{"t" + fmt.Sprint(i%4), "", string(text(25)), "ü" + strings.Repeat("€", 5+i%4)}
		}
		if i >= 1500 && i%6 == 0 {
			r.ProtocolData = []byte{byte(i), 0, 1}
		}
	}
	return recs
}

// entry is one level pair of a leaf column and its value when present: 8
// little-endian bytes for the int64 columns, the bytes for byte arrays.
type entry struct {
	rep, def uint8
	val      []byte
}

// shred splits the records into the entries of each leaf column, by row,
// as docs/parquet.md's schema says (independently of the writer).
func shred(recs []record.Record) [numLeaves][][]entry {
	var out [numLeaves][][]entry
	opt := func(b []byte) entry {
		if b == nil {
			return entry{}
		}
		return entry{def: 1, val: b}
	}
	for i := range recs {
		r := &recs[i]
		var row [numLeaves][]entry
		row[colOffset] = []entry{{val: binary.LittleEndian.AppendUint64(nil, r.Offset)}}
		row[colTimestamp] = []entry{{val: binary.LittleEndian.AppendUint64(nil, uint64(r.Timestamp))}}
		row[colKey] = []entry{opt(r.Key)}
		row[colValue] = []entry{opt(r.Value)}
		row[colProtocolData] = []entry{opt(r.ProtocolData)}
		if len(r.Headers) == 0 {
			row[colHeaderKey], row[colHeaderValue] = []entry{{}}, []entry{{}}
		}
		for h, hd := range r.Headers {
			rep := uint8(min(h, 1))
			row[colHeaderKey] = append(row[colHeaderKey], entry{rep: rep, def: 1, val: []byte(hd.Key)})
			v := entry{rep: rep, def: 1}
			if hd.Value != nil {
				v.def, v.val = 2, hd.Value
			}
			row[colHeaderValue] = append(row[colHeaderValue], v)
		}
		if len(r.Tags) == 0 {
			row[colTag] = []entry{{}}
		}
		for k, tag := range r.Tags {
			row[colTag] = append(row[colTag], entry{rep: uint8(min(k, 1)), def: 1, val: []byte(tag)})
		}
		for c := range out {
			out[c] = append(out[c], row[c])
		}
	}
	return out
}

// decodedPage is one data page as it lies in the file.
type decodedPage struct {
	at, size   int64 // where its header starts, and its bytes with the header
	headerSize int64
	h          *format.PageHeader
	entries    []entry
	nulls      int    // entries below the leaf's maximum definition level
	rows       int    // entries of repetition level 0
	lo, hi     []byte // the true min and max of its values; nil when none
	repHist    []int64
	defHist    []int64
	valueBytes int64 // the byte array values' bytes
}

func compareValues(typ format.Type, a, b []byte) int {
	if typ == format.Int64 {
		return cmp.Compare(int64(binary.LittleEndian.Uint64(a)), int64(binary.LittleEndian.Uint64(b)))
	}
	return bytes.Compare(a, b)
}

// decodeChunk walks the column chunk's pages from its data page offset to
// its end and decodes each: levels (parquet-go's RLE decoder), values
// (PLAIN), with the CRC and sizes checked on the way.
func decodeChunk(data []byte, m format.ColumnMetaData, c int, codec compress.Codec) ([]decodedPage, error) {
	leaf := wantLeaves[c]
	if m.DataPageOffset < 4 || m.TotalCompressedSize <= 0 || m.DataPageOffset+m.TotalCompressedSize > int64(len(data)) {
		return nil, fmt.Errorf("chunk at %d of %d bytes in a file of %d", m.DataPageOffset, m.TotalCompressedSize, len(data))
	}
	var pages []decodedPage
	for at, end := m.DataPageOffset, m.DataPageOffset+m.TotalCompressedSize; at < end; {
		var proto thrift.CompactProtocol
		r := proto.NewReaderFromBytes(data[at:end])
		h := new(format.PageHeader)
		if err := thrift.NewDecoder(r).Decode(h); err != nil {
			return nil, fmt.Errorf("page %d at %d: header: %v", len(pages), at, err)
		}
		p := decodedPage{at: at, headerSize: int64(r.BytesRead()), h: h}
		p.size = p.headerSize + int64(h.CompressedPageSize)
		if h.Type != format.DataPageV2 || !h.DataPageHeaderV2.Valid || at+p.size > end {
			return nil, fmt.Errorf("page %d at %d: type %s of %d bytes, the chunk ends at %d", len(pages), at, h.Type, p.size, end)
		}
		v2 := h.DataPageHeaderV2.V
		body := data[at+p.headerSize : at+p.size]
		if got := int32(crc32.ChecksumIEEE(body)); got != h.CRC {
			return nil, fmt.Errorf("page %d: CRC %08x, the header says %08x", len(pages), uint32(got), uint32(h.CRC))
		}
		lv := int(v2.RepetitionLevelsByteLength + v2.DefinitionLevelsByteLength)
		if v2.RepetitionLevelsByteLength < 0 || v2.DefinitionLevelsByteLength < 0 || lv > len(body) {
			return nil, fmt.Errorf("page %d: levels of %d+%d bytes in %d", len(pages), v2.RepetitionLevelsByteLength, v2.DefinitionLevelsByteLength, len(body))
		}
		nv := int(v2.NumValues)
		rep, err := decodeLevels(body[:v2.RepetitionLevelsByteLength], leaf.maxRep, nv)
		if err != nil {
			return nil, fmt.Errorf("page %d: repetition levels: %v", len(pages), err)
		}
		def, err := decodeLevels(body[v2.RepetitionLevelsByteLength:lv], leaf.maxDef, nv)
		if err != nil {
			return nil, fmt.Errorf("page %d: definition levels: %v", len(pages), err)
		}
		vals := body[lv:]
		if v2.IsCompressed.V || !v2.IsCompressed.Valid { // absent means compressed
			if vals, err = codec.Decode(nil, vals); err != nil {
				return nil, fmt.Errorf("page %d: decompressing: %v", len(pages), err)
			}
		}
		if int(h.UncompressedPageSize) != lv+len(vals) {
			return nil, fmt.Errorf("page %d: %d bytes uncompressed, the header says %d", len(pages), lv+len(vals), h.UncompressedPageSize)
		}
		if v2.Encoding != format.Plain {
			return nil, fmt.Errorf("page %d: encoding %s", len(pages), v2.Encoding)
		}
		p.repHist, p.defHist = make([]int64, leaf.maxRep+1), make([]int64, leaf.maxDef+1)
		for i := range nv {
			e := entry{rep: rep[i], def: def[i]}
			p.repHist[e.rep]++
			p.defHist[e.def]++
			if e.rep == 0 {
				p.rows++
			}
			if int(e.def) < leaf.maxDef {
				p.nulls++
				p.entries = append(p.entries, e)
				continue
			}
			k := 8
			if leaf.typ == format.ByteArray {
				if len(vals) < 4 {
					return nil, fmt.Errorf("page %d: value %d cut off", len(pages), i)
				}
				k = int(binary.LittleEndian.Uint32(vals))
				vals = vals[4:]
				p.valueBytes += int64(k)
			}
			if len(vals) < k {
				return nil, fmt.Errorf("page %d: value %d of %d bytes in %d", len(pages), i, k, len(vals))
			}
			e.val, vals = vals[:k:k], vals[k:]
			if p.lo == nil || compareValues(leaf.typ, e.val, p.lo) < 0 {
				p.lo = e.val
			}
			if p.hi == nil || compareValues(leaf.typ, e.val, p.hi) > 0 {
				p.hi = e.val
			}
			p.entries = append(p.entries, e)
		}
		if len(vals) != 0 {
			return nil, fmt.Errorf("page %d: %d bytes after its %d values", len(pages), len(vals), nv)
		}
		pages = append(pages, p)
		at += p.size
	}
	return pages, nil
}

// decodeLevels decodes nv levels of a v2 page (RLE, no length prefix);
// a column whose maximum is 0 stores none: every level is 0.
func decodeLevels(src []byte, max, nv int) ([]uint8, error) {
	if max == 0 {
		if len(src) != 0 {
			return nil, fmt.Errorf("%d bytes of levels whose maximum is 0", len(src))
		}
		return make([]uint8, nv), nil
	}
	enc := rle.Encoding{BitWidth: bits.Len8(uint8(max))}
	lv, err := enc.DecodeLevels(nil, src)
	if err != nil {
		return nil, err
	}
	if len(lv) < nv { // bit-packed runs round up to 8
		return nil, fmt.Errorf("%d levels, the header says %d", len(lv), nv)
	}
	for _, l := range lv[:nv] {
		if int(l) > max {
			return nil, fmt.Errorf("level %d above the maximum %d", l, max)
		}
	}
	return lv[:nv], nil
}

// checkPageHeader: the counts and statistics of the page header are the
// page's.
func checkPageHeader(t *testing.T, where string, leaf leafSpec, p *decodedPage) {
	t.Helper()
	v2 := p.h.DataPageHeaderV2.V
	if int(v2.NumValues) != len(p.entries) || int(v2.NumNulls) != p.nulls || int(v2.NumRows) != p.rows {
		t.Fatalf("%s: the header says %d values, %d nulls, %d rows; the page holds %d, %d, %d",
			where, v2.NumValues, v2.NumNulls, v2.NumRows, len(p.entries), p.nulls, p.rows)
	}
	if len(p.entries) == 0 || p.entries[0].rep != 0 {
		t.Fatalf("%s: does not start a row (%d entries)", where, len(p.entries))
	}
	st := v2.Statistics
	if st.NullCount != int64(p.nulls) {
		t.Fatalf("%s: statistics' null count %d, the page holds %d nulls", where, st.NullCount, p.nulls)
	}
	// Page statistics are written untruncated, so they are the page's
	// extremes exactly; the opaque byte columns carry none.
	opaque := leaf.path == "value" || leaf.path == "protocol_data" || leaf.path == "headers.list.element.value"
	if opaque || p.lo == nil {
		if st.MinValue != nil || st.MaxValue != nil || st.Min != nil || st.Max != nil {
			t.Fatalf("%s: statistics min %.24x max %.24x over %d values, want none", where, st.MinValue, st.MaxValue, len(p.entries)-p.nulls)
		}
		return
	}
	if !bytes.Equal(st.MinValue, p.lo) || !bytes.Equal(st.MaxValue, p.hi) || !bytes.Equal(st.Min, p.lo) || !bytes.Equal(st.Max, p.hi) {
		t.Fatalf("%s: statistics [%.24x, %.24x] (deprecated [%.24x, %.24x]), the page's values span [%.24x, %.24x]", where, st.MinValue, st.MaxValue, st.Min, st.Max, p.lo, p.hi)
	}
}

// pageIndex reads the chunk's column and offset index, each exactly the
// bytes the footer says.
func pageIndex(t *testing.T, where string, data []byte, ch *format.ColumnChunk) (*format.ColumnIndex, *format.OffsetIndex) {
	t.Helper()
	read := func(what string, off int64, n int32, v any) {
		if off <= 0 || n <= 0 || off+int64(n) > int64(len(data)) {
			t.Fatalf("%s: %s at %d of %d bytes in a file of %d", where, what, off, n, len(data))
		}
		var proto thrift.CompactProtocol
		r := proto.NewReaderFromBytes(data[off : off+int64(n)])
		if err := thrift.NewDecoder(r).Decode(v); err != nil {
			t.Fatalf("%s: %s: %v", where, what, err)
		}
		if r.BytesRead() != int(n) {
			t.Fatalf("%s: %s of %d bytes, the footer says %d", where, what, r.BytesRead(), n)
		}
	}
	ci, oi := new(format.ColumnIndex), new(format.OffsetIndex)
	read("column index", ch.ColumnIndexOffset, ch.ColumnIndexLength, ci)
	read("offset index", ch.OffsetIndexOffset, ch.OffsetIndexLength, oi)
	return ci, oi
}

// stringLeaves are the columns of logical type STRING (header keys and
// tags): their bounds must be UTF-8 too.
var stringLeaves = map[string]bool{"headers.list.element.key": true, "tags.list.element": true}

type pageIndexCoverage struct {
	pages     int
	nullPages [numLeaves]int
	orders    [numLeaves]map[format.BoundaryOrder]bool
	truncated int
}

// checkColumnIndex: null pages and counts are the pages', every bound
// bounds its page's values (a truncated one only loosely: min a prefix of
// the page's min, max above the page's max), the boundary order holds of
// the bounds as written, and the level histograms count the page's levels.
func checkColumnIndex(t *testing.T, where string, leaf leafSpec, ci *format.ColumnIndex, pages []decodedPage, seen *pageIndexCoverage) {
	t.Helper()
	c := slices.IndexFunc(wantLeaves, func(l leafSpec) bool { return l.path == leaf.path })
	n := len(pages)
	if len(ci.NullPages) != n || len(ci.NullCounts) != n || len(ci.MinValues) != n || len(ci.MaxValues) != n {
		t.Fatalf("%s: column index of %d null pages, %d null counts, %d mins, %d maxes for %d pages",
			where, len(ci.NullPages), len(ci.NullCounts), len(ci.MinValues), len(ci.MaxValues), n)
	}
	for p := range pages {
		pg := &pages[p]
		lo, hi := ci.MinValues[p], ci.MaxValues[p]
		if ci.NullCounts[p] != int64(pg.nulls) {
			t.Fatalf("%s page %d: null count %d, the page holds %d nulls", where, p, ci.NullCounts[p], pg.nulls)
		}
		if ci.NullPages[p] != (pg.lo == nil) {
			t.Fatalf("%s page %d: null page %v, the page holds %d values and %d nulls", where, p, ci.NullPages[p], len(pg.entries)-pg.nulls, pg.nulls)
		}
		if ci.NullPages[p] {
			seen.nullPages[c]++
			if len(lo) != 0 || len(hi) != 0 {
				t.Fatalf("%s page %d: a null page with bounds %.24x, %.24x", where, p, lo, hi)
			}
			continue
		}
		for _, e := range pg.entries {
			if e.val != nil && (compareValues(leaf.typ, e.val, lo) < 0 || compareValues(leaf.typ, e.val, hi) > 0) {
				t.Fatalf("%s page %d: value %.24x outside the column index's [%.24x, %.24x]", where, p, e.val, lo, hi)
			}
		}
		if leaf.typ == format.Int64 {
			if !bytes.Equal(lo, pg.lo) || !bytes.Equal(hi, pg.hi) {
				t.Fatalf("%s page %d: bounds [%.24x, %.24x], the page's values span [%.24x, %.24x]", where, p, lo, hi, pg.lo, pg.hi)
			}
			continue
		}
		// Truncation makes a bound shorter, never wider than needed.
		if !bytes.HasPrefix(pg.lo, lo) || len(lo) > columnIndexBytes {
			t.Fatalf("%s page %d: min %.24x is not a prefix of at most %d bytes of the page's min %.24x", where, p, lo, columnIndexBytes, pg.lo)
		}
		if !bytes.Equal(hi, pg.hi) && len(hi) > columnIndexBytes {
			t.Fatalf("%s page %d: max %.24x is neither the page's max %.24x nor at most %d bytes", where, p, hi, pg.hi, columnIndexBytes)
		}
		// A string's bound must be a string: cut between characters.
		if stringLeaves[leaf.path] && utf8.Valid(pg.lo) && utf8.Valid(pg.hi) && (!utf8.Valid(lo) || !utf8.Valid(hi)) {
			t.Fatalf("%s page %d: bounds %q, %q of UTF-8 strings are not UTF-8", where, p, lo, hi)
		}
		if !bytes.Equal(lo, pg.lo) || !bytes.Equal(hi, pg.hi) {
			seen.truncated++
		}
	}
	if want := recomputeBoundaryOrder(leaf.typ, ci); ci.BoundaryOrder != want {
		t.Fatalf("%s: boundary order %s, the bounds are %s", where, ci.BoundaryOrder, want)
	}
	if seen.orders[c] == nil {
		seen.orders[c] = map[format.BoundaryOrder]bool{}
	}
	seen.orders[c][ci.BoundaryOrder] = true
	checkHistograms(t, where+" column index", leaf.maxRep, ci.RepetitionLevelHistogram, pages, func(p *decodedPage) []int64 { return p.repHist })
	checkHistograms(t, where+" column index", leaf.maxDef, ci.DefinitionLevelHistogram, pages, func(p *decodedPage) []int64 { return p.defHist })
}

// recomputeBoundaryOrder: ascending when the non-null pages' min and max
// both never decrease, descending when they never increase; unordered
// otherwise, and when both hold (fewer than two pages, or all equal).
func recomputeBoundaryOrder(typ format.Type, ci *format.ColumnIndex) format.BoundaryOrder {
	asc, desc, prev := true, true, -1
	for p := range ci.NullPages {
		if ci.NullPages[p] {
			continue
		}
		if prev >= 0 {
			a := compareValues(typ, ci.MinValues[prev], ci.MinValues[p])
			b := compareValues(typ, ci.MaxValues[prev], ci.MaxValues[p])
			asc = asc && a <= 0 && b <= 0
			desc = desc && a >= 0 && b >= 0
		}
		prev = p
	}
	switch {
	case asc && !desc:
		return format.Ascending
	case desc && !asc:
		return format.Descending
	}
	return format.Unordered
}

// checkHistograms: hist is the pages' histograms of one level, page after
// page (max+1 counts each); absent where the maximum level is 0.
func checkHistograms(t *testing.T, where string, max int, hist []int64, pages []decodedPage, of func(*decodedPage) []int64) {
	t.Helper()
	if max == 0 {
		if len(hist) != 0 {
			t.Fatalf("%s: a level histogram %v where the maximum level is 0", where, hist)
		}
		return
	}
	if len(hist) != len(pages)*(max+1) {
		t.Fatalf("%s: level histogram of %d counts for %d pages of levels up to %d", where, len(hist), len(pages), max)
	}
	for p := range pages {
		if got, want := hist[p*(max+1):(p+1)*(max+1)], of(&pages[p]); !slices.Equal(got, want) {
			t.Fatalf("%s page %d: level histogram %v, the page's levels %v", where, p, got, want)
		}
	}
}

// checkOffsetIndex: one location per page, at the page's header, of the
// page's bytes with the header, and its first row the rows before it.
func checkOffsetIndex(t *testing.T, where string, oi *format.OffsetIndex, pages []decodedPage) {
	t.Helper()
	if len(oi.PageLocations) != len(pages) {
		t.Fatalf("%s: offset index of %d pages, the chunk holds %d", where, len(oi.PageLocations), len(pages))
	}
	rows := int64(0)
	for p, l := range oi.PageLocations {
		if l.Offset != pages[p].at || int64(l.CompressedPageSize) != pages[p].size || l.FirstRowIndex != rows {
			t.Fatalf("%s page %d: offset index says %+v; the page is at %d, of %d bytes, after %d rows", where, p, l, pages[p].at, pages[p].size, rows)
		}
		rows += int64(pages[p].rows)
	}
	// Optional; when written, one count per page.
	if u := oi.UnencodedByteArrayDataBytes; len(u) != 0 {
		for p := range pages {
			if p >= len(u) || u[p] != pages[p].valueBytes {
				t.Fatalf("%s: unencoded bytes %v in the offset index; page %d holds %d", where, u, p, pages[p].valueBytes)
			}
		}
	}
}

// checkColumnChunk: the chunk's metadata adds up its pages, and its
// statistics, when present, are its values' extremes.
func checkColumnChunk(t *testing.T, where string, leaf leafSpec, m *format.ColumnMetaData, pages []decodedPage, codec format.CompressionCodec) {
	t.Helper()
	var values, nulls, comp, uncomp, valueBytes int64
	var lo, hi []byte
	repHist, defHist := make([]int64, leaf.maxRep+1), make([]int64, leaf.maxDef+1)
	for i := range pages {
		p := &pages[i]
		values += int64(len(p.entries))
		nulls += int64(p.nulls)
		comp += p.size
		uncomp += p.headerSize + int64(p.h.UncompressedPageSize)
		valueBytes += p.valueBytes
		if p.lo != nil && (lo == nil || compareValues(leaf.typ, p.lo, lo) < 0) {
			lo = p.lo
		}
		if p.hi != nil && (hi == nil || compareValues(leaf.typ, p.hi, hi) > 0) {
			hi = p.hi
		}
		for l, n := range p.repHist {
			repHist[l] += n
		}
		for l, n := range p.defHist {
			defHist[l] += n
		}
	}
	if m.Type != leaf.typ || !slices.Equal(m.PathInSchema, strings.Split(leaf.path, ".")) || m.Codec != codec {
		t.Fatalf("%s: type %s, path %v, codec %s", where, m.Type, m.PathInSchema, m.Codec)
	}
	if m.NumValues != values || m.TotalCompressedSize != comp || m.TotalUncompressedSize != uncomp || m.Statistics.NullCount != nulls {
		t.Fatalf("%s: metadata says %d values, %d bytes (%d uncompressed), %d nulls; the pages hold %d, %d (%d), %d",
			where, m.NumValues, m.TotalCompressedSize, m.TotalUncompressedSize, m.Statistics.NullCount, values, comp, uncomp, nulls)
	}
	if m.DictionaryPageOffset != 0 || m.IndexPageOffset != 0 {
		t.Fatalf("%s: a dictionary or index page offset where there is none", where)
	}
	if len(m.EncodingStats) != 1 || m.EncodingStats[0].Count != int32(len(pages)) || m.EncodingStats[0].PageType != format.DataPageV2 {
		t.Fatalf("%s: encoding stats %+v for %d data pages", where, m.EncodingStats, len(pages))
	}
	st := m.Statistics
	if st.Min != nil && !bytes.Equal(st.Min, st.MinValue) || st.Max != nil && !bytes.Equal(st.Max, st.MaxValue) {
		t.Fatalf("%s: deprecated statistics [%.24x, %.24x] differ from [%.24x, %.24x]", where, st.Min, st.Max, st.MinValue, st.MaxValue)
	}
	switch {
	case st.MinValue == nil && st.MaxValue == nil:
		// Left out: allowed for no values, and for byte bounds too long for
		// the footer.
		if lo != nil && (leaf.typ == format.Int64 || max(len(lo), len(hi)) <= maxStatisticsBytes) {
			t.Fatalf("%s: no statistics over values spanning [%.24x, %.24x]", where, lo, hi)
		}
	case !bytes.Equal(st.MinValue, lo) || !bytes.Equal(st.MaxValue, hi):
		t.Fatalf("%s: statistics [%.24x, %.24x], the values span [%.24x, %.24x]", where, st.MinValue, st.MaxValue, lo, hi)
	}
	if leaf.typ == format.ByteArray && m.SizeStatistics.UnencodedByteArrayDataBytes != valueBytes {
		t.Fatalf("%s: %d unencoded bytes, the values hold %d", where, m.SizeStatistics.UnencodedByteArrayDataBytes, valueBytes)
	}
	for _, h := range []struct {
		what      string
		max       int
		got, want []int64
	}{
		{"repetition", leaf.maxRep, m.SizeStatistics.RepetitionLevelHistogram, repHist},
		{"definition", leaf.maxDef, m.SizeStatistics.DefinitionLevelHistogram, defHist},
	} {
		if h.max == 0 && len(h.got) != 0 || h.max > 0 && !slices.Equal(h.got, h.want) {
			t.Fatalf("%s: %s level histogram %v, the pages' levels %v", where, h.what, h.got, h.want)
		}
	}
}

// checkContents: the pages hold the rows of the row group, as shredded.
func checkContents(t *testing.T, where string, pages []decodedPage, want [][]entry, first, rows int64) {
	t.Helper()
	var got []entry
	for i := range pages {
		got = append(got, pages[i].entries...)
	}
	var exp []entry
	for _, row := range want[first : first+rows] {
		exp = append(exp, row...)
	}
	if len(got) != len(exp) {
		t.Fatalf("%s: %d entries, the rows %d-%d make %d", where, len(got), first, first+rows-1, len(exp))
	}
	for i := range got {
		g, e := got[i], exp[i]
		if g.rep != e.rep || g.def != e.def || !bytes.Equal(g.val, e.val) || (g.val == nil) != (e.val == nil) {
			t.Fatalf("%s: entry %d is (%d, %d, %.24q), the records make (%d, %d, %.24q)", where, i, g.rep, g.def, g.val, e.rep, e.def, e.val)
		}
	}
}

// checkRowGroup: its rows are every column's, its sizes its chunks', and
// its chunks lie one after another from where the previous group ended.
// It returns where the group ends.
func checkRowGroup(t *testing.T, gi int, g *format.RowGroup, chunks [][]decodedPage, at int64) int64 {
	t.Helper()
	if len(g.Columns) != numLeaves {
		t.Fatalf("row group %d: %d columns", gi, len(g.Columns))
	}
	var total, comp int64
	for c := range g.Columns {
		m := &g.Columns[c].MetaData
		rows := int64(0)
		for i := range chunks[c] {
			rows += int64(chunks[c][i].rows)
		}
		if rows != g.NumRows {
			t.Fatalf("row group %d: %d rows, column %s holds %d", gi, g.NumRows, wantLeaves[c].path, rows)
		}
		if m.DataPageOffset != at {
			t.Fatalf("row group %d column %s: at %d, the previous chunk ends at %d", gi, wantLeaves[c].path, m.DataPageOffset, at)
		}
		at += m.TotalCompressedSize
		total += m.TotalUncompressedSize
		comp += m.TotalCompressedSize
	}
	if g.TotalByteSize != total || g.TotalCompressedSize != comp || g.FileOffset != g.Columns[0].MetaData.DataPageOffset || int(g.Ordinal) != gi {
		t.Fatalf("row group %d: %d bytes (%d compressed) at %d, ordinal %d; its chunks make %d (%d) at %d",
			gi, g.TotalByteSize, g.TotalCompressedSize, g.FileOffset, g.Ordinal, total, comp, g.Columns[0].MetaData.DataPageOffset)
	}
	return at
}

// The column index's byte array bounds are cut to columnIndexBytes: the
// min to a prefix, the max to a prefix with its last byte raised, so both
// still bound the value; a string's are cut between characters, so they
// stay UTF-8 (the format wants bounds of the column's type).
func TestIndexBoundTruncation(t *testing.T) {
	for _, tc := range []struct {
		name         string
		v            string
		utf          bool
		wantLo, want string // the bounds expected
	}{
		{"short", "abc", false, "abc", "abc"},
		{"exactly the limit", "0123456789abcdef", true, "0123456789abcdef", "0123456789abcdef"},
		{"ascii", "0123456789abcdefXYZ", true, "0123456789abcdef", "0123456789abcdeg"},
		{"all 0xff", strings.Repeat("\xff", 20), false, strings.Repeat("\xff", 16), strings.Repeat("\xff", 20)},
		{"0xff tail", "ab" + strings.Repeat("\xff", 20), false, "ab" + strings.Repeat("\xff", 14), "ac"},
		{"bytes cut in a character", "a" + strings.Repeat("é", 10), false, "a" + strings.Repeat("é", 7) + "\xc3", "a" + strings.Repeat("é", 7) + "\xc4"},
		{"string cut between characters", "a" + strings.Repeat("é", 10), true, "a" + strings.Repeat("é", 7), "a" + strings.Repeat("é", 6) + "ê"},
		{"three-byte characters", strings.Repeat("€", 7), true, strings.Repeat("€", 5), strings.Repeat("€", 4) + "\xe2\x82\xad"},
		{"0x7f cannot become 0x80: the max whole", strings.Repeat("\x7f", 20), true, strings.Repeat("\x7f", 16), strings.Repeat("\x7f", 20)},
		{"not UTF-8: cut as bytes", "\xc3" + strings.Repeat("é", 10), true, "\xc3" + strings.Repeat("é", 7) + "\xc3", "\xc3" + strings.Repeat("é", 7) + "\xc4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := []byte(tc.v)
			lo, hi := truncMin(v, tc.utf), truncMax(v, tc.utf)
			if string(lo) != tc.wantLo || string(hi) != tc.want {
				t.Fatalf("bounds %q, %q; want %q, %q", lo, hi, tc.wantLo, tc.want)
			}
			if bytes.Compare(lo, v) > 0 || bytes.Compare(hi, v) < 0 {
				t.Fatalf("bounds %q, %q do not bound %q", lo, hi, v)
			}
			if tc.utf && utf8.Valid(v) && (!utf8.Valid(lo) || !utf8.Valid(hi)) {
				t.Fatalf("bounds %q, %q of a string are not UTF-8", lo, hi)
			}
		})
	}
}
