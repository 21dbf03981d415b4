// Package parquet converts sealed segments to Parquet and back, losslessly:
// reading a file gives records byte-identical (once encoded) to the
// segment's. The layout is in docs/parquet.md. parquet-go does the format;
// this package owns the schema, the row-group sizing that makes cold point
// reads cheap, and the conversion.
package parquet

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"unsafe"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/gzip"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/uncompressed"

	"strata/engine/record"
)

// Row is one record as a Parquet row. topic and partition are not columns:
// they are in the object's path (Hive partitioning), and Spark refuses a
// column that is both in the file and in the path.
//
// The optional byte columns are pointers: parquet-go v0.32 writes some null
// []byte values inside the headers list as empty ones (a nil slice after a
// row whose header at the same place held bytes), and a pointer is how it
// tells null apart reliably. The schema is the same (optional binary).
//
// value is the last column (format 2; format 1 had it fourth): a row
// group's column chunks follow the schema's order, so the small columns
// lie together at its start and a cold point read fetches them and the
// value page with two ranged reads, or one when the page is near the
// start. Readers find columns by name, and read both orders.
type Row struct {
	Offset       int64    `parquet:"offset"`
	Timestamp    int64    `parquet:"timestamp,timestamp(millisecond)"`
	Key          *[]byte  `parquet:"key,optional"`
	Headers      []Header `parquet:"headers,list"`
	Tags         []string `parquet:"tags,list"`
	ProtocolData *[]byte  `parquet:"protocol_data,optional"`
	Value        *[]byte  `parquet:"value,optional"`
}

// Header is one Kafka-style header; a null value stays null.
type Header struct {
	Key   string  `parquet:"key"`
	Value *[]byte `parquet:"value,optional"`
}

func deref(p *[]byte) []byte {
	if p == nil {
		return nil
	}
	if *p == nil {
		return []byte{} // present but empty: never null
	}
	return *p
}

// FormatVersion is written to every file's key-value metadata: 2 since
// value became the last column (docs/parquet.md).
const FormatVersion = "2"

// DefaultPageBytes is the page size written when Options.PageBytes is not
// set (the config's tiering.page_bytes default).
const DefaultPageBytes = 64 << 10

// Metadata keys strata writes into the footer.
const (
	MetaVersion     = "strata.format_version"
	MetaFirstOffset = "strata.first_offset"
	MetaLastOffset  = "strata.last_offset"
)

func fromRow(row *Row) record.Record {
	r := record.Record{Offset: uint64(row.Offset), Timestamp: row.Timestamp, Key: deref(row.Key), Value: deref(row.Value),
		ProtocolData: deref(row.ProtocolData)}
	if len(row.Headers) > 0 {
		r.Headers = make([]record.Header, len(row.Headers))
		for i, h := range row.Headers {
			r.Headers[i] = record.Header{Key: h.Key, Value: deref(h.Value)}
		}
	}
	if len(row.Tags) > 0 {
		r.Tags = row.Tags
	}
	if len(r.ProtocolData) == 0 {
		r.ProtocolData = nil // the record format does not tell empty from absent
	}
	return r
}

// Options tune the writer.
type Options struct {
	// Codec is zstd (default), snappy, gzip or none.
	Codec string
	// RowGroupBytes ends a row group after this many record bytes (1 MiB).
	// A cold point read fetches one whole row group in one ranged read, so
	// this trades point-read cost against analytics scan efficiency.
	RowGroupBytes int
	// PageBytes is the target page size (64 KiB). A cold point read
	// fetches and decompresses one page of each column (the offset index
	// says which), so this bounds its bytes: with 1 MiB pages (parquet-mr's
	// and Arrow's size) it fetched the whole 1 MiB row group. zstd
	// compresses each page alone, yet 1 KiB JSON values come out only 3%
	// larger than in 1 MiB pages (docs/bench.md, "The page size").
	PageBytes int
	// Metadata is added to the footer's key-value metadata.
	Metadata map[string]string
}

func codec(name string) (compress.Codec, error) {
	switch name {
	case "", "zstd":
		return newZstd(), nil
	case "snappy":
		return &snappy.Codec{}, nil
	case "gzip":
		return &gzip.Codec{}, nil
	case "none":
		return &uncompressed.Codec{}, nil
	}
	return nil, fmt.Errorf("parquet codec %q: want zstd, snappy, gzip or none", name)
}

// Summary describes a written file.
type Summary struct {
	Rows                       int64
	FirstOffset, LastOffset    uint64
	MinTimestamp, MaxTimestamp int64
	RowGroups                  int
}

// Writer streams records into a Parquet file with memory bounded by one
// row group, whatever the segment's size.
//
// It writes column by column: each record's fields become values with
// their repetition and definition levels, batched per column and handed
// to parquet-go's column writers 64 records at a time. parquet-go's row
// path (Go structs, reflection, a pointer per optional value) took a sixth
// of the conversion's time. Write copies the record's bytes (into an
// arena, reused after each batch), so the caller may reuse them as soon as
// Write returns: the tiering scan decodes every record in one buffer.
type Writer struct {
	w    *pq.GenericWriter[Row]
	opts Options
	cols columns
	// The batch: each column's values of up to batchRows records, their
	// bytes copied into arena (so the caller's may be reused at once).
	vals    [numColumns][]pq.Value
	arena   []byte
	pending int
	inGroup int
	sum     Summary
	meta    map[string]string
}

// columns are the leaf columns' indexes in the file, looked up by path in
// the schema Row makes.
type columns struct {
	offset, timestamp, key, value, headerKey, headerValue, tag, protocolData int
}

func leaf(s *pq.Schema, path ...string) (int, error) {
	c, ok := s.Lookup(path...)
	if !ok {
		return 0, fmt.Errorf("parquet: the schema has no column %v", path)
	}
	return c.ColumnIndex, nil
}

func lookupColumns(s *pq.Schema) (columns, error) {
	var c columns
	var errs []error
	for _, l := range []struct {
		dst  *int
		path []string
	}{
		{&c.offset, []string{"offset"}},
		{&c.timestamp, []string{"timestamp"}},
		{&c.key, []string{"key"}},
		{&c.value, []string{"value"}},
		{&c.headerKey, []string{"headers", "list", "element", "key"}},
		{&c.headerValue, []string{"headers", "list", "element", "value"}},
		{&c.tag, []string{"tags", "list", "element"}},
		{&c.protocolData, []string{"protocol_data"}},
	} {
		i, err := leaf(s, l.path...)
		*l.dst = i
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// NewWriter starts a file on out.
func NewWriter(out io.Writer, opts Options) (*Writer, error) {
	c, err := codec(opts.Codec)
	if err != nil {
		return nil, err
	}
	if opts.RowGroupBytes <= 0 {
		opts.RowGroupBytes = 1 << 20
	}
	if opts.PageBytes <= 0 {
		opts.PageBytes = DefaultPageBytes
	}
	w := &Writer{opts: opts, meta: map[string]string{MetaVersion: FormatVersion}}
	for k, v := range opts.Metadata {
		w.meta[k] = v
	}
	w.w = pq.NewGenericWriter[Row](out,
		pq.Compression(c),
		pq.PageBufferSize(opts.PageBytes),
		pq.DataPageStatistics(true),
		// Page headers carry no min and max of the opaque byte columns:
		// parquet-go writes them whole (twice: the deprecated fields and the
		// current ones), about 4 KiB uncompressed per page of 1 KiB values,
		// a quarter of the object. The column index keeps its bounds
		// (truncated to 16 bytes): without them parquet-go writes empty
		// ones, which a reader filtering on the column index would trust.
		pq.SkipPageStatistics("value"),
		pq.SkipPageStatistics("protocol_data"),
		pq.SkipPageStatistics("headers", "list", "element", "value"),
		pq.CreatedBy("strata", FormatVersion, ""),
	)
	if w.cols, err = lookupColumns(w.w.Schema()); err != nil {
		return nil, err
	}
	return w, nil
}

// optional is b as the value of an optional column (definition level 1
// when present, null when b is nil).
func optional(b []byte, col int) pq.Value {
	if b == nil {
		return pq.NullValue().Level(0, 0, col)
	}
	return pq.ByteArrayValue(b).Level(0, 1, col)
}

// Write adds one record; records must come in offset order. The record's
// bytes are copied: the caller may reuse them once Write returns.
func (w *Writer) Write(r *record.Record) error {
	if w.sum.Rows > 0 && r.Offset != w.sum.LastOffset+1 {
		return fmt.Errorf("parquet: offset %d follows %d; a file holds contiguous offsets", r.Offset, w.sum.LastOffset)
	}
	if err := w.writeColumns(r); err != nil {
		return err
	}
	if w.sum.Rows == 0 {
		w.sum.FirstOffset, w.sum.MinTimestamp, w.sum.MaxTimestamp = r.Offset, r.Timestamp, r.Timestamp
	}
	w.sum.LastOffset = r.Offset
	w.sum.MinTimestamp = min(w.sum.MinTimestamp, r.Timestamp)
	w.sum.MaxTimestamp = max(w.sum.MaxTimestamp, r.Timestamp)
	w.sum.Rows++
	w.inGroup += record.Size(r)
	if w.inGroup >= w.opts.RowGroupBytes {
		if err := w.writeBatch(); err != nil {
			return err
		}
		if err := w.w.Flush(); err != nil {
			return err
		}
		w.sum.RowGroups++
		w.inGroup = 0
	}
	return nil
}

// batchRows records go to the column writers at once: a call per column
// per record cost more than the values' copy into the arena.
const batchRows = 64

const numColumns = 8

// keep copies b into the arena. A value points into the
// arena's array of the moment, which stays alive while the value does.
func (w *Writer) keep(b []byte) []byte {
	if len(b) == 0 {
		return b // nil stays null, empty stays empty: nothing to copy
	}
	if len(w.arena)+len(b) > cap(w.arena) {
		w.arena = make([]byte, 0, max(2*cap(w.arena), len(b), 256<<10))
	}
	start := len(w.arena)
	w.arena = append(w.arena, b...)
	return w.arena[start:len(w.arena):len(w.arena)]
}

// writeColumns adds one row to the batch: a value (or, for a list, its
// values) for every leaf column. Levels follow docs/parquet.md's schema:
// key, value and protocol_data are optional (definition 1 when present);
// headers and tags are lists (repetition 1 from their second element on,
// definition 1 for an element of a list, 0 for an empty list), and a
// header's value is optional inside it (definition 2 present, 1 null).
func (w *Writer) writeColumns(r *record.Record) error {
	c := &w.cols
	v := &w.vals
	v[0] = append(v[0], pq.Int64Value(int64(r.Offset)).Level(0, 0, c.offset))
	v[1] = append(v[1], pq.Int64Value(r.Timestamp).Level(0, 0, c.timestamp))
	v[2] = append(v[2], optional(w.keep(r.Key), c.key))
	v[3] = append(v[3], optional(w.keep(r.Value), c.value))
	v[4] = append(v[4], optional(w.keep(r.ProtocolData), c.protocolData))
	if len(r.Headers) == 0 {
		v[5] = append(v[5], pq.NullValue().Level(0, 0, c.headerKey))
		v[6] = append(v[6], pq.NullValue().Level(0, 0, c.headerValue))
	}
	for i := range r.Headers {
		h := &r.Headers[i]
		v[5] = append(v[5], pq.ByteArrayValue(w.keep(stringBytes(h.Key))).Level(min(i, 1), 1, c.headerKey))
		if h.Value != nil {
			v[6] = append(v[6], pq.ByteArrayValue(w.keep(h.Value)).Level(min(i, 1), 2, c.headerValue))
		} else {
			v[6] = append(v[6], pq.NullValue().Level(min(i, 1), 1, c.headerValue))
		}
	}
	if len(r.Tags) == 0 {
		v[7] = append(v[7], pq.NullValue().Level(0, 0, c.tag))
	}
	for i := range r.Tags {
		v[7] = append(v[7], pq.ByteArrayValue(w.keep(stringBytes(r.Tags[i]))).Level(min(i, 1), 1, c.tag))
	}
	w.pending++
	if w.pending >= batchRows {
		return w.writeBatch()
	}
	return nil
}

// writeBatch hands the batch to the column writers, which copy it.
func (w *Writer) writeBatch() error {
	if w.pending == 0 {
		return nil
	}
	cw := w.w.ColumnWriters()
	c := &w.cols
	for i, col := range [numColumns]int{c.offset, c.timestamp, c.key, c.value, c.protocolData, c.headerKey, c.headerValue, c.tag} {
		if _, err := cw[col].WriteRowValues(w.vals[i]); err != nil {
			return err
		}
		clear(w.vals[i]) // no hold on the arena past this call
		w.vals[i] = w.vals[i][:0]
	}
	w.pending = 0
	w.arena = w.arena[:0]
	return nil
}

// stringBytes views s as bytes without a copy: keep copies them, and
// nothing writes through the view.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// Close finishes the file: the last row group, the page index and the
// footer with strata's metadata.
func (w *Writer) Close() (Summary, error) {
	if err := w.writeBatch(); err != nil {
		return w.sum, err
	}
	if w.inGroup > 0 {
		w.sum.RowGroups++
	}
	if w.sum.Rows > 0 {
		w.meta[MetaFirstOffset] = strconv.FormatUint(w.sum.FirstOffset, 10)
		w.meta[MetaLastOffset] = strconv.FormatUint(w.sum.LastOffset, 10)
	}
	for k, v := range w.meta {
		w.w.SetKeyValueMetadata(k, v)
	}
	return w.sum, w.w.Close()
}

// ErrNotStrata is wrapped when a file is Parquet but not strata's layout.
var ErrNotStrata = errors.New("not a strata Parquet file")
