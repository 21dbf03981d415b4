package parquet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"strata/engine/record"
)

// Group is one row group: which rows it holds and the byte span of its
// column chunks, which a cold reader fetches in one ranged read.
type Group struct {
	FirstRow, Rows int64
	Start, End     int64
}

// File is an open strata Parquet file.
type File struct {
	pf          *pq.File
	typed       []string // the typed columns it has (ValueTyped, KeyTyped)
	groups      []Group
	firstOffset uint64
	rows        int64
	slow        error // why the file cannot be read column-wise, if it cannot
	// leaf[c] is the file's column index of wantLeaves[c]: format 1 and 2
	// order the columns differently.
	leaf [numLeaves]int
	// width is the file's leaf columns: strata's, and its typed columns'
	// after them, which records do not read (docs/typed.md).
	width int
	// offsetsKnown[g]: row group g's offsets follow from its position
	// (offsetStatistics); only set when the file reads column-wise.
	offsetsKnown []bool
}

// columnOrders are the top-level columns of strata's formats: 2 (value
// last, written now) and 1 (value fourth, files tiered before).
var columnOrders = [][]string{
	{"offset", "timestamp", "key", "headers", "tags", "protocol_data", "value"},
	{"offset", "timestamp", "key", "value", "headers", "tags", "protocol_data"},
}

// Open reads the footer (and page index) of a strata Parquet file.
func Open(r io.ReaderAt, size int64) (f *File, err error) {
	defer recoverCorrupt(&err)
	if err := checkFraming(r, size); err != nil {
		return nil, err
	}
	pf, err := pq.OpenFile(r, size, pq.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("parquet footer: %w", err)
	}
	var names []string
	for _, f := range pf.Schema().Fields() {
		names = append(names, f.Name())
	}
	if !slices.ContainsFunc(columnOrders, func(o []string) bool { return slices.Equal(o, names) }) && !withTyped(names) {
		return nil, fmt.Errorf("top-level columns %v, want %v (or format 1's %v), then typed columns: %w", names, columnOrders[0], columnOrders[1], ErrNotStrata)
	}
	f = &File{pf: pf, rows: pf.NumRows()}
	for _, n := range names {
		if n == ValueTyped || n == KeyTyped {
			f.typed = append(f.typed, n)
		}
	}
	if v, ok := pf.Lookup(MetaFirstOffset); ok {
		if f.firstOffset, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, fmt.Errorf("footer %s=%q: %w", MetaFirstOffset, v, ErrNotStrata)
		}
	} else if f.rows > 0 {
		return nil, fmt.Errorf("footer has no %s: %w", MetaFirstOffset, ErrNotStrata)
	}
	var row int64
	if f.rows < 0 {
		return nil, fmt.Errorf("footer claims %d rows: %w", f.rows, ErrNotStrata)
	}
	for i, rg := range pf.Metadata().RowGroups {
		g := Group{FirstRow: row, Rows: rg.NumRows, Start: -1}
		for _, c := range rg.Columns {
			m := c.MetaData
			// Only the codecs strata writes: parquet-go's LZ4 decoder grows
			// its buffer without bound on a corrupt page.
			switch m.Codec {
			case format.Uncompressed, format.Snappy, format.Gzip, format.Zstd:
			default:
				return nil, fmt.Errorf("row group %d column %v: codec %s: %w", i, m.PathInSchema, m.Codec, ErrNotStrata)
			}
			start := m.DataPageOffset
			if m.DictionaryPageOffset > 0 && m.DictionaryPageOffset < start {
				start = m.DictionaryPageOffset
			}
			if g.Start < 0 || start < g.Start {
				g.Start = start
			}
			g.End = max(g.End, start+m.TotalCompressedSize)
		}
		if g.Start < 0 || g.End > size {
			return nil, fmt.Errorf("row group %d spans bytes %d to %d of a %d-byte file: %w", i, g.Start, g.End, size, ErrNotStrata)
		}
		if rg.NumRows < 0 {
			return nil, fmt.Errorf("row group %d claims %d rows: %w", i, rg.NumRows, ErrNotStrata)
		}
		f.groups = append(f.groups, g)
		row += rg.NumRows
	}
	if row != f.rows {
		return nil, fmt.Errorf("row groups hold %d rows, footer says %d: %w", row, f.rows, ErrNotStrata)
	}
	f.slow = f.checkColumnWise()
	return f, nil
}

// withTyped says whether names are format 2's columns, then typed
// columns, each with its error column, each once.
func withTyped(names []string) bool {
	base := columnOrders[0]
	if len(names) <= len(base) || !slices.Equal(names[:len(base)], base) {
		return false
	}
	rest := names[len(base):]
	for i := 0; i < len(rest); i += 2 {
		n := rest[i]
		if n != ValueTyped && n != KeyTyped || i+1 >= len(rest) || rest[i+1] != n+ErrorSuffix || slices.Contains(rest[:i], n) {
			return false
		}
	}
	return true
}

// isTyped says whether a top-level column is a typed one or its error.
func isTyped(name string) bool {
	return slices.Contains([]string{ValueTyped, KeyTyped, ValueTyped + ErrorSuffix, KeyTyped + ErrorSuffix}, name)
}

// Rows is the number of records in the file.
func (f *File) Rows() int64 { return f.rows }

// FirstOffset is the offset of the file's first record.
func (f *File) FirstOffset() uint64 { return f.firstOffset }

// TypedColumns names the typed columns the file has.
func (f *File) TypedColumns() []string { return f.typed }

// Groups lists the row groups in order.
func (f *File) Groups() []Group { return f.groups }

// Lookup returns a footer metadata value.
func (f *File) Lookup(key string) (string, bool) { return f.pf.Lookup(key) }

// GroupOf returns the row group holding offset.
func (f *File) GroupOf(offset uint64) (int, error) {
	if offset < f.firstOffset || offset >= f.firstOffset+uint64(f.rows) {
		return 0, fmt.Errorf("offset %d is not in this file (offsets %d to %d)", offset, f.firstOffset, f.firstOffset+uint64(f.rows)-1)
	}
	row := int64(offset - f.firstOffset)
	return sort.Search(len(f.groups), func(i int) bool { return f.groups[i].FirstRow+f.groups[i].Rows > row }), nil
}

// ReadRows decodes n rows of row group i from row from (counted within the
// group): for a point read, only the pages holding them are decoded.
func (f *File) ReadRows(i int, from, n int64) (recs []record.Record, err error) {
	defer recoverCorrupt(&err)
	if i < 0 || i >= len(f.groups) || from < 0 || from >= f.groups[i].Rows {
		return nil, fmt.Errorf("row %d of row group %d (of %d)", from, i, len(f.groups))
	}
	n = min(n, f.groups[i].Rows-from)
	rd := pq.NewGenericRowGroupReader[Row](f.pf.RowGroups()[i])
	defer rd.Close()
	if err := rd.SeekToRow(from); err != nil {
		return nil, fmt.Errorf("row group %d: seek to row %d: %w", i, from, err)
	}
	rows := make([]Row, n)
	got, err := rd.Read(rows)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("row group %d: %w", i, err)
	}
	want := f.firstOffset + uint64(f.groups[i].FirstRow+from)
	for j := range rows[:got] {
		r := fromRow(&rows[j])
		if r.Offset != want+uint64(j) {
			return nil, fmt.Errorf("row group %d row %d has offset %d, want %d: %w", i, from+int64(j), r.Offset, want+uint64(j), record.ErrCorrupt)
		}
		recs = append(recs, r)
	}
	if int64(got) != n {
		return nil, fmt.Errorf("row group %d: read %d rows of %d: %w", i, got, n, record.ErrCorrupt)
	}
	return recs, nil
}

// ReadGroup decodes row group i. Every row must carry the offset its
// position says; anything else is corruption, reported, never returned.
func (f *File) ReadGroup(i int) (recs []record.Record, err error) {
	defer recoverCorrupt(&err)
	if i < 0 || i >= len(f.groups) {
		return nil, fmt.Errorf("row group %d of %d", i, len(f.groups))
	}
	rd := pq.NewGenericRowGroupReader[Row](f.pf.RowGroups()[i])
	defer rd.Close()
	// Read in chunks: a damaged footer may claim any number of rows.
	rows := make([]Row, min(f.groups[i].Rows, 4096))
	want := f.firstOffset + uint64(f.groups[i].FirstRow)
	var out []record.Record
	for int64(len(out)) < f.groups[i].Rows {
		n, err := rd.Read(rows)
		for j := range rows[:n] {
			r := fromRow(&rows[j])
			if r.Offset != want+uint64(len(out)) {
				return nil, fmt.Errorf("row group %d row %d has offset %d, want %d: %w", i, len(out), r.Offset, want+uint64(len(out)), record.ErrCorrupt)
			}
			out = append(out, r)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("row group %d: %w", i, err)
		}
		if n == 0 || errors.Is(err, io.EOF) {
			break
		}
	}
	if int64(len(out)) != f.groups[i].Rows {
		return nil, fmt.Errorf("row group %d: read %d rows of %d: %w", i, len(out), f.groups[i].Rows, record.ErrCorrupt)
	}
	return out, nil
}

// recoverCorrupt turns a panic inside the Parquet library, which damaged
// input can cause, into an error: a bad object must fail one read, not the
// process.
func recoverCorrupt(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("parquet: damaged file: %v: %w", p, record.ErrCorrupt)
	}
}

// MaxFooterBytes bounds the footer a reader will load: a damaged length
// must not make it allocate gigabytes.
const MaxFooterBytes = 64 << 20

// checkFraming checks the magic at both ends and the footer length before
// the library trusts them.
func checkFraming(r io.ReaderAt, size int64) error {
	if size < 12 {
		return fmt.Errorf("%d bytes is too short for Parquet: %w", size, ErrNotStrata)
	}
	var head [4]byte
	var tail [8]byte
	if _, err := r.ReadAt(head[:], 0); err != nil {
		return fmt.Errorf("parquet header: %w", err)
	}
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return fmt.Errorf("parquet trailer: %w", err)
	}
	if string(head[:]) != "PAR1" || string(tail[4:]) != "PAR1" {
		return fmt.Errorf("no PAR1 magic at both ends: %w", ErrNotStrata)
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-12 || n > MaxFooterBytes {
		return fmt.Errorf("footer length %d in a %d-byte file: %w", n, size, record.ErrCorrupt)
	}
	return nil
}
