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
type Row struct {
	Offset       int64    `parquet:"offset"`
	Timestamp    int64    `parquet:"timestamp,timestamp(millisecond)"`
	Key          *[]byte  `parquet:"key,optional"`
	Value        *[]byte  `parquet:"value,optional"`
	Headers      []Header `parquet:"headers,list"`
	Tags         []string `parquet:"tags,list"`
	ProtocolData *[]byte  `parquet:"protocol_data,optional"`
}

// Header is one Kafka-style header; a null value stays null.
type Header struct {
	Key   string  `parquet:"key"`
	Value *[]byte `parquet:"value,optional"`
}

// slots holds the slice headers a batch of rows points at, so a pointer
// per optional value costs no allocation of its own.
type slots struct{ s [][]byte }

// optional points at a copy of b's slice header, nil for a null b. The
// pointer stays valid until reset: a full block is left to the rows that
// point into it and a new one is started.
func (sl *slots) optional(b []byte) *[]byte {
	if b == nil {
		return nil
	}
	if len(sl.s) == cap(sl.s) {
		sl.s = make([][]byte, 0, max(1024, 2*cap(sl.s)))
	}
	sl.s = append(sl.s, b)
	return &sl.s[len(sl.s)-1]
}

// reset reuses the block once no row points into it.
func (sl *slots) reset() {
	clear(sl.s)
	sl.s = sl.s[:0]
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

// FormatVersion is written to every file's key-value metadata.
const FormatVersion = "1"

// Metadata keys strata writes into the footer.
const (
	MetaVersion     = "strata.format_version"
	MetaFirstOffset = "strata.first_offset"
	MetaLastOffset  = "strata.last_offset"
)

func toRow(r *record.Record, sl *slots) Row {
	row := Row{Offset: int64(r.Offset), Timestamp: r.Timestamp, Key: sl.optional(r.Key), Value: sl.optional(r.Value), Tags: r.Tags,
		ProtocolData: sl.optional(r.ProtocolData)}
	if len(r.Headers) > 0 {
		row.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			row.Headers[i] = Header{Key: h.Key, Value: sl.optional(h.Value)}
		}
	}
	return row
}

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
	// PageBytes is the target page size (1 MiB, as parquet-mr and Arrow
	// write): zstd compresses each page alone, and 64 KiB pages made files
	// a third larger for a millisecond less per cold point read.
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
type Writer struct {
	w       *pq.GenericWriter[Row]
	opts    Options
	batch   []Row
	slots   slots // what the batch's optional columns point at
	inGroup int
	sum     Summary
	meta    map[string]string
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
		opts.PageBytes = 1 << 20
	}
	w := &Writer{opts: opts, meta: map[string]string{MetaVersion: FormatVersion}}
	for k, v := range opts.Metadata {
		w.meta[k] = v
	}
	w.w = pq.NewGenericWriter[Row](out,
		pq.Compression(c),
		pq.PageBufferSize(opts.PageBytes),
		pq.DataPageStatistics(true),
		pq.CreatedBy("strata", FormatVersion, ""),
	)
	return w, nil
}

// Write adds one record; records must come in offset order.
func (w *Writer) Write(r *record.Record) error {
	if w.sum.Rows > 0 && r.Offset != w.sum.LastOffset+1 {
		return fmt.Errorf("parquet: offset %d follows %d; a file holds contiguous offsets", r.Offset, w.sum.LastOffset)
	}
	if w.sum.Rows == 0 {
		w.sum.FirstOffset, w.sum.MinTimestamp, w.sum.MaxTimestamp = r.Offset, r.Timestamp, r.Timestamp
	}
	w.sum.LastOffset = r.Offset
	w.sum.MinTimestamp = min(w.sum.MinTimestamp, r.Timestamp)
	w.sum.MaxTimestamp = max(w.sum.MaxTimestamp, r.Timestamp)
	w.sum.Rows++
	w.batch = append(w.batch, toRow(r, &w.slots))
	w.inGroup += record.Size(r)
	if len(w.batch) >= 256 || w.inGroup >= w.opts.RowGroupBytes {
		if err := w.writeBatch(); err != nil {
			return err
		}
	}
	if w.inGroup >= w.opts.RowGroupBytes {
		if err := w.w.Flush(); err != nil {
			return err
		}
		w.sum.RowGroups++
		w.inGroup = 0
	}
	return nil
}

func (w *Writer) writeBatch() error {
	if len(w.batch) == 0 {
		return nil
	}
	_, err := w.w.Write(w.batch)
	clear(w.batch) // drop references to record bytes
	w.batch = w.batch[:0]
	w.slots.reset()
	return err
}

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
