// Package parquet converts sealed segments to Parquet and back, losslessly:
// reading a file gives records byte-identical (once encoded) to the
// segment's. The layout is in docs/parquet.md. This package owns the
// schema, the row-group sizing that makes cold point reads cheap, and the
// conversion; it writes the pages, column chunks, page index and footer
// itself (writer.go), and parquet-go gives the schema and reads.
package parquet

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/gzip"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/uncompressed"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"strata/engine/integrity"
	"strata/engine/record"
	"strata/typed"
)

// Row is one record as a Parquet row. topic and partition are not columns:
// they are in the object's path (Hive partitioning), and Spark refuses a
// column that is both in the file and in the path.
//
// The optional byte columns are pointers: in a []byte, parquet-go v0.32
// does not keep a null inside the headers list apart from an empty value
// (a nil slice after a row whose header at the same place held bytes);
// a pointer does. The schema is the same (optional binary).
//
// value is the last column (format 2; format 1 had it fourth): a row
// group's column chunks follow the schema's order, so the small columns
// lie together at its start and a cold point read fetches them and the
// value page with two ranged reads, or one when the page is near the
// start. Readers find columns by name, and read both orders.
type Row struct {
	// The id(N) tags are the Parquet schema's field_id of each column,
	// the topic's Iceberg table's field ids (icetable.Schema numbers them
	// so, and its test holds the two together): an Iceberg reader finds
	// the columns of a new object by id; objects tiered before carry none
	// and are read through the table's name mapping.
	Offset       int64    `parquet:"offset,id(1)"`
	Timestamp    int64    `parquet:"timestamp,timestamp(millisecond),id(2)"`
	Key          *[]byte  `parquet:"key,optional,id(3)"`
	Headers      []Header `parquet:"headers,list,id(4)" parquet-element:",id(5)"`
	Tags         []string `parquet:"tags,list,id(8)" parquet-element:",id(9)"`
	ProtocolData *[]byte  `parquet:"protocol_data,optional,id(10)"`
	Value        *[]byte  `parquet:"value,optional,id(11)"`
}

// Header is one Kafka-style header; a null value stays null.
type Header struct {
	Key   string  `parquet:"key,id(6)"`
	Value *[]byte `parquet:"value,optional,id(7)"`
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
	// Typed are the columns decoded from each record's value or key
	// (docs/typed.md), after value: none by default.
	Typed []TypedColumn
}

// The typed columns' names (docs/typed.md): the value's, the key's, and
// the suffix of the column beside each that says why a record's bytes
// did not decode.
const (
	ValueTyped  = "value_typed"
	KeyTyped    = "key_typed"
	ErrorSuffix = "_error"
)

// A TypedColumn is decoded from every record's value (or key): Name
// (ValueTyped or KeyTyped) holds what Decode gives, of Type, whose field
// ids the caller numbers (typed.Number; Type.ID the column's own);
// Name+ErrorSuffix, of field id ErrorID, is null, or the reason the bytes
// did not decode, where the typed value is null. A null value (or key)
// has both null. The lossless columns keep the bytes either way.
type TypedColumn struct {
	Name    string
	Key     bool // decode the key, not the value
	Type    typed.Type
	ErrorID int
	Decode  func(raw []byte) (any, error)
}

// maxErrorBytes bounds a typed column's error text: a decoder's message
// names what was wrong, and must not make the column a copy of the value.
const maxErrorBytes = 512

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
	// TypedErrors counts, per Options.Typed column, the records whose
	// bytes did not decode.
	TypedErrors []int64
}

// Writer streams records into a Parquet file with memory bounded by one
// row group, whatever the segment's size.
//
// It writes column by column, pages of its own (writer.go): each record's
// fields go straight into the page of their column, the only copy of
// their bytes, so the caller may reuse them as soon as Write returns (the
// tiering scan decodes every record in one buffer).
type Writer struct {
	fileWriter
	opts    Options
	schema  *format.FileMetaData
	leaves  []leafWriter
	typed   []typedLeaves
	shred   []typed.LeafValue
	emit    func(typed.LeafValue) // appends to shred
	inGroup int
	sum     Summary
	meta    map[string]string
}

// typedLeaves are where a typed column's leaves are among the writer's.
type typedLeaves struct {
	first, errLeaf int
	shred          *typed.Shredder
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
	for i, c := range opts.Typed {
		if c.Name != ValueTyped && c.Name != KeyTyped || slices.ContainsFunc(opts.Typed[:i], func(o TypedColumn) bool { return o.Name == c.Name }) {
			return nil, fmt.Errorf("parquet: typed column %q: want one %s and one %s at most", c.Name, ValueTyped, KeyTyped)
		}
		if c.Decode == nil {
			return nil, fmt.Errorf("parquet: typed column %s has no decoder", c.Name)
		}
		if err := typed.Check(c.Type); err != nil { // parquet-go panics past 65,534 columns
			return nil, fmt.Errorf("parquet: typed column %s: %w", c.Name, err)
		}
	}
	schema, err := schemaWith(opts.Typed)
	if err != nil {
		return nil, fmt.Errorf("parquet: the schema of Row: %w", err)
	}
	w := &Writer{opts: opts, schema: schema, meta: map[string]string{MetaVersion: FormatVersion}}
	w.sum.TypedErrors = make([]int64, len(opts.Typed))
	w.out.out = out
	w.codec = c
	w.hdrEnc = thrift.NewEncoder(new(thrift.CompactProtocol).NewWriter(&w.hdr))
	for k, v := range opts.Metadata {
		w.meta[k] = v
	}
	if w.leaves, err = newLeaves(schema); err != nil {
		return nil, err
	}
	for _, c := range opts.Typed {
		first := slices.IndexFunc(w.leaves, func(l leafWriter) bool { return l.path[0] == c.Name })
		errLeaf := slices.IndexFunc(w.leaves, func(l leafWriter) bool { return l.path[0] == c.Name+ErrorSuffix })
		t := c.Type
		t.Optional = true
		w.typed = append(w.typed, typedLeaves{first: first, errLeaf: errLeaf, shred: typed.NewShredder(t)})
	}
	w.emit = func(l typed.LeafValue) { w.shred = append(w.shred, l) }
	return w, nil
}

// Write adds one record; records must come in offset order. The record's
// bytes are copied: the caller may reuse them once Write returns.
func (w *Writer) Write(r *record.Record) error {
	if w.sum.Rows > 0 && r.Offset != w.sum.LastOffset+1 {
		return fmt.Errorf("parquet: offset %d follows %d; a file holds contiguous offsets", r.Offset, w.sum.LastOffset)
	}
	w.writeColumns(r)
	for k := range w.typed {
		w.writeTyped(k, r)
	}
	if w.sum.Rows == 0 {
		w.sum.FirstOffset, w.sum.MinTimestamp, w.sum.MaxTimestamp = r.Offset, r.Timestamp, r.Timestamp
	}
	w.sum.LastOffset = r.Offset
	w.sum.MinTimestamp = min(w.sum.MinTimestamp, r.Timestamp)
	w.sum.MaxTimestamp = max(w.sum.MaxTimestamp, r.Timestamp)
	w.sum.Rows++
	w.groupRows++
	w.inGroup += record.Size(r)
	if w.inGroup >= w.opts.RowGroupBytes {
		if err := w.flushGroup(); err != nil {
			return err
		}
		w.sum.RowGroups++
		w.inGroup = 0
		return nil
	}
	for i := range w.leaves {
		if c := &w.leaves[i]; c.pageSize() >= w.opts.PageBytes {
			if err := c.flushPage(w); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeColumns adds one row: a value (or, for a list, its values) to every
// leaf column. Levels follow docs/parquet.md's schema: key, value and
// protocol_data are optional (definition 1 when present); headers and tags
// are lists (repetition 1 from their second element on, definition 1 for
// an element of a list, 0 for an empty list), and a header's value is
// optional inside it (definition 2 present, 1 null).
func (w *Writer) writeColumns(r *record.Record) {
	c := w.leaves
	c[colOffset].int64v(int64(r.Offset))
	c[colTimestamp].int64v(r.Timestamp)
	c[colKey].optional(r.Key)
	c[colValue].optional(r.Value)
	c[colProtocolData].optional(r.ProtocolData)
	if len(r.Headers) == 0 {
		c[colHeaderKey].null(0, 0)
		c[colHeaderValue].null(0, 0)
	}
	for i := range r.Headers {
		h := &r.Headers[i]
		rep := uint8(min(i, 1))
		c[colHeaderKey].bytes(rep, 1, stringBytes(h.Key))
		if h.Value != nil {
			c[colHeaderValue].bytes(rep, 2, h.Value)
		} else {
			c[colHeaderValue].null(rep, 1)
		}
	}
	if len(r.Tags) == 0 {
		c[colTag].null(0, 0)
	}
	for i := range r.Tags {
		c[colTag].bytes(uint8(min(i, 1)), 1, stringBytes(r.Tags[i]))
	}
}

// writeTyped adds the record's value of typed column k: decoded and
// shredded into its leaves, or null with the reason in its error column.
// Nothing reaches a leaf before the whole value has shredded and fits.
func (w *Writer) writeTyped(k int, r *record.Record) {
	c, at := &w.opts.Typed[k], &w.typed[k]
	raw := r.Value
	if c.Key {
		raw = r.Key
	}
	var why error
	w.shred = w.shred[:0]
	if raw != nil {
		v, err := decode(c.Decode, raw)
		if err == nil {
			err = at.shred.Shred(v, w.emit)
		}
		for _, l := range w.shred {
			if err != nil {
				break
			}
			if at.first+l.Leaf >= at.errLeaf {
				err = fmt.Errorf("%s: a value for leaf %d of a column of fewer", c.Name, l.Leaf)
			} else if why := w.leaves[at.first+l.Leaf].misfit(l.Value); why != "" {
				err = fmt.Errorf("%s: %s in %s", c.Name, why, strings.Join(w.leaves[at.first+l.Leaf].path, "."))
			}
		}
		why = err
	}
	if raw == nil || why != nil {
		w.shred = w.shred[:0]
		_ = at.shred.Shred(nil, w.emit)
	}
	for _, l := range w.shred {
		w.leaves[at.first+l.Leaf].value(uint8(l.Rep), uint8(l.Def), l.Value)
	}
	if why == nil {
		w.leaves[at.errLeaf].null(0, 0)
		return
	}
	w.sum.TypedErrors[k]++
	// A STRING column holds UTF-8: a decoder's message may quote bytes.
	msg := strings.ToValidUTF8(why.Error(), "\uFFFD")
	if len(msg) > maxErrorBytes {
		msg = strings.ToValidUTF8(msg[:maxErrorBytes-len("…")], "") + "…"
	}
	w.leaves[at.errLeaf].bytes(0, 1, []byte(msg))
}

// decode runs a typed column's decoder: a panic in it is that record's
// error, never the run's.
func decode(fn func([]byte) (any, error), raw []byte) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("the decoder panicked: %v", p)
		}
	}()
	return fn(raw)
}

// stringBytes views s as bytes without a copy: the page copies them, and
// nothing writes through the view.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// SetMetadata sets one of the footer's key-values before Close, for a
// value known only once every record has gone through (a merge's
// checksum of them).
func (w *Writer) SetMetadata(key, value string) { w.meta[key] = value }

// Close finishes the file: the last row group, the page index and the
// footer with strata's metadata.
func (w *Writer) Close() (Summary, error) {
	if w.inGroup > 0 {
		w.sum.RowGroups++
	}
	if w.sum.Rows > 0 {
		w.meta[MetaFirstOffset] = strconv.FormatUint(w.sum.FirstOffset, 10)
		w.meta[MetaLastOffset] = strconv.FormatUint(w.sum.LastOffset, 10)
	}
	return w.sum, w.finish(w.meta)
}

// ErrNotStrata is wrapped when a file is Parquet but not strata's layout.
// It answers integrity.IsCorruption: the objects strata reads are those it
// wrote, so one that is not its layout is damaged.
var ErrNotStrata = integrity.Sentinel("not a strata Parquet file")
