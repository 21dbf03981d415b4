package parquet

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/encoding/rle"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"strata/typed"
)

// strata's own page writer. Every record's bytes are copied once, into the
// page of their column (PLAIN: a 4-byte length and the bytes), and that
// page goes to the codec as it is. parquet-go's writer copied each value
// into a Value, then into its column buffer, then encoded the buffer into
// a page: a third of the conversion's CPU beside the codec's half
// (docs/bench.md, "Conversion and tiering"). The file is the one
// parquet-go wrote for the same records (docs/parquet.md): the same schema
// (taken from parquet-go, from Row), data page v2 with RLE levels, page
// CRCs, statistics, column and offset index, level histograms; the byte
// columns are PLAIN instead of DELTA_LENGTH_BYTE_ARRAY, and pages end at
// the first row that fills them instead of a multiple of 64 rows.

// leafWriter builds one leaf column: its current page, and the pages of
// the row group so far (compressed, with their headers).
type leafWriter struct {
	path      []string
	typ       format.Type // Int64 or ByteArray; a typed column's any
	size      int         // a FixedLenByteArray's bytes
	maxDef    uint8
	maxRep    uint8
	pageStats bool // min and max in every page header
	utf8      bool // logical type STRING: bounds are cut between characters
	// noIndex: no bounds at all (a typed column of floats, booleans or
	// fixed bytes, whose orders are not plain): null counts only, and
	// no column index, which a file may leave out per column.
	noIndex    bool
	repEnc     rle.Encoding
	defEnc     rle.Encoding
	unencoded  int64 // the byte array values' bytes in the row group
	numValues  int64
	nulls      int64
	rows       int64 // rows in the row group's finished pages
	uncomp     int64 // the row group's pages uncompressed, headers included
	pages      int32
	chunk      []byte // the row group's pages, headers included
	locs       []format.PageLocation
	ci         format.ColumnIndex
	cmin, cmax []byte // the row group's bounds (statistics); owned
	chas       bool
	defHist    []int64 // the row group's level histograms
	repHist    []int64

	// The page being built. lo and hi view vals.
	rep, def   []uint8
	vals       []byte
	bits       int // booleans in vals (PLAIN packs them a bit each)
	pnv, pnull int
	prows      int
	lo, hi     []byte
	loI, hiI   int64
	has        bool
}

func (c *leafWriter) pageSize() int { return len(c.vals) + len(c.def) + len(c.rep) }

func (c *leafWriter) level(rep, def uint8) {
	if c.maxRep > 0 {
		c.rep = append(c.rep, rep)
	}
	if c.maxDef > 0 {
		c.def = append(c.def, def)
	}
	if rep == 0 {
		c.prows++
	}
	c.pnv++
}

func (c *leafWriter) int64v(v int64) {
	c.level(0, 0)
	c.vals = binary.LittleEndian.AppendUint64(c.vals, uint64(v))
	c.bound(v)
}

func (c *leafWriter) bound(v int64) {
	if !c.has || v < c.loI {
		c.loI = v
	}
	if !c.has || v > c.hiI {
		c.hiI = v
	}
	c.has = true
}

func (c *leafWriter) null(rep, def uint8) {
	c.level(rep, def)
	c.pnull++
}

// bytes adds a present value: its length and bytes, the only copy.
func (c *leafWriter) bytes(rep, def uint8, b []byte) {
	c.level(rep, def)
	c.vals = binary.LittleEndian.AppendUint32(c.vals, uint32(len(b)))
	at := len(c.vals)
	c.vals = append(c.vals, b...)
	v := c.vals[at:len(c.vals):len(c.vals)]
	if !c.has || bytes.Compare(v, c.lo) < 0 {
		c.lo = v
	}
	if !c.has || bytes.Compare(v, c.hi) > 0 {
		c.hi = v
	}
	c.has = true
	c.unencoded += int64(len(b))
}

// optional adds b to an optional column outside a list: null when nil.
func (c *leafWriter) optional(b []byte) {
	if b == nil {
		c.null(0, 0)
		return
	}
	c.bytes(0, 1, b)
}

// value adds a typed column's value, as typed.Shred gives it: the Go
// type of the leaf's physical type (fits said so).
func (c *leafWriter) value(rep, def uint8, v any) {
	if v == nil {
		c.null(rep, def)
		return
	}
	switch v := v.(type) {
	case []byte:
		if c.typ == format.FixedLenByteArray {
			c.level(rep, def)
			c.vals = append(c.vals, v...)
			c.has = true
			return
		}
		c.bytes(rep, def, v)
	case string:
		c.bytes(rep, def, stringBytes(v))
	case int64:
		c.level(rep, def)
		c.vals = binary.LittleEndian.AppendUint64(c.vals, uint64(v))
		c.bound(v)
	case int32:
		c.level(rep, def)
		c.vals = binary.LittleEndian.AppendUint32(c.vals, uint32(v))
		c.bound(int64(v))
	case float32:
		c.level(rep, def)
		c.vals = binary.LittleEndian.AppendUint32(c.vals, math.Float32bits(v))
		c.has = true
	case float64:
		c.level(rep, def)
		c.vals = binary.LittleEndian.AppendUint64(c.vals, math.Float64bits(v))
		c.has = true
	case bool:
		c.level(rep, def)
		if c.bits%8 == 0 {
			c.vals = append(c.vals, 0)
		}
		if v {
			c.vals[len(c.vals)-1] |= 1 << (c.bits % 8)
		}
		c.bits++
		c.has = true
	}
}

// misfit says why v is not a value of the leaf's physical type, as value
// takes it; "" when it is. A STRING leaf takes UTF-8 only: an engine
// reading the file (DuckDB) refuses a string that is not, and a decoder
// may pass one through (hamba/avro does).
func (c *leafWriter) misfit(v any) string {
	ok := false
	switch v := v.(type) {
	case nil:
		return ""
	case []byte:
		if c.utf8 && !utf8.Valid(v) {
			return "a string that is not UTF-8"
		}
		ok = c.typ == format.ByteArray || c.typ == format.FixedLenByteArray && len(v) == c.size
	case string:
		if c.utf8 && !utf8.ValidString(v) {
			return "a string that is not UTF-8"
		}
		ok = c.typ == format.ByteArray
	case int64:
		ok = c.typ == format.Int64
	case int32:
		ok = c.typ == format.Int32
	case float32:
		ok = c.typ == format.Float
	case float64:
		ok = c.typ == format.Double
	case bool:
		ok = c.typ == format.Boolean
	}
	if ok {
		return ""
	}
	return fmt.Sprintf("a %T, not a %s", v, c.typ)
}

func (c *leafWriter) bounds() (lo, hi []byte) {
	switch c.typ {
	case format.Int64:
		return binary.LittleEndian.AppendUint64(nil, uint64(c.loI)), binary.LittleEndian.AppendUint64(nil, uint64(c.hiI))
	case format.Int32:
		return binary.LittleEndian.AppendUint32(nil, uint32(c.loI)), binary.LittleEndian.AppendUint32(nil, uint32(c.hiI))
	}
	return c.lo, c.hi
}

// maxStatisticsBytes bounds the row group's min and max of a byte column
// in the footer: past it both are left out, as Arrow does past 4 KiB.
// parquet-go wrote them whole: two values of every row group in the
// footer, 400 KB per row group of 200 KB records (a footer of 22 MB for a
// 64 MiB segment, which every cold open reads), 2 KB of the 3.9 KB per
// row group of 1 KiB records. Readers filter row groups on keys and
// header keys, which are short; the column index still bounds every page.
const maxStatisticsBytes = 64

// columnIndexBytes bounds the column index's byte array bounds, as
// parquet-go's default (ColumnIndexSizeLimit).
const columnIndexBytes = 16

// truncMin is a prefix of v at most columnIndexBytes long. A bound must
// be a value of the column's type (the format says so): for a string
// (utf), the cut falls between characters.
func truncMin(v []byte, utf bool) []byte {
	n := min(len(v), columnIndexBytes)
	if utf && utf8.Valid(v) {
		for n > 0 && n < len(v) && !utf8.RuneStart(v[n]) {
			n--
		}
	}
	return bytes.Clone(v[:n])
}

// truncMax is the shortest bound at most columnIndexBytes long not below
// v: v cut and its last byte that can be incremented incremented (v itself
// when it cannot be cut that way: all 0xff); for a string (utf), only
// where that leaves UTF-8.
func truncMax(v []byte, utf bool) []byte {
	if len(v) <= columnIndexBytes {
		return bytes.Clone(v)
	}
	utf = utf && utf8.Valid(v)
	t := bytes.Clone(v[:columnIndexBytes])
	for i := len(t) - 1; i >= 0; i-- {
		if t[i] != 0xff {
			t[i]++
			if !utf || utf8.Valid(t[:i+1]) {
				return t[:i+1]
			}
		}
	}
	return bytes.Clone(v)
}

func histogram(h []int64, levels []uint8) []int64 {
	for _, l := range levels {
		h[l]++
	}
	return h
}

// flushPage compresses the page into the row group's chunk.
func (c *leafWriter) flushPage(w *Writer) error {
	if c.pnv == 0 {
		return nil
	}
	// EncodeLevels overwrites its dst: the levels are encoded apart, then
	// joined.
	var err error
	if c.maxRep > 0 {
		if w.repLv, err = c.repEnc.EncodeLevels(w.repLv, c.rep); err != nil {
			return fmt.Errorf("parquet: repetition levels of %s: %w", c.path, err)
		}
	}
	if c.maxDef > 0 {
		if w.defLv, err = c.defEnc.EncodeLevels(w.defLv, c.def); err != nil {
			return fmt.Errorf("parquet: definition levels of %s: %w", c.path, err)
		}
	}
	lv := w.levels[:0]
	if c.maxRep > 0 {
		lv = append(lv, w.repLv...)
	}
	repLen := len(lv)
	if c.maxDef > 0 {
		lv = append(lv, w.defLv...)
	}
	w.levels = lv
	body := c.vals
	compressed := w.codec.CompressionCodec() != format.Uncompressed
	if compressed {
		if w.zbuf, err = w.codec.Encode(w.zbuf[:0], c.vals); err != nil {
			return fmt.Errorf("parquet: compressing a page of %s: %w", c.path, err)
		}
		body = w.zbuf
	}
	lo, hi := c.bounds()
	if !c.has || c.noIndex {
		lo, hi = []byte{}, []byte{}
	}
	// The null count always: thrift writes the field even when zero, and
	// a reader pruning pages by it would skip a page of tombstones.
	st := format.Statistics{NullCount: int64(c.pnull)}
	if c.pageStats && c.has {
		st.Min, st.Max, st.MinValue, st.MaxValue = lo, hi, lo, hi
	}
	h := format.PageHeader{
		Type:                 format.DataPageV2,
		UncompressedPageSize: int32(len(lv) + len(c.vals)),
		CompressedPageSize:   int32(len(lv) + len(body)),
		CRC:                  int32(crc32.Update(crc32.ChecksumIEEE(lv), crc32.IEEETable, body)),
		DataPageHeaderV2: thrift.New(format.DataPageHeaderV2{
			NumValues:                  int32(c.pnv),
			NumNulls:                   int32(c.pnull),
			NumRows:                    int32(c.prows),
			Encoding:                   format.Plain,
			DefinitionLevelsByteLength: int32(len(lv) - repLen),
			RepetitionLevelsByteLength: int32(repLen),
			IsCompressed:               thrift.New(compressed),
			Statistics:                 st,
		}),
	}
	w.hdr.Reset()
	if err := w.hdrEnc.Encode(&h); err != nil {
		return fmt.Errorf("parquet: a page header of %s: %w", c.path, err)
	}
	c.locs = append(c.locs, format.PageLocation{Offset: int64(len(c.chunk)),
		CompressedPageSize: int32(w.hdr.Len()) + h.CompressedPageSize, FirstRowIndex: c.rows})
	c.chunk = append(c.chunk, w.hdr.Bytes()...)
	c.chunk = append(c.chunk, lv...)
	c.chunk = append(c.chunk, body...)
	c.uncomp += int64(w.hdr.Len()) + int64(h.UncompressedPageSize)

	// The column index, and the row group's statistics.
	c.numValues += int64(c.pnv)
	c.nulls += int64(c.pnull)
	c.rows += int64(c.prows)
	c.pages++
	defer c.resetPage()
	if c.noIndex {
		histogram(c.repHist, c.rep)
		histogram(c.defHist, c.def)
		return nil
	}
	c.ci.NullPages = append(c.ci.NullPages, !c.has)
	c.ci.NullCounts = append(c.ci.NullCounts, int64(c.pnull))
	if c.typ == format.ByteArray {
		c.ci.MinValues = append(c.ci.MinValues, truncMin(lo, c.utf8))
		c.ci.MaxValues = append(c.ci.MaxValues, truncMax(hi, c.utf8))
	} else {
		c.ci.MinValues = append(c.ci.MinValues, lo)
		c.ci.MaxValues = append(c.ci.MaxValues, hi)
	}
	if c.has {
		if !c.chas || c.compare(lo, c.cmin) < 0 {
			c.cmin = append(c.cmin[:0], lo...)
		}
		if !c.chas || c.compare(hi, c.cmax) > 0 {
			c.cmax = append(c.cmax[:0], hi...)
		}
		c.chas = true
	}
	if c.maxRep > 0 {
		c.ci.RepetitionLevelHistogram = appendHistogram(c.ci.RepetitionLevelHistogram, c.repHist, c.rep)
	}
	if c.maxDef > 0 {
		c.ci.DefinitionLevelHistogram = appendHistogram(c.ci.DefinitionLevelHistogram, c.defHist, c.def)
	}
	return nil
}

func (c *leafWriter) resetPage() {
	c.rep, c.def, c.vals, c.bits = c.rep[:0], c.def[:0], c.vals[:0], 0
	c.pnv, c.pnull, c.prows, c.has, c.lo, c.hi = 0, 0, 0, false, nil, nil
}

// appendHistogram appends the page's histogram of levels to h (the column
// index's) and adds it to the row group's, chunk.
func appendHistogram(h, chunk []int64, levels []uint8) []int64 {
	at := len(h)
	h = append(h, make([]int64, len(chunk))...)
	page := histogram(h[at:], levels)
	for l, n := range page {
		chunk[l] += n
	}
	return h
}

func (c *leafWriter) compare(a, b []byte) int {
	switch c.typ {
	case format.Int64:
		x, y := int64(binary.LittleEndian.Uint64(a)), int64(binary.LittleEndian.Uint64(b))
		return cmp.Compare(x, y)
	case format.Int32:
		x, y := int32(binary.LittleEndian.Uint32(a)), int32(binary.LittleEndian.Uint32(b))
		return cmp.Compare(x, y)
	}
	return bytes.Compare(a, b)
}

// boundaryOrder says whether the pages' bounds ascend or descend (null
// pages aside), as a reader of the column index may use it to search.
func (c *leafWriter) boundaryOrder() format.BoundaryOrder {
	var lo, hi [][]byte
	for p, null := range c.ci.NullPages {
		if !null {
			lo, hi = append(lo, c.ci.MinValues[p]), append(hi, c.ci.MaxValues[p])
		}
	}
	if len(lo) < 2 {
		return format.Unordered
	}
	asc, desc := true, true
	for p := 1; p < len(lo); p++ {
		a, b := c.compare(lo[p-1], lo[p]), c.compare(hi[p-1], hi[p])
		asc = asc && a <= 0 && b <= 0
		desc = desc && a >= 0 && b >= 0
	}
	switch {
	case asc && desc, !asc && !desc:
		return format.Unordered
	case asc:
		return format.Ascending
	}
	return format.Descending
}

// chunkMeta is the row group's column chunk, written at offset.
func (c *leafWriter) chunkMeta(codec format.CompressionCodec, offset int64) format.ColumnChunk {
	enc := []format.Encoding{format.Plain}
	if c.maxDef > 0 || c.maxRep > 0 {
		enc = append(enc, format.RLE)
	}
	m := format.ColumnMetaData{
		Type: c.typ, Encoding: enc, PathInSchema: c.path, Codec: codec,
		NumValues: c.numValues, TotalUncompressedSize: c.uncomp, TotalCompressedSize: int64(len(c.chunk)),
		DataPageOffset: offset,
		Statistics:     format.Statistics{NullCount: c.nulls},
		EncodingStats:  []format.PageEncodingStats{{PageType: format.DataPageV2, Encoding: format.Plain, Count: c.pages}},
	}
	if c.chas && (c.typ == format.Int64 || c.typ == format.Int32 || max(len(c.cmin), len(c.cmax)) <= maxStatisticsBytes) {
		// Never nil: an empty bound (an empty key) is a bound, nil none.
		m.Statistics.MinValue, m.Statistics.MaxValue = append([]byte{}, c.cmin...), append([]byte{}, c.cmax...)
	}
	if c.typ == format.ByteArray {
		m.SizeStatistics.UnencodedByteArrayDataBytes = c.unencoded
	}
	if c.maxRep > 0 {
		m.SizeStatistics.RepetitionLevelHistogram = slices.Clone(c.repHist)
	}
	if c.maxDef > 0 {
		m.SizeStatistics.DefinitionLevelHistogram = slices.Clone(c.defHist)
	}
	return format.ColumnChunk{MetaData: m}
}

// resetChunk starts the next row group; the buffers stay.
func (c *leafWriter) resetChunk() {
	*c = leafWriter{path: c.path, typ: c.typ, size: c.size, maxDef: c.maxDef, maxRep: c.maxRep, pageStats: c.pageStats, utf8: c.utf8, noIndex: c.noIndex,
		repEnc: c.repEnc, defEnc: c.defEnc, chunk: c.chunk[:0], cmin: c.cmin[:0], cmax: c.cmax[:0],
		defHist: c.defHist, repHist: c.repHist, rep: c.rep[:0], def: c.def[:0], vals: c.vals[:0]}
	clear(c.defHist)
	clear(c.repHist)
}

// fileSchema is what parquet-go writes for Row: the schema elements,
// the column orders and created_by of an empty file, taken from it once.
var fileSchema = sync.OnceValues(func() (*format.FileMetaData, error) {
	return emptyFooter(func(w io.Writer) error {
		return pq.NewGenericWriter[Row](w, pq.CreatedBy("strata", FormatVersion, "")).Close()
	})
})

// emptyFooter is the footer of the empty file write writes.
func emptyFooter(write func(io.Writer) error) (*format.FileMetaData, error) {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	n := int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	md := new(format.FileMetaData)
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), data[len(data)-8-n:len(data)-8], md); err != nil {
		return nil, err
	}
	return md, nil
}

// schemaWith is Row's schema with the typed columns after value, each
// followed by its error column: parquet-go's nodes for them (typed.Node),
// spliced into Row's elements so that Row's columns keep their place.
func schemaWith(cols []TypedColumn) (*format.FileMetaData, error) {
	base, err := fileSchema()
	if err != nil || len(cols) == 0 {
		return base, err
	}
	md := *base
	md.Schema, md.ColumnOrders = slices.Clone(base.Schema), slices.Clone(base.ColumnOrders)
	for _, c := range cols {
		t := c.Type
		t.Optional = true
		// parquet-go orders a group by name: NAME before NAME_error.
		g := pq.Group{c.Name: typed.Node(t), c.Name + ErrorSuffix: pq.FieldID(pq.Optional(pq.String()), c.ErrorID)}
		sub, err := emptyFooter(func(w io.Writer) error { return pq.NewWriter(w, pq.NewSchema("typed", g)).Close() })
		if err != nil {
			return nil, fmt.Errorf("parquet: the schema of %s: %w", c.Name, err)
		}
		md.Schema = append(md.Schema, sub.Schema[1:]...)
		md.Schema[0].NumChildren.V += sub.Schema[0].NumChildren.V
		md.ColumnOrders = append(md.ColumnOrders, sub.ColumnOrders...)
	}
	return &md, nil
}

// newLeaves are the leaf writers of the file's columns, in file order:
// format 2's (wantLeaves), checked against parquet-go's schema of Row,
// then the typed columns' as their schema says.
func newLeaves(md *format.FileMetaData) ([]leafWriter, error) {
	var ls []leafWriter
	// Walk the schema depth first, tracking the levels of each leaf.
	var i int
	var walk func(path []string, def, rep uint8) error
	walk = func(path []string, def, rep uint8) error {
		e := md.Schema[i]
		i++
		switch e.RepetitionType.V {
		case format.Optional:
			def++
		case format.Repeated:
			def++
			rep++
		}
		if i > 1 {
			path = append(slices.Clip(path), e.Name)
		}
		if e.NumChildren.V == 0 {
			leaf := len(ls)
			typ := e.Type.V
			if leaf < numLeaves {
				w := wantLeaves[leaf]
				if got := fmt.Sprint(path); got != fmt.Sprint(strings.Split(w.path, ".")) || typ != w.typ || int(def) != w.maxDef || int(rep) != w.maxRep {
					return fmt.Errorf("parquet: Row's leaf %d is %v (def %d, rep %d), want %s", leaf, path, def, rep, w.path)
				}
			}
			_, str := e.LogicalType.Value.(*format.StringType)
			ls = append(ls, leafWriter{path: path, typ: typ, size: int(e.TypeLength.V), maxDef: def, maxRep: rep, utf8: str,
				noIndex: typ != format.Int64 && typ != format.Int32 && typ != format.ByteArray,
				repEnc:  rle.Encoding{BitWidth: bits.Len8(rep)}, defEnc: rle.Encoding{BitWidth: bits.Len8(def)},
				defHist: make([]int64, def+1), repHist: make([]int64, rep+1)})
			return nil
		}
		for range e.NumChildren.V {
			if err := walk(path, def, rep); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(nil, 0, 0); err != nil {
		return nil, err
	}
	if len(ls) < numLeaves {
		return nil, fmt.Errorf("parquet: %d leaf columns in Row's schema, want %d", len(ls), numLeaves)
	}
	// Page headers carry no min and max of the opaque byte columns: written
	// whole, they were about 4 KiB uncompressed per page of 1 KiB values,
	// a quarter of the object. The column index keeps its bounds
	// (truncated to 16 bytes): a reader filtering on it trusts them.
	for _, c := range []int{colOffset, colTimestamp, colKey, colHeaderKey, colTag} {
		ls[c].pageStats = true
	}
	return ls, nil
}

// countingWriter counts what went to out.
type countingWriter struct {
	out io.Writer
	n   int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.out.Write(p)
	c.n += int64(n)
	return n, err
}

// fileWriter holds what the footer needs of every row group.
type fileWriter struct {
	out       countingWriter
	codec     compress.Codec
	groups    []format.RowGroup
	cis       []format.ColumnIndex // every row group's, column by column
	ois       []format.OffsetIndex
	started   bool
	numRows   int64
	levels    []byte
	repLv     []byte
	defLv     []byte
	zbuf      []byte
	hdr       bytes.Buffer
	hdrEnc    *thrift.Encoder
	groupRows int64
}

func (w *Writer) start() error {
	if w.started {
		return nil
	}
	w.started = true
	_, err := w.out.Write([]byte("PAR1"))
	return err
}

// flushGroup writes the row group: every column's pages, in order.
func (w *Writer) flushGroup() error {
	if w.groupRows == 0 {
		return nil
	}
	if err := w.start(); err != nil {
		return err
	}
	codec := w.codec.CompressionCodec()
	g := format.RowGroup{NumRows: w.groupRows, FileOffset: w.out.n, Ordinal: int16(len(w.groups))}
	for i := range w.leaves {
		c := &w.leaves[i]
		if err := c.flushPage(w); err != nil {
			return err
		}
		offset := w.out.n
		if _, err := w.out.Write(c.chunk); err != nil {
			return err
		}
		g.Columns = append(g.Columns, c.chunkMeta(codec, offset))
		g.TotalByteSize += c.uncomp
		g.TotalCompressedSize += int64(len(c.chunk))
		for p := range c.locs {
			c.locs[p].Offset += offset
		}
		ci := c.ci
		ci.BoundaryOrder = c.boundaryOrder()
		w.cis = append(w.cis, ci)
		w.ois = append(w.ois, format.OffsetIndex{PageLocations: slices.Clone(c.locs)})
		c.locs = c.locs[:0]
		c.resetChunk()
	}
	w.groups = append(w.groups, g)
	w.numRows += w.groupRows
	w.groupRows = 0
	return nil
}

// finish writes the page index and the footer.
func (w *Writer) finish(meta map[string]string) error {
	if err := w.flushGroup(); err != nil {
		return err
	}
	if err := w.start(); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := thrift.NewEncoder(new(thrift.CompactProtocol).NewWriter(&buf))
	for gi := range w.groups {
		for c := range w.groups[gi].Columns {
			if w.leaves[c].noIndex {
				continue
			}
			at := buf.Len()
			if err := enc.Encode(&w.cis[gi*len(w.leaves)+c]); err != nil {
				return fmt.Errorf("parquet: column index of row group %d, column %d: %w", gi, c, err)
			}
			w.groups[gi].Columns[c].ColumnIndexOffset = w.out.n + int64(at)
			w.groups[gi].Columns[c].ColumnIndexLength = int32(buf.Len() - at)
		}
	}
	for gi := range w.groups {
		for c := range w.groups[gi].Columns {
			at := buf.Len()
			if err := enc.Encode(&w.ois[gi*len(w.leaves)+c]); err != nil {
				return fmt.Errorf("parquet: offset index of row group %d, column %d: %w", gi, c, err)
			}
			w.groups[gi].Columns[c].OffsetIndexOffset = w.out.n + int64(at)
			w.groups[gi].Columns[c].OffsetIndexLength = int32(buf.Len() - at)
		}
	}
	schema := w.schema
	md := format.FileMetaData{Version: schema.Version, Schema: schema.Schema, NumRows: w.numRows, RowGroups: w.groups,
		CreatedBy: schema.CreatedBy, ColumnOrders: schema.ColumnOrders}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		md.KeyValueMetadata = append(md.KeyValueMetadata, format.KeyValue{Key: k, Value: meta[k]})
	}
	at := buf.Len()
	if err := enc.Encode(&md); err != nil {
		return fmt.Errorf("parquet: footer: %w", err)
	}
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(buf.Len()-at)))
	buf.WriteString("PAR1")
	_, err := w.out.Write(buf.Bytes())
	return err
}
