package tiering

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"strata/catalog"
	"strata/engine/record"
	"strata/engine/store"
	"strata/parquet"
	"strata/tiering/objstore"
)

// ColdReader serves offsets of segments whose local copy is gone, from their
// Parquet objects: the footer and page index are read once and cached; a read
// then fetches the one row group holding the offset with a single ranged
// read, decodes it, and caches it; a reader moving forward gets the next row
// group fetched ahead. It implements segment.ColdSource.
type ColdReader struct {
	catalog catalog.Catalog
	bucket  objstore.Bucket

	files  *lru[string, *coldFile]         // object key -> open footer
	ranges *lru[rangeKey, []byte]          // raw row-group bytes, for the Parquet reader
	groups *lru[rangeKey, []record.Record] // decoded row groups
	flight singleflight.Group

	// NoReadAhead turns read-ahead off (benchmarks of single point reads).
	NoReadAhead bool

	// Stats for metrics and benchmarks.
	Fetches, FetchedBytes, Hits, Misses atomic.Int64
}

type rangeKey struct {
	key   string
	group int
}

type coldFile struct {
	key  string // the object
	id   string // the cache's name for it: see cacheID
	size int64
	f    *parquet.File
	mu   sync.Mutex // the Parquet reader of one file decodes one group at a time
}

// NewColdReader caches up to cacheBytes of row groups (raw and decoded).
func NewColdReader(cat catalog.Catalog, b objstore.Bucket, cacheBytes int64) *ColdReader {
	if cacheBytes <= 0 {
		cacheBytes = 256 << 20
	}
	return &ColdReader{
		catalog: cat, bucket: b,
		files:  newLRU[string, *coldFile](4096),
		ranges: newLRU[rangeKey, []byte](cacheBytes / 2),
		groups: newLRU[rangeKey, []record.Record](cacheBytes / 2),
	}
}

// Read returns records from offset on, within the budget, from the shard's
// segments that live only in the cold tier.
func (c *ColdReader) Read(ctx context.Context, shard string, offset uint64, b store.Budget) ([]record.Record, error) {
	segs, err := c.catalog.Segments(shard)
	if err != nil {
		return nil, err
	}
	var out []record.Record
	used := 0
	for _, s := range segs {
		if s.State != catalog.Remote || s.EndOffset < offset {
			continue
		}
		if s.StartOffset > offset {
			break // a gap: not ours to fill
		}
		cf, err := c.file(ctx, s)
		if err != nil {
			return out, err
		}
		for gi, err := cf.f.GroupOf(offset); ; gi++ {
			if err != nil {
				return out, fmt.Errorf("%s: %w", s.ObjectKey, err)
			}
			if gi >= len(cf.f.Groups()) {
				break
			}
			if b.MaxRecords > 0 && len(out) >= b.MaxRecords {
				return out, nil
			}
			var recs []record.Record
			if b.MaxRecords > 0 && b.MaxRecords <= pointRead {
				recs, err = c.rows(ctx, cf, gi, offset, b.MaxRecords-len(out))
			} else {
				recs, err = c.group(ctx, cf, gi)
				c.readAhead(cf, gi+1)
			}
			if err != nil {
				return out, err
			}
			for i := range recs {
				r := &recs[i]
				if r.Offset < offset {
					continue
				}
				size := record.Size(r)
				if !b.Take(len(out), used, size) {
					return out, nil
				}
				out = append(out, *r)
				used += size
				offset = r.Offset + 1
			}
		}
	}
	return out, nil
}

// OffsetForTime finds the first cold offset at or after from whose
// timestamp is at or after ts. The catalog's per-segment largest timestamp
// skips whole segments; within one, row groups are read in order.
func (c *ColdReader) OffsetForTime(ctx context.Context, shard string, from uint64, ts int64) (uint64, bool, error) {
	segs, err := c.catalog.Segments(shard)
	if err != nil {
		return 0, false, err
	}
	for _, s := range segs {
		if s.State != catalog.Remote || s.EndOffset < from || s.MaxTimestamp < ts {
			continue
		}
		cf, err := c.file(ctx, s)
		if err != nil {
			return 0, false, err
		}
		for gi := range cf.f.Groups() {
			recs, err := c.group(ctx, cf, gi)
			if err != nil {
				return 0, false, err
			}
			for _, r := range recs {
				if r.Offset >= from && r.Timestamp >= ts {
					return r.Offset, true, nil
				}
			}
		}
	}
	return 0, false, nil
}

// cacheID names a segment's object in the caches. The key alone is not
// enough: a topic deleted and created again writes new objects under the
// same keys, and its reads must never meet the old ones' cached bytes; the
// time the upload was committed tells the two apart.
func cacheID(s catalog.Segment) string {
	return fmt.Sprintf("%s@%d", s.ObjectKey, s.TieredAt.UnixNano())
}

// file opens (once) the footer of a segment's object.
func (c *ColdReader) file(ctx context.Context, s catalog.Segment) (*coldFile, error) {
	id := cacheID(s)
	if cf, ok := c.files.get(id); ok {
		return cf, nil
	}
	v, err, _ := c.flight.Do("file:"+id, func() (any, error) {
		size := s.ObjectSize
		if size <= 0 {
			a, err := c.bucket.Stat(ctx, s.ObjectKey)
			if err != nil {
				return nil, err
			}
			size = a.Size
		}
		cf := &coldFile{key: s.ObjectKey, id: id, size: size}
		f, err := parquet.Open(cachedObject{c: c, ctx: context.WithoutCancel(ctx), key: s.ObjectKey, id: id}, size)
		if err != nil {
			return nil, fmt.Errorf("cold object %s: %w", s.ObjectKey, err)
		}
		if f.FirstOffset() != s.StartOffset || f.Rows() != int64(s.Records) {
			return nil, fmt.Errorf("cold object %s holds offsets from %d, %d rows; the catalog says %d, %d records",
				s.ObjectKey, f.FirstOffset(), f.Rows(), s.StartOffset, s.Records)
		}
		cf.f = f
		c.files.add(id, cf, 1)
		return cf, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*coldFile), nil
}

// pointRead is the largest read served by fetching and decoding just the
// pages holding the rows asked for instead of the whole row group.
const pointRead = 16

// rows decodes up to n rows from offset within row group gi: a point read
// fetches only the pages holding them (the offset index says where they
// are; one ranged read per run of nearby pages, in parallel) and decodes
// them column-wise. A group already decoded is used as it is.
func (c *ColdReader) rows(ctx context.Context, cf *coldFile, gi int, offset uint64, n int) ([]record.Record, error) {
	if recs, ok := c.groups.get(rangeKey{cf.id, gi}); ok {
		c.Hits.Add(1)
		return recs, nil
	}
	c.Misses.Add(1)
	from := int64(offset-cf.f.FirstOffset()) - cf.f.Groups()[gi].FirstRow
	spans, err := cf.f.PageSpans(gi, from, int64(n))
	if err == nil {
		bufs := make([][]byte, len(spans))
		g, gctx := errgroup.WithContext(ctx)
		for i, sp := range spans {
			g.Go(func() error {
				var err error
				bufs[i], err = c.fetch(gctx, cf, sp.Start, sp.End)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		recs, err := cf.f.DecodeRows(gi, from, int64(n), spanBytes(spans, bufs))
		if !errors.Is(err, parquet.ErrNoFastPath) {
			if err != nil {
				return nil, fmt.Errorf("cold object %s row group %d: %w", cf.key, gi, err)
			}
			return recs, nil
		}
	}
	// A file the column-wise reader does not read: parquet-go's row reader
	// over the whole group's bytes.
	if _, err, _ := c.flight.Do(fmt.Sprintf("range:%s:%d", cf.id, gi), func() (any, error) {
		return nil, c.fetchRange(ctx, cf, gi)
	}); err != nil {
		return nil, err
	}
	cf.mu.Lock()
	defer cf.mu.Unlock()
	recs, err := cf.f.ReadRows(gi, from, int64(n))
	if err != nil {
		return nil, fmt.Errorf("cold object %s row group %d: %w", cf.key, gi, err)
	}
	return recs, nil
}

// spanBytes serves the decoder from the spans fetched.
func spanBytes(spans []parquet.Span, bufs [][]byte) parquet.Bytes {
	return func(start, end int64) ([]byte, bool) {
		for i, sp := range spans {
			if sp.Start <= start && end <= sp.End && end-sp.Start <= int64(len(bufs[i])) {
				return bufs[i][start-sp.Start : end-sp.Start : end-sp.Start], true
			}
		}
		return nil, false
	}
}

// group returns row group gi decoded, fetching its bytes with one ranged
// read if they are not cached; concurrent misses share one fetch.
func (c *ColdReader) group(ctx context.Context, cf *coldFile, gi int) ([]record.Record, error) {
	k := rangeKey{cf.id, gi}
	if recs, ok := c.groups.get(k); ok {
		c.Hits.Add(1)
		return recs, nil
	}
	c.Misses.Add(1)
	v, err, _ := c.flight.Do(fmt.Sprintf("group:%s:%d", cf.id, gi), func() (any, error) {
		g := cf.f.Groups()[gi]
		var recs []record.Record
		buf, err := c.fetch(ctx, cf, g.Start, g.End)
		if err != nil {
			return nil, err
		}
		recs, err = cf.f.DecodeRows(gi, 0, g.Rows, spanBytes([]parquet.Span{{Start: g.Start, End: g.End}}, [][]byte{buf}))
		if errors.Is(err, parquet.ErrNoFastPath) {
			// parquet-go's row reader reads the group's bytes from the
			// range cache (cachedObject).
			c.ranges.add(k, buf, int64(len(buf)))
			cf.mu.Lock()
			recs, err = cf.f.ReadGroup(gi)
			cf.mu.Unlock()
		}
		if err != nil {
			return nil, fmt.Errorf("cold object %s row group %d: %w", cf.key, gi, err)
		}
		weight := int64(0)
		for i := range recs {
			weight += int64(record.Size(&recs[i]))
		}
		c.groups.add(k, recs, weight)
		return recs, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]record.Record), nil
}

// fetch reads bytes [start, end) of a file's object with one ranged read.
func (c *ColdReader) fetch(ctx context.Context, cf *coldFile, start, end int64) ([]byte, error) {
	buf := make([]byte, end-start)
	n, err := c.bucket.ReadAt(ctx, cf.key, buf, start)
	c.Fetches.Add(1)
	c.FetchedBytes.Add(int64(n))
	if err != nil {
		return nil, fmt.Errorf("cold object %s bytes %d-%d: %w", cf.key, start, end, err)
	}
	return buf, nil
}

func (c *ColdReader) fetchRange(ctx context.Context, cf *coldFile, gi int) error {
	k := rangeKey{cf.id, gi}
	if _, ok := c.ranges.get(k); ok {
		return nil
	}
	g := cf.f.Groups()[gi]
	buf, err := c.fetch(ctx, cf, g.Start, g.End)
	if err != nil {
		return err
	}
	c.ranges.add(k, buf, int64(len(buf)))
	return nil
}

// readAheadGroups is how many row groups a scan keeps fetched or in flight
// ahead of the reader: enough that fetching one group, decoding another and
// the consumer's copying overlap on two cores.
const readAheadGroups = 3

// readAhead fetches the row groups from gi on in the background, so a
// consumer scanning forward finds them ready.
func (c *ColdReader) readAhead(cf *coldFile, gi int) {
	if c.NoReadAhead {
		return
	}
	for g := gi; g < min(gi+readAheadGroups, len(cf.f.Groups())); g++ {
		if _, ok := c.groups.get(rangeKey{cf.id, g}); !ok {
			go c.group(context.Background(), cf, g)
		}
	}
}

// cachedObject is the Parquet reader's view of an object: reads inside a
// fetched row group come from memory, anything else (the footer, the page
// index) from the bucket.
type cachedObject struct {
	c   *ColdReader
	ctx context.Context
	key string
	id  string
}

func (o cachedObject) ReadAt(p []byte, off int64) (int, error) {
	cf, _ := o.c.files.get(o.id)
	if cf != nil && cf.f != nil {
		groups := cf.f.Groups()
		i := sort.Search(len(groups), func(i int) bool { return groups[i].End > off })
		if i < len(groups) && groups[i].Start <= off && off+int64(len(p)) <= groups[i].End {
			if buf, ok := o.c.ranges.get(rangeKey{o.id, i}); ok {
				return copy(p, buf[off-groups[i].Start:]), nil
			}
		}
	}
	return o.c.bucket.ReadAt(o.ctx, o.key, p, off)
}
