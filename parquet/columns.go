package parquet

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/klauspost/compress/zstd"

	"strata/engine/record"
)

// The column-wise reader: a cold read decodes the pages of each column
// straight into records, from bytes the caller fetched, instead of asking
// parquet-go to reconstruct rows (reflection, a Row per record, a copy of
// every value). It reads the pages strata's writer produces (data page v2,
// PLAIN or dictionary values, RLE levels); anything else is left to
// parquet-go through ErrNoFastPath, so files written otherwise still read.

// ErrNoFastPath says a file or page is outside what the column-wise reader
// decodes; ReadRows and ReadGroup (parquet-go) read it instead.
var ErrNoFastPath = errors.New("parquet: not decodable column-wise")

// Span is a byte range [Start, End) of a file.
type Span struct{ Start, End int64 }

// leaf columns of strata's schema, in the order format 2 writes them, with
// the levels the schema gives them: the column-wise reader trusts nothing
// else. A file's columns are found by path (File.leaf), so format 1's
// order (value fourth) reads the same way.
type leafSpec struct {
	path           string
	typ            format.Type
	maxDef, maxRep int
}

var wantLeaves = []leafSpec{
	{"offset", format.Int64, 0, 0},
	{"timestamp", format.Int64, 0, 0},
	{"key", format.ByteArray, 1, 0},
	{"headers.list.element.key", format.ByteArray, 1, 1},
	{"headers.list.element.value", format.ByteArray, 2, 1},
	{"tags.list.element", format.ByteArray, 1, 1},
	{"protocol_data", format.ByteArray, 1, 0},
	{"value", format.ByteArray, 1, 0},
}

const (
	colOffset = iota
	colTimestamp
	colKey
	colHeaderKey
	colHeaderValue
	colTag
	colProtocolData
	colValue
	numLeaves
)

// checkColumnWise says whether f can be read column-wise: strata's leaf
// columns with their levels, and an offset index for every column chunk
// whose pages lie inside their row group, in order.
func (f *File) checkColumnWise() error {
	leaves := f.pf.Root().Columns()
	var flat []*pq.Column
	var walk func(cs []*pq.Column)
	walk = func(cs []*pq.Column) {
		for _, c := range cs {
			if c.Leaf() {
				flat = append(flat, c)
			} else {
				walk(c.Columns())
			}
		}
	}
	walk(leaves)
	f.width = len(flat)
	found := 0
	for i, c := range flat {
		if isTyped(c.Path()[0]) {
			continue
		}
		path := strings.Join(c.Path(), ".")
		l := slices.IndexFunc(wantLeaves, func(w leafSpec) bool { return w.path == path })
		if l < 0 || found&(1<<l) != 0 {
			return fmt.Errorf("leaf %d is %s: %w", i, path, ErrNoFastPath)
		}
		w := wantLeaves[l]
		if c.Type().Kind() != pq.Kind(w.typ) || c.MaxDefinitionLevel() != w.maxDef || c.MaxRepetitionLevel() != w.maxRep {
			return fmt.Errorf("leaf %d is %s (def %d, rep %d): %w", i, path, c.MaxDefinitionLevel(), c.MaxRepetitionLevel(), ErrNoFastPath)
		}
		found |= 1 << l
		f.leaf[l] = i
	}
	if found != 1<<numLeaves-1 {
		return fmt.Errorf("%d leaf columns: %w", len(flat), ErrNoFastPath)
	}
	idx := f.pf.OffsetIndexes()
	if len(idx) != len(f.groups)*f.width {
		return fmt.Errorf("no offset index: %w", ErrNoFastPath)
	}
	md := f.pf.Metadata()
	for gi, g := range f.groups {
		for c := 0; c < numLeaves; c++ {
			locs := idx[gi*f.width+f.leaf[c]].PageLocations
			if len(locs) == 0 {
				if g.Rows == 0 {
					continue
				}
				return fmt.Errorf("row group %d column %d has no pages in its offset index: %w", gi, c, ErrNoFastPath)
			}
			if locs[0].FirstRowIndex != 0 {
				return fmt.Errorf("row group %d column %d: first page starts at row %d: %w", gi, c, locs[0].FirstRowIndex, ErrNoFastPath)
			}
			for p, l := range locs {
				if l.Offset < g.Start || l.CompressedPageSize <= 0 || l.Offset+int64(l.CompressedPageSize) > g.End ||
					(p > 0 && (l.FirstRowIndex <= locs[p-1].FirstRowIndex || l.Offset < locs[p-1].Offset+int64(locs[p-1].CompressedPageSize))) ||
					l.FirstRowIndex >= g.Rows {
					return fmt.Errorf("row group %d column %d: page %d out of place: %w", gi, c, p, ErrNoFastPath)
				}
			}
			m := &md.RowGroups[gi].Columns[f.leaf[c]].MetaData
			if d := m.DictionaryPageOffset; d > 0 && (d < g.Start || d >= locs[0].Offset) {
				return fmt.Errorf("row group %d column %d: dictionary page out of place: %w", gi, c, ErrNoFastPath)
			}
		}
	}
	f.offsetsKnown = f.offsetStatistics()
	return nil
}

// offsetStatistics says, per row group, whether the footer's statistics of
// the offset column prove that its rows hold the offsets their positions
// give (smallest first offset + first row, largest that plus rows - 1, no
// nulls): strata's writer refuses gaps, so those two bound exactly the
// offsets in between, and a read need not fetch or decode the column.
func (f *File) offsetStatistics() []bool {
	md := f.pf.Metadata()
	known := make([]bool, len(f.groups))
	for gi, g := range f.groups {
		st := &md.RowGroups[gi].Columns[f.leaf[colOffset]].MetaData.Statistics
		lo, hi := st.MinValue, st.MaxValue
		if len(lo) == 0 {
			lo, hi = st.Min, st.Max // deprecated fields, for older writers
		}
		first := int64(f.firstOffset) + g.FirstRow
		known[gi] = g.Rows > 0 && len(lo) == 8 && len(hi) == 8 && st.NullCount == 0 &&
			int64(binary.LittleEndian.Uint64(lo)) == first && int64(binary.LittleEndian.Uint64(hi)) == first+g.Rows-1
	}
	return known
}

// PageSpans returns the byte ranges that hold rows [from, from+n) of row
// group i in every column (the pages the offset index names, and their
// dictionary pages), merged where they touch or nearly do, in file order.
// A point read fetches just these instead of the whole row group.
func (f *File) PageSpans(i int, from, n int64) ([]Span, error) {
	if f.slow != nil {
		return nil, f.slow
	}
	if i < 0 || i >= len(f.groups) || from < 0 || n <= 0 || from >= f.groups[i].Rows {
		return nil, fmt.Errorf("rows %d+%d of row group %d (of %d)", from, n, i, len(f.groups))
	}
	n = min(n, f.groups[i].Rows-from)
	md := f.pf.Metadata()
	spans := make([]Span, 0, 2*numLeaves)
	for c := 0; c < numLeaves; c++ {
		if c == colOffset && f.offsetsKnown[i] {
			continue
		}
		fc := f.leaf[c]
		locs := f.pf.OffsetIndexes()[i*f.width+fc].PageLocations
		p0, p1 := pageOf(locs, from), pageOf(locs, from+n-1)
		spans = append(spans, Span{locs[p0].Offset, locs[p1].Offset + int64(locs[p1].CompressedPageSize)})
		if d := md.RowGroups[i].Columns[fc].MetaData.DictionaryPageOffset; d > 0 {
			spans = append(spans, Span{d, locs[0].Offset})
		}
	}
	return mergeSpans(spans), nil
}

// spanGap is the largest gap between two spans fetched as one (the "hole
// size limit" of Arrow's and DuckDB's readers). A request costs an object
// store far more than its bytes: on MinIO over loopback a second ranged
// read in parallel took about 1.7 times the time of one, while one read
// 192 KiB longer took about a tenth more (on S3 a request's latency is
// that of megabytes). With value last, a page within spanGap of the row
// group's start comes with the small columns in one read, any other in a
// second; the bound keeps a point read's mean bytes under two pages (1 MiB
// row groups of 64 KiB pages: a third of the reads take one request, 93
// KiB on average; 128 KiB gave a fifth, 71 KiB).
const spanGap = 256 << 10

// maxSpans bounds the ranged reads of a point read: the small columns at
// the start of the row group and value's page (format 1: the columns
// before value, value's page, the columns after). With small records a
// column's chunk holds several pages, and the pages wanted lie apart; past
// this many spans the closest are fetched together, gap and all.
const maxSpans = 3

func mergeSpans(spans []Span) []Span {
	sort.Slice(spans, func(a, b int) bool { return spans[a].Start < spans[b].Start })
	out := spans[:1]
	for _, s := range spans[1:] {
		last := &out[len(out)-1]
		if s.Start <= last.End+spanGap {
			last.End = max(last.End, s.End)
			continue
		}
		out = append(out, s)
	}
	for len(out) > maxSpans {
		j := 0
		for i := 1; i+1 < len(out); i++ {
			if out[i+1].Start-out[i].End < out[j+1].Start-out[j].End {
				j = i
			}
		}
		out[j].End = out[j+1].End
		out = append(out[:j+1], out[j+2:]...)
	}
	return out
}

// pageOf is the page of locs holding row.
func pageOf(locs []format.PageLocation, row int64) int {
	return sort.Search(len(locs), func(p int) bool { return locs[p].FirstRowIndex > row }) - 1
}

// Bytes gives the decoder the file's bytes in [start, end), or false when
// the caller did not fetch them.
type Bytes func(start, end int64) ([]byte, bool)

// DecodeRows decodes rows [from, from+n) of row group i column-wise from
// bytes, which must hold the spans PageSpans names for them. Every row must
// carry the offset its position says; anything else is corruption.
// ErrNoFastPath means the file (or a page) needs ReadRows instead. The
// records' bytes are views of the decompressed pages (or of bytes', for
// uncompressed pages): a whole row group's records use all of them.
func (f *File) DecodeRows(i int, from, n int64, bytes Bytes) (recs []record.Record, err error) {
	return f.decodeRows(i, from, n, bytes, nil)
}

// CopyRows is DecodeRows for a few rows, a point read: the records own
// their bytes (one allocation for all of them), so once it returns nothing
// refers to what bytes served, which the caller may reuse, nor to the
// pages it decompressed, which the next read reuses. A point read uses a
// row or two of each page: copying them costs less than a page's
// allocation, its zeroing and the collector's work.
func (f *File) CopyRows(i int, from, n int64, bytes Bytes) (recs []record.Record, err error) {
	var pages pageBuffers
	defer pages.release()
	recs, err = f.decodeRows(i, from, n, bytes, &pages)
	if err != nil {
		return nil, err
	}
	return ownBytes(recs), nil
}

func (f *File) decodeRows(i int, from, n int64, bytes Bytes, pages *pageBuffers) (recs []record.Record, err error) {
	defer recoverCorrupt(&err)
	if f.slow != nil {
		return nil, f.slow
	}
	if i < 0 || i >= len(f.groups) || from < 0 || n <= 0 || from >= f.groups[i].Rows {
		return nil, fmt.Errorf("rows %d+%d of row group %d (of %d)", from, n, i, len(f.groups))
	}
	n = min(n, f.groups[i].Rows-from)
	cols := columnSets.Get().(*[numLeaves]column)
	defer func() {
		for c := range cols {
			cols[c].reset()
		}
		columnSets.Put(cols)
	}()
	md := f.pf.Metadata()
	for c := range cols {
		if c == colOffset && f.offsetsKnown[i] {
			continue // the footer's statistics give the offsets (offsetStatistics)
		}
		m := &md.RowGroups[i].Columns[f.leaf[c]].MetaData
		cols[c].pages = pages
		if err := cols[c].decode(f, i, c, m, from, n, bytes); err != nil {
			return nil, fmt.Errorf("row group %d column %s: %w", i, wantLeaves[c].path, err)
		}
	}
	return assemble(cols, f.firstOffset+uint64(f.groups[i].FirstRow), i, from, n, f.offsetsKnown[i])
}

// column is one leaf's decoded pages: its levels (none for a required
// column) and its non-null values, of the rows wanted only: vals[0] is the
// column's value number vlo (counted from its first decoded row). A point
// read decodes a small column's page of a thousand rows for one of them.
type column struct {
	firstRow int64 // the row (within the group) its first level belongs to
	rows     int64
	def, rep []uint8
	ints     []int64
	vals     [][]byte
	dict     [][]byte

	lens     []int32      // a page's value lengths (delta-length byte arrays)
	from, to int64        // the rows wanted, [from, to)
	vlo      int          // the number of the first value in vals
	nv       int          // values (non-null) met so far
	lrow     int64        // the row of the last level met
	pages    *pageBuffers // where decompressed pages come from, if pooled
}

// columnSets keep the columns' levels, values and lengths between reads:
// only assembling the records reads them (the records keep views of the
// pages, not these slices).
var columnSets = sync.Pool{New: func() any { return new([numLeaves]column) }}

// keepEntries bounds the slices a column keeps for the next read: a whole
// row group of small records must not pin megabytes in the pool.
const keepEntries = 16 << 10

func (col *column) reset() {
	clear(col.vals) // no hold on the pages
	clear(col.dict)
	keep := func(n int) bool { return n <= keepEntries }
	*col = column{def: col.def[:0], rep: col.rep[:0], ints: col.ints[:0], vals: col.vals[:0], lens: col.lens[:0]}
	if !keep(cap(col.def)) || !keep(cap(col.rep)) || !keep(cap(col.ints)) || !keep(cap(col.vals)) || !keep(cap(col.lens)) {
		*col = column{}
	}
}

// pageBuffers lends a read its decompression buffers and takes them back
// once the records no longer refer to them (CopyRows).
type pageBuffers struct{ lent []*[]byte }

// pagePools hold buffers of 4 KiB to 1 MiB by power of two; larger pages
// are allocated.
var pagePools [21]sync.Pool

const minPagePool, maxPagePool = 12, 20

func (pb *pageBuffers) get(size int) []byte {
	k := bits.Len(uint(max(size, 1) - 1))
	if pb == nil || k > maxPagePool {
		return make([]byte, 0, size)
	}
	k = max(k, minPagePool)
	b, _ := pagePools[k].Get().(*[]byte)
	if b == nil {
		s := make([]byte, 0, 1<<k)
		b = &s
	}
	pb.lent = append(pb.lent, b)
	return (*b)[:0]
}

func (pb *pageBuffers) release() {
	for _, b := range pb.lent {
		pagePools[bits.Len(uint(cap(*b)-1))].Put(b)
	}
	pb.lent = nil
}

// ownBytes copies the records' bytes into one allocation of their own.
func ownBytes(recs []record.Record) []record.Record {
	total := 0
	for i := range recs {
		r := &recs[i]
		total += len(r.Key) + len(r.Value) + len(r.ProtocolData)
		for _, h := range r.Headers {
			total += len(h.Value)
		}
	}
	arena := make([]byte, 0, total)
	own := func(b []byte) []byte {
		if b == nil {
			return nil // null stays null, empty stays empty
		}
		at := len(arena)
		arena = append(arena, b...)
		return arena[at:len(arena):len(arena)]
	}
	for i := range recs {
		r := &recs[i]
		r.Key, r.Value, r.ProtocolData = own(r.Key), own(r.Value), own(r.ProtocolData)
		if len(r.Headers) > 0 {
			hs := slices.Clone(r.Headers) // the headers of every decoded row share one array
			for j := range hs {
				hs[j].Value = own(hs[j].Value)
			}
			r.Headers = hs
		}
	}
	return recs
}

func (col *column) decode(f *File, gi, c int, m *format.ColumnMetaData, from, n int64, bytes Bytes) error {
	w := wantLeaves[c]
	locs := f.pf.OffsetIndexes()[gi*f.width+f.leaf[c]].PageLocations
	p0, p1 := pageOf(locs, from), pageOf(locs, from+n-1)
	col.firstRow = locs[p0].FirstRowIndex
	col.from, col.to, col.lrow, col.vlo = from, from+n, col.firstRow-1, -1
	if d := m.DictionaryPageOffset; d > 0 {
		raw, ok := bytes(d, locs[0].Offset)
		if !ok {
			return fmt.Errorf("dictionary page bytes %d-%d not fetched", d, locs[0].Offset)
		}
		if err := col.readDictionary(raw, m.Codec, w.typ); err != nil {
			return err
		}
	}
	for p := p0; p <= p1; p++ {
		l := locs[p]
		raw, ok := bytes(l.Offset, l.Offset+int64(l.CompressedPageSize))
		if !ok {
			return fmt.Errorf("page bytes %d-%d not fetched", l.Offset, l.Offset+int64(l.CompressedPageSize))
		}
		rows, err := col.readPage(raw, m.Codec, w.typ, w.maxDef, w.maxRep)
		if err != nil {
			return fmt.Errorf("page %d: %w", p, err)
		}
		want := f.groups[gi].Rows - l.FirstRowIndex
		if p+1 < len(locs) {
			want = locs[p+1].FirstRowIndex - l.FirstRowIndex
		}
		if int64(rows) != want {
			return fmt.Errorf("page %d holds %d rows, its offset index says %d: %w", p, rows, want, record.ErrCorrupt)
		}
		col.rows += int64(rows)
	}
	return nil
}

// pageHeader reads the Thrift page header at the start of raw and returns
// the page body after it.
func pageHeader(raw []byte) (*format.PageHeader, []byte, error) {
	var proto thrift.CompactProtocol
	r := proto.NewReaderFromBytes(raw)
	h := new(format.PageHeader)
	if err := thrift.NewDecoder(r).Decode(h); err != nil {
		return nil, nil, fmt.Errorf("page header: %v: %w", err, record.ErrCorrupt)
	}
	body := raw[r.BytesRead():]
	if h.CompressedPageSize < 0 || h.UncompressedPageSize < 0 || int(h.CompressedPageSize) != len(body) || h.UncompressedPageSize > maxPageBytes {
		return nil, nil, fmt.Errorf("page of %d bytes claims %d compressed, %d uncompressed: %w", len(body), h.CompressedPageSize, h.UncompressedPageSize, record.ErrCorrupt)
	}
	return h, body, nil
}

// maxPageBytes bounds what a page header may make the reader allocate.
const maxPageBytes = 256 << 20

func (col *column) readDictionary(raw []byte, codec format.CompressionCodec, typ format.Type) error {
	h, body, err := pageHeader(raw)
	if err != nil {
		return err
	}
	if h.Type != format.DictionaryPage || !h.DictionaryPageHeader.Valid {
		return fmt.Errorf("page type %s where the dictionary should be: %w", h.Type, record.ErrCorrupt)
	}
	dh := h.DictionaryPageHeader.V
	if typ != format.ByteArray || (dh.Encoding != format.Plain && dh.Encoding != format.PlainDictionary) {
		return ErrNoFastPath
	}
	data, err := col.pages.decompress(codec, body, int(h.UncompressedPageSize))
	if err != nil {
		return err
	}
	col.dict, err = plainByteArrays(nil, data, int(dh.NumValues), 0, int(dh.NumValues))
	return err
}

// readPage decodes one data page v2 and returns the rows it holds.
func (col *column) readPage(raw []byte, codec format.CompressionCodec, typ format.Type, maxDef, maxRep int) (int, error) {
	h, body, err := pageHeader(raw)
	if err != nil {
		return 0, err
	}
	if h.Type != format.DataPageV2 || !h.DataPageHeaderV2.Valid {
		return 0, ErrNoFastPath
	}
	v2 := &h.DataPageHeaderV2.V
	nv, replen, deflen := int(v2.NumValues), int(v2.RepetitionLevelsByteLength), int(v2.DefinitionLevelsByteLength)
	if nv < 0 || v2.NumRows < 0 || v2.NumNulls < 0 || v2.NumNulls > v2.NumValues || replen < 0 || deflen < 0 || replen+deflen > len(body) || nv > maxPageBytes {
		return 0, fmt.Errorf("data page header (values %d, nulls %d, levels %d+%d bytes of %d): %w", nv, v2.NumNulls, replen, deflen, len(body), record.ErrCorrupt)
	}
	rows := int(v2.NumRows)
	if maxRep == 0 && rows != nv {
		return 0, fmt.Errorf("%d values in %d rows of a flat column: %w", nv, rows, record.ErrCorrupt)
	}
	present := nv
	if maxRep > 0 {
		at := len(col.rep)
		if col.rep, err = levels(col.rep, body[:replen], maxRep, nv); err != nil {
			return 0, err
		}
		starts := 0
		for _, r := range col.rep[at:] {
			if r == 0 {
				starts++
			}
		}
		if starts != rows || (nv > 0 && col.rep[at] != 0) {
			return 0, fmt.Errorf("%d rows start in a page of %d rows: %w", starts, rows, record.ErrCorrupt)
		}
	}
	if maxDef > 0 {
		at := len(col.def)
		if col.def, err = levels(col.def, body[replen:replen+deflen], maxDef, nv); err != nil {
			return 0, err
		}
		present = 0
		for _, d := range col.def[at:] {
			if int(d) == maxDef {
				present++
			}
		}
	}
	if present != nv-int(v2.NumNulls) {
		return 0, fmt.Errorf("%d values present, the page header says %d: %w", present, nv-int(v2.NumNulls), record.ErrCorrupt)
	}
	a, b := 0, present // the page's values kept: those of the rows wanted
	if typ == format.Int64 {
		col.ints = slices.Grow(col.ints, present)
	} else {
		a, b = col.window(maxDef, maxRep, nv)
		col.vals = slices.Grow(col.vals, b-a)
	}
	data := body[replen+deflen:]
	if !v2.IsCompressed.Valid || v2.IsCompressed.V {
		if data, err = col.pages.decompress(codec, data, int(h.UncompressedPageSize)-replen-deflen); err != nil {
			return 0, err
		}
	}
	switch {
	case typ == format.Int64 && v2.Encoding == format.Plain:
		if len(data) != 8*present {
			return 0, fmt.Errorf("%d bytes of int64 for %d values: %w", len(data), present, record.ErrCorrupt)
		}
		for j := 0; j < present; j++ {
			col.ints = append(col.ints, int64(binary.LittleEndian.Uint64(data[8*j:])))
		}
	case typ == format.Int64:
		vs, err := pq.LookupEncoding(v2.Encoding).DecodeInt64(nil, data)
		if err != nil || len(vs) != present {
			return 0, fmt.Errorf("%s int64 values (%d of %d): %v: %w", v2.Encoding, len(vs), present, err, ErrNoFastPath)
		}
		col.ints = append(col.ints, vs...)
	case v2.Encoding == format.Plain:
		if col.vals, err = plainByteArrays(col.vals, data, present, a, b); err != nil {
			return 0, err
		}
	case v2.Encoding == format.RLEDictionary || v2.Encoding == format.PlainDictionary:
		if col.dict == nil && present > 0 {
			return 0, fmt.Errorf("dictionary-encoded page without a dictionary: %w", record.ErrCorrupt)
		}
		if present > 0 {
			if len(data) < 1 {
				return 0, fmt.Errorf("dictionary indexes cut off: %w", record.ErrCorrupt)
			}
			var bad error
			j := 0
			err = hybrid(data[1:], int(data[0]), present, func(x uint32, count int) {
				if int64(x) >= int64(len(col.dict)) {
					bad = fmt.Errorf("dictionary index %d of %d: %w", x, len(col.dict), record.ErrCorrupt)
					return
				}
				for ; count > 0; count-- {
					if a <= j && j < b {
						col.vals = append(col.vals, col.dict[x])
					}
					j++
				}
			})
			if err = cmp.Or(err, bad); err != nil {
				return 0, err
			}
		}
	case v2.Encoding == format.DeltaLengthByteArray:
		// What parquet-go writes for byte arrays: the lengths, delta-packed,
		// then every value's bytes back to back. The values stay views of
		// the page.
		var lens []int32
		if present > 0 {
			if lens, err = pq.LookupEncoding(format.DeltaBinaryPacked).DecodeInt32(col.lens[:0], data); err != nil || len(lens) != present {
				return 0, fmt.Errorf("byte array lengths (%d of %d): %v: %w", len(lens), present, err, record.ErrCorrupt)
			}
			col.lens = lens
		}
		total := 0
		for _, l := range lens {
			if l < 0 || int(l) > len(data)-total {
				return 0, fmt.Errorf("byte array of %d bytes in a %d-byte page: %w", l, len(data), record.ErrCorrupt)
			}
			total += int(l)
		}
		p := len(data) - total
		for j, l := range lens {
			if a <= j && j < b {
				col.vals = append(col.vals, data[p:p+int(l):p+int(l)])
			}
			p += int(l)
		}
	default:
		// Delta encodings: parquet-go decodes them into one buffer.
		buf, offs, err := pq.LookupEncoding(v2.Encoding).DecodeByteArray(nil, data, nil)
		if err != nil || len(offs) != present+1 {
			return 0, fmt.Errorf("%s byte arrays (%d of %d): %v: %w", v2.Encoding, len(offs)-1, present, err, ErrNoFastPath)
		}
		for j := a; j < b; j++ {
			col.vals = append(col.vals, buf[offs[j]:offs[j+1]:offs[j+1]])
		}
	}
	return rows, nil
}

// window walks the levels of the page just read (the last nv of col.def
// and col.rep) and returns which of its present values belong to the rows
// wanted, [a, b): they are contiguous, rows being in order.
func (col *column) window(maxDef, maxRep, nv int) (int, int) {
	a, b, j := -1, 0, 0
	def, rep := col.def[len(col.def)-min(nv, len(col.def)):], col.rep[len(col.rep)-min(nv, len(col.rep)):]
	for l := 0; l < nv; l++ {
		if maxRep == 0 || rep[l] == 0 {
			col.lrow++
		}
		if maxDef > 0 && int(def[l]) != maxDef {
			continue
		}
		if col.from <= col.lrow && col.lrow < col.to {
			if a < 0 {
				a = j
				if col.vlo < 0 {
					col.vlo = col.nv + j
				}
			}
			b = j + 1
		}
		j++
	}
	col.nv += j
	return max(a, 0), b
}

// levels appends nv RLE/bit-packed levels decoded from src to dst.
func levels(dst []uint8, src []byte, max, nv int) ([]uint8, error) {
	at := len(dst)
	dst = slices.Grow(dst, nv)
	err := hybrid(src, bits.Len8(uint8(max)), nv, func(v uint32, n int) {
		for ; n > 0; n-- {
			dst = append(dst, uint8(v))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("levels: %w", err)
	}
	for _, l := range dst[at:] {
		if int(l) > max {
			return nil, fmt.Errorf("level %d above %d: %w", l, max, record.ErrCorrupt)
		}
	}
	return dst, nil
}

// hybrid decodes n values of the RLE/bit-packed hybrid encoding (levels,
// dictionary indexes) of bit width bw, handing each run to emit. It stops
// at n whatever the runs claim: a damaged run length must not make it
// allocate or loop beyond what the page header promised.
func hybrid(src []byte, bw, n int, emit func(v uint32, count int)) error {
	if bw < 0 || bw > 32 {
		return fmt.Errorf("bit width %d: %w", bw, record.ErrCorrupt)
	}
	for got := 0; got < n; {
		h, k := binary.Uvarint(src)
		if k <= 0 {
			return fmt.Errorf("run header cut off after %d of %d values: %w", got, n, record.ErrCorrupt)
		}
		src = src[k:]
		if h&1 == 0 { // a repeated value, in (bw+7)/8 little-endian bytes
			count := min(h>>1, uint64(n-got))
			w := (bw + 7) / 8
			if len(src) < w || count == 0 {
				return fmt.Errorf("run cut off after %d of %d values: %w", got, n, record.ErrCorrupt)
			}
			var v uint32
			for b := w - 1; b >= 0; b-- {
				v = v<<8 | uint32(src[b])
			}
			src = src[w:]
			emit(v, int(count))
			got += int(count)
			continue
		}
		// Groups of 8 values bit-packed, least significant bit first.
		groups := h >> 1
		if groups == 0 || groups > uint64(len(src)) {
			return fmt.Errorf("bit-packed run of %d groups in %d bytes: %w", groups, len(src), record.ErrCorrupt)
		}
		nb := int(groups) * bw
		if nb > len(src) {
			return fmt.Errorf("bit-packed run of %d bytes in %d: %w", nb, len(src), record.ErrCorrupt)
		}
		packed := src[:nb]
		src = src[nb:]
		vals := min(int(groups)*8, n-got)
		mask := uint64(1)<<bw - 1
		for j := 0; j < vals; j++ {
			bit := j * bw
			var word uint64
			for b := 0; b < 8 && bit/8+b < len(packed); b++ {
				word |= uint64(packed[bit/8+b]) << (8 * b)
			}
			emit(uint32((word>>(bit%8))&mask), 1)
		}
		got += vals
	}
	return nil
}

// plainByteArrays appends the PLAIN byte arrays [a, b) of the n in data to
// dst as views of data: no copy, the page buffer stays as the records'
// storage. All n are checked.
func plainByteArrays(dst [][]byte, data []byte, n, a, b int) ([][]byte, error) {
	p := 0
	for j := 0; j < n; j++ {
		if len(data)-p < 4 {
			return nil, fmt.Errorf("byte array %d of %d: length cut off: %w", j, n, record.ErrCorrupt)
		}
		l := int(binary.LittleEndian.Uint32(data[p:]))
		p += 4
		if l < 0 || l > len(data)-p {
			return nil, fmt.Errorf("byte array %d of %d: %d bytes, %d left: %w", j, n, l, len(data)-p, record.ErrCorrupt)
		}
		if a <= j && j < b {
			dst = append(dst, data[p:p+l:p+l])
		}
		p += l
	}
	if p != len(data) {
		return nil, fmt.Errorf("%d bytes after %d byte arrays: %w", len(data)-p, n, record.ErrCorrupt)
	}
	return dst, nil
}

var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxPageBytes))
	if err != nil {
		panic(err)
	}
	return d
}}

// decompress returns body decompressed, which must come to size bytes,
// into a buffer of pb's (a new one when pb is nil).
func (pb *pageBuffers) decompress(codec format.CompressionCodec, body []byte, size int) ([]byte, error) {
	if size < 0 || size > maxPageBytes {
		return nil, fmt.Errorf("page of %d bytes uncompressed: %w", size, record.ErrCorrupt)
	}
	var out []byte
	var err error
	switch codec {
	case format.Uncompressed:
		out = body
	case format.Zstd:
		d := zstdDecoders.Get().(*zstd.Decoder)
		out, err = d.DecodeAll(body, pb.get(size))
		zstdDecoders.Put(d)
	default:
		out, err = pq.LookupCompressionCodec(codec).Decode(pb.get(size), body)
	}
	if err != nil {
		return nil, fmt.Errorf("%s page: %v: %w", codec, err, record.ErrCorrupt)
	}
	if len(out) != size {
		return nil, fmt.Errorf("%s page came to %d bytes, its header says %d: %w", codec, len(out), size, record.ErrCorrupt)
	}
	return out, nil
}

// cursor walks one column's levels and values row by row.
type cursor struct {
	col    *column
	li, vi int   // next level, next value
	row    int64 // the group row the next level belongs to
}

// next returns the level entries of the current row as [li, end) and moves
// on to the next row.
func (cu *cursor) next(repeated bool) (int, int, error) {
	start := cu.li
	n := len(cu.col.def)
	if start >= n {
		return 0, 0, fmt.Errorf("column ends before row %d: %w", cu.row, record.ErrCorrupt)
	}
	end := start + 1
	if repeated {
		for end < n && cu.col.rep[end] != 0 {
			end++
		}
	}
	cu.li = end
	cu.row++
	return start, end, nil
}

// value takes the next non-null value.
func (cu *cursor) value() ([]byte, error) {
	j := cu.vi - cu.col.vlo
	if cu.col.vlo < 0 || j < 0 || j >= len(cu.col.vals) {
		return nil, fmt.Errorf("column has fewer values than its levels say: %w", record.ErrCorrupt)
	}
	v := cu.col.vals[j]
	cu.vi++
	return v, nil
}

// skipTo moves the cursor to row.
func (cu *cursor) skipTo(row int64, maxDef int, repeated bool) error {
	for cu.row < row {
		s, e, err := cu.next(repeated)
		if err != nil {
			return err
		}
		for _, d := range cu.col.def[s:e] {
			if int(d) == maxDef {
				cu.vi++
			}
		}
	}
	return nil
}

// assemble builds rows [from, from+n) of the group out of its columns.
// offsetsKnown: the offset column was not decoded, its statistics having
// proved the offsets (File.offsetStatistics).
func assemble(cols *[numLeaves]column, groupFirst uint64, gi int, from, n int64, offsetsKnown bool) ([]record.Record, error) {
	for c := range cols {
		if c == colOffset && offsetsKnown {
			continue
		}
		col := &cols[c]
		if col.firstRow > from || col.firstRow+col.rows < from+n {
			return nil, fmt.Errorf("row group %d column %s: rows %d-%d decoded, %d-%d wanted: %w", gi, wantLeaves[c].path, col.firstRow, col.firstRow+col.rows, from, from+n, record.ErrCorrupt)
		}
		if wantLeaves[c].maxDef == 0 && int64(len(col.ints)) != col.rows {
			return nil, fmt.Errorf("row group %d column %s: %d values in %d rows: %w", gi, wantLeaves[c].path, len(col.ints), col.rows, record.ErrCorrupt)
		}
	}
	var cur [numLeaves]cursor
	for c := range cur {
		cur[c] = cursor{col: &cols[c], row: cols[c].firstRow}
		if w := wantLeaves[c]; w.maxDef > 0 {
			if err := cur[c].skipTo(from, w.maxDef, w.maxRep > 0); err != nil {
				return nil, fmt.Errorf("row group %d column %s: %w", gi, w.path, err)
			}
		}
	}
	// Headers and tags of all rows share one backing array each.
	// (Their columns kept the values of the rows wanted only: as many as
	// there are headers and tags.)
	headers := make([]record.Header, 0, len(cols[colHeaderKey].vals))
	tags := make([]string, 0, len(cols[colTag].vals))
	var lastKey, lastTag string
	out := make([]record.Record, n)
	optional := func(c int, emptyIsNil bool) ([]byte, error) {
		s, _, err := cur[c].next(false)
		if err != nil {
			return nil, err
		}
		if cols[c].def[s] == 0 {
			return nil, nil
		}
		v, err := cur[c].value()
		switch {
		case len(v) > 0 || err != nil:
			return v, err
		case emptyIsNil: // the record format does not tell empty from absent
			return nil, nil
		}
		return []byte{}, nil // present but empty: never null
	}
	for j := int64(0); j < n; j++ {
		row := from + j
		r := &out[j]
		r.Offset = groupFirst + uint64(row)
		if !offsetsKnown {
			if off := cols[colOffset].ints[row-cols[colOffset].firstRow]; uint64(off) != r.Offset {
				return nil, fmt.Errorf("row group %d row %d has offset %d, want %d: %w", gi, row, off, r.Offset, record.ErrCorrupt)
			}
		}
		r.Timestamp = cols[colTimestamp].ints[row-cols[colTimestamp].firstRow]
		var err error
		if r.Key, err = optional(colKey, false); err != nil {
			return nil, fmt.Errorf("row %d key: %w", row, err)
		}
		if r.Value, err = optional(colValue, false); err != nil {
			return nil, fmt.Errorf("row %d value: %w", row, err)
		}
		if r.ProtocolData, err = optional(colProtocolData, true); err != nil {
			return nil, fmt.Errorf("row %d protocol_data: %w", row, err)
		}
		// Headers: the key and value columns list the same elements.
		ks, ke, err := cur[colHeaderKey].next(true)
		if err != nil {
			return nil, fmt.Errorf("row %d header keys: %w", row, err)
		}
		vs, ve, err := cur[colHeaderValue].next(true)
		if err != nil {
			return nil, fmt.Errorf("row %d header values: %w", row, err)
		}
		if ke-ks != ve-vs || (cols[colHeaderKey].def[ks] == 0) != (cols[colHeaderValue].def[vs] == 0) {
			return nil, fmt.Errorf("row %d: header keys and values disagree: %w", row, record.ErrCorrupt)
		}
		if cols[colHeaderKey].def[ks] != 0 {
			at := len(headers)
			for e := 0; e < ke-ks; e++ {
				k, err := cur[colHeaderKey].value()
				if err != nil {
					return nil, fmt.Errorf("row %d header key: %w", row, err)
				}
				if string(k) != lastKey { // most records repeat the keys before them
					lastKey = string(k)
				}
				h := record.Header{Key: lastKey}
				switch cols[colHeaderValue].def[vs+e] {
				case 2:
					if h.Value, err = cur[colHeaderValue].value(); err != nil {
						return nil, fmt.Errorf("row %d header value: %w", row, err)
					}
					if h.Value == nil {
						h.Value = []byte{}
					}
				case 0:
					return nil, fmt.Errorf("row %d: header without an element: %w", row, record.ErrCorrupt)
				}
				headers = append(headers, h)
			}
			r.Headers = headers[at:len(headers):len(headers)]
		}
		ts, te, err := cur[colTag].next(true)
		if err != nil {
			return nil, fmt.Errorf("row %d tags: %w", row, err)
		}
		if cols[colTag].def[ts] != 0 {
			at := len(tags)
			for e := 0; e < te-ts; e++ {
				t, err := cur[colTag].value()
				if err != nil {
					return nil, fmt.Errorf("row %d tag: %w", row, err)
				}
				if string(t) != lastTag {
					lastTag = string(t)
				}
				tags = append(tags, lastTag)
			}
			r.Tags = tags[at:len(tags):len(tags)]
		}
	}
	return out, nil
}
