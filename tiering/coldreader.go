package tiering

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
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
// Parquet objects: the footer and page index are read once and cached; a
// point read then fetches only the pages holding its offsets (the offset
// index names them) and decodes them column-wise; a reader moving forward
// gets runs of row groups fetched with one ranged read each, decoded and
// cached several runs ahead. It implements segment.ColdSource.
type ColdReader struct {
	catalog catalog.Catalog
	bucket  objstore.Bucket
	// Heal, if set, is called when a segment's object is gone (a retype
	// replaced it, and this node's catalog has not followed: Job.Reconcile);
	// the read is tried once more after it.
	Heal func(ctx context.Context, shard string) error

	files   *lru[string, *coldFile]         // object key -> open footer
	ranges  *lru[rangeKey, []byte]          // raw row-group bytes, for parquet-go's reader
	chunks  *lru[rangeKey, []byte]          // raw bytes of a scan's runs of row groups
	groups  *lru[rangeKey, []record.Record] // decoded row groups
	flight  singleflight.Group
	ahead   sync.Map // rangeKey -> struct{}: row groups a read-ahead is decoding
	chunk   int64    // the bytes a scan fetches with one ranged read
	depth   int      // how many runs of row groups a scan reads ahead
	fetches *queue   // a read-ahead's fetches of runs

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
	// A scan fetches runs of adjacent row groups, chunks[k] the first
	// group of run k (and the end of the last run), with one ranged read.
	chunks  []int
	chunkOf []int // row group -> run
	seg     catalog.Segment
}

// setChunks cuts the file's row groups into runs of about max bytes.
func (cf *coldFile) setChunks(max int64) {
	groups := cf.f.Groups()
	cf.chunkOf = make([]int, len(groups))
	for gi, g := range groups {
		k := len(cf.chunks) - 1
		if k < 0 || g.Start != groups[gi-1].End || g.End-groups[cf.chunks[k]].Start > max {
			cf.chunks = append(cf.chunks, gi)
			k++
		}
		cf.chunkOf[gi] = k
	}
	cf.chunks = append(cf.chunks, len(groups))
}

// scanChunk is what a scan fetches with one ranged read: a few row groups,
// since each request costs the object store far more than its bytes do
// (BenchmarkTieringColdRead's scan: 8 MiB runs 0.38x to 0.66x of a plain
// GET, 4 MiB 0.33x to 0.42x, 16 MiB 0.37x to 0.55x, alternating runs).
const scanChunk = 8 << 20

// segmentWindow is how many catalog segments a cold read lists at a time:
// enough for a fetch's budget and the read-ahead behind it.
const segmentWindow = 16

// NewColdReader caches up to cacheBytes of row groups (raw and decoded).
func NewColdReader(cat catalog.Catalog, b objstore.Bucket, cacheBytes int64) *ColdReader {
	if cacheBytes <= 0 {
		cacheBytes = 256 << 20
	}
	// Decoded groups take most of the budget; raw bytes only wait for
	// their decoding (or for parquet-go's reader, on files the column-wise
	// one does not read).
	return &ColdReader{
		catalog: cat, bucket: b,
		files:   newLRU[string, *coldFile](4096),
		ranges:  newLRU[rangeKey, []byte](cacheBytes / 4),
		chunks:  newLRU[rangeKey, []byte](cacheBytes / 4),
		groups:  newLRU[rangeKey, []record.Record](cacheBytes / 2),
		chunk:   min(scanChunk, cacheBytes/16),
		depth:   int(max(1, min(3, cacheBytes/8/scanChunk))),
		fetches: &queue{width: 2},
	}
}

// Read returns records from offset on, within the budget, from the shard's
// segments that live only in the cold tier.
func (c *ColdReader) Read(ctx context.Context, shard string, offset uint64, b store.Budget) ([]record.Record, error) {
	out, err := c.read(ctx, shard, offset, b)
	if errors.Is(err, objstore.ErrNotFound) && c.Heal != nil {
		if herr := c.Heal(ctx, shard); herr != nil {
			return out, errors.Join(err, herr)
		}
		return c.read(ctx, shard, offset, b)
	}
	return out, err
}

func (c *ColdReader) read(ctx context.Context, shard string, offset uint64, b store.Budget) ([]record.Record, error) {
	r := &coldRead{offset: offset, budget: b}
	// The segments from the one holding offset, a window at a time: a
	// read never lists the shard's whole history.
	for {
		segs, err := c.catalog.SegmentsFrom(shard, r.offset, segmentWindow)
		if err != nil {
			return r.out, err
		}
		from := r.offset
		more, err := c.readSegments(ctx, segs, r)
		if err != nil || !more || len(segs) < segmentWindow || r.offset == from {
			return r.out, err
		}
	}
}

// coldRead is a Read in progress.
type coldRead struct {
	out    []record.Record
	used   int    // bytes of out, as the budget counts them
	offset uint64 // the next offset wanted
	budget store.Budget
}

// readSegments reads on into r out of segs, a window of the shard's
// segments; false once the read is over (the budget spent, or a gap: the
// next offset is not in the cold tier).
func (c *ColdReader) readSegments(ctx context.Context, segs []catalog.Segment, r *coldRead) (bool, error) {
	offset, b := r.offset, r.budget
	for si, s := range segs {
		if s.State != catalog.Remote || s.EndOffset < offset {
			continue
		}
		if s.StartOffset > offset {
			return false, nil // a gap: not ours to fill
		}
		cf, err := c.file(ctx, s)
		if err != nil {
			return false, err
		}
		for gi, err := cf.f.GroupOf(offset); ; gi++ {
			if err != nil {
				return false, fmt.Errorf("%s: %w", s.ObjectKey, err)
			}
			if gi >= len(cf.f.Groups()) {
				break
			}
			if b.MaxRecords > 0 && len(r.out) >= b.MaxRecords {
				return false, nil
			}
			var recs []record.Record
			if b.MaxRecords > 0 && b.MaxRecords <= pointRead {
				recs, err = c.rows(ctx, cf, gi, offset, b.MaxRecords-len(r.out))
			} else {
				recs, err = c.group(ctx, cf, gi)
				c.readAhead(cf, gi, segs[si+1:])
			}
			if err != nil {
				return false, err
			}
			for i := range recs {
				rec := &recs[i]
				if rec.Offset < offset {
					continue
				}
				size := record.Size(rec)
				if !b.Take(len(r.out), r.used, size) {
					return false, nil
				}
				r.out = append(r.out, *rec)
				r.used += size
				offset = rec.Offset + 1
				r.offset = offset
			}
		}
	}
	return true, nil
}

// OffsetForTime finds the first cold offset at or after from whose
// timestamp is at or after ts. The catalog's per-segment largest timestamp
// skips whole segments; within one, row groups are read in order.
func (c *ColdReader) OffsetForTime(ctx context.Context, shard string, from uint64, ts int64) (uint64, bool, error) {
	for next := from; ; {
		segs, err := c.catalog.SegmentsFrom(shard, next, segmentWindow)
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
		if len(segs) < segmentWindow || segs[len(segs)-1].EndOffset < next {
			return 0, false, nil // the end of the shard, or its active segment
		}
		next = segs[len(segs)-1].EndOffset + 1
	}
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
				return nil, lostObject(s, err)
			}
			size = a.Size
		}
		cf := &coldFile{key: s.ObjectKey, id: id, size: size}
		obj := cachedObject{c: c, ctx: context.WithoutCancel(ctx), key: s.ObjectKey, id: id, pre: &prefetched{}}
		if err := c.prefetchEnds(ctx, obj, size, s.Size); err != nil {
			return nil, lostObject(s, err)
		}
		f, err := parquet.Open(obj, size)
		obj.pre.spans, obj.pre.bufs = nil, nil // opened: the footer is parsed
		if err != nil {
			return nil, fmt.Errorf("cold object %s: %w", s.ObjectKey, err)
		}
		if f.FirstOffset() != s.StartOffset || f.Rows() != int64(s.Records) {
			return nil, fmt.Errorf("cold object %s holds offsets from %d, %d rows; the catalog says %d, %d records",
				s.ObjectKey, f.FirstOffset(), f.Rows(), s.StartOffset, s.Records)
		}
		cf.f = f
		cf.seg = s
		cf.setChunks(c.chunk)
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
		// The spans' buffers serve the next point reads: CopyRows leaves
		// nothing referring to them.
		bufs := make([][]byte, len(spans))
		defer func() {
			for _, b := range bufs {
				spanBuffers.put(b)
			}
		}()
		g, gctx := errgroup.WithContext(ctx)
		for i, sp := range spans {
			if len(spans) == 1 { // no goroutine for a single read
				if bufs[i], err = c.fetchInto(ctx, cf, sp.Start, spanBuffers.get(int(sp.End-sp.Start))); err != nil {
					return nil, err
				}
				break
			}
			g.Go(func() error {
				var err error
				bufs[i], err = c.fetchInto(gctx, cf, sp.Start, spanBuffers.get(int(sp.End-sp.Start)))
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		recs, err := cf.f.CopyRows(gi, from, int64(n), spanBytes(spans, bufs))
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
			if i < len(bufs) && sp.Start <= start && end <= sp.End && end-sp.Start <= int64(len(bufs[i])) {
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
		buf, err := c.groupBytes(ctx, cf, gi)
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

// groupBytes returns row group gi's bytes out of its run's, fetched once
// for every group of the run.
func (c *ColdReader) groupBytes(ctx context.Context, cf *coldFile, gi int) ([]byte, error) {
	k := cf.chunkOf[gi]
	first, last := cf.chunks[k], cf.chunks[k+1]-1
	groups := cf.f.Groups()
	g := groups[gi]
	if first == last {
		return c.fetch(ctx, cf, g.Start, g.End)
	}
	start := groups[first].Start
	key := rangeKey{cf.id, first}
	buf, ok := c.chunks.get(key)
	if !ok {
		v, err, _ := c.flight.Do(fmt.Sprintf("chunk:%s:%d", cf.id, first), func() (any, error) {
			if buf, ok := c.chunks.get(key); ok {
				return buf, nil
			}
			buf, err := c.fetch(ctx, cf, start, groups[last].End)
			if err != nil {
				return nil, err
			}
			c.chunks.add(key, buf, int64(len(buf)))
			return buf, nil
		})
		if err != nil {
			return nil, err
		}
		buf = v.([]byte)
	}
	return buf[g.Start-start : g.End-start : g.End-start], nil
}

// fetch reads bytes [start, end) of a file's object with one ranged read.
func (c *ColdReader) fetch(ctx context.Context, cf *coldFile, start, end int64) ([]byte, error) {
	return c.fetchInto(ctx, cf, start, make([]byte, end-start))
}

// fetchInto fills buf with the object's bytes from start on.
func (c *ColdReader) fetchInto(ctx context.Context, cf *coldFile, start int64, buf []byte) ([]byte, error) {
	n, err := c.bucket.ReadAt(ctx, cf.key, buf, start)
	c.Fetches.Add(1)
	c.FetchedBytes.Add(int64(n))
	if err != nil && !(errors.Is(err, io.EOF) && n == len(buf)) {
		return buf, fmt.Errorf("cold object %s bytes %d-%d: %w", cf.key, start, start+int64(len(buf)), lostObject(cf.seg, err))
	}
	return buf, nil
}

// lostObject marks the error of a read that found a committed object gone
// or shorter than recorded: the offsets it holds cannot be served from the
// bucket, and a retry will not change that (ErrColdObjectLost, which a
// Kafka fetch answers with KAFKA_STORAGE_ERROR, not UNKNOWN_SERVER_ERROR).
// Other errors (the bucket did not answer) stay what they are.
func lostObject(s catalog.Segment, err error) error {
	if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: offsets %d to %d of %s (the cold scrub reports it; docs/tiering.md, \"The cold scrub\"): %w",
			ErrColdObjectLost, s.StartOffset, s.EndOffset, s.Shard, err)
	}
	return err
}

// spanBuffers are the point reads' fetch buffers, by power of two up to
// 1 MiB: a point read fetches ~60 KiB, and a new buffer each time cost its
// zeroing and the collector's work (BenchmarkTieringColdRead's profile).
var spanBuffers bufferPool

type bufferPool struct{ sizes [21]sync.Pool }

func (p *bufferPool) get(n int) []byte {
	k := bits.Len(uint(max(n, 1) - 1))
	if k >= len(p.sizes) {
		return make([]byte, n)
	}
	if b, ok := p.sizes[k].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<k)
}

func (p *bufferPool) put(b []byte) {
	if c := cap(b); c > 0 && c&(c-1) == 0 && bits.Len(uint(c-1)) < len(p.sizes) {
		p.sizes[bits.Len(uint(c-1))].Put(&b)
	}
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

// readAhead decodes in the background what a reader scanning forward
// from row group gi needs next: the rest of its run and the next c.depth
// runs (in the next object when this one ends), each run fetched with one
// ranged read. A run takes longer to fetch than to consume, so one run
// ahead leaves the reader waiting on every fetch; with three, two fetches
// stay in flight, in the order the reader will want them.
func (c *ColdReader) readAhead(cf *coldFile, gi int, next []catalog.Segment) {
	if c.NoReadAhead {
		return
	}
	k, runs := cf.chunkOf[gi], len(cf.chunks)-1
	for r := k; r <= min(k+c.depth, runs-1); r++ {
		c.runAhead(cf, r)
	}
	more := k + c.depth - (runs - 1) // runs wanted past this object
	if more <= 0 || len(next) == 0 || next[0].State != catalog.Remote || next[0].StartOffset != cf.seg.EndOffset+1 {
		return
	}
	s := next[0]
	if _, ok := c.ahead.LoadOrStore(rangeKey{cacheID(s), -1}, struct{}{}); ok {
		return
	}
	go func() {
		defer c.ahead.Delete(rangeKey{cacheID(s), -1})
		if nf, err := c.file(context.Background(), s); err == nil {
			for r := 0; r < min(more, len(nf.chunks)-1); r++ {
				c.runAhead(nf, r)
			}
		}
	}()
}

// runAhead fetches run r of a file and decodes its row groups in the
// background, unless they are cached or on their way. Fetches wait their
// turn in c.fetches, two at a time in the order asked for, so the run a
// reader wants first comes first instead of sharing the store's bandwidth
// with those it wants later.
func (c *ColdReader) runAhead(cf *coldFile, r int) {
	first, end := cf.chunks[r], cf.chunks[r+1]
	if _, ok := c.groups.get(rangeKey{cf.id, end - 1}); ok {
		return
	}
	k := rangeKey{cf.id, -2 - r}
	if _, ok := c.ahead.LoadOrStore(k, struct{}{}); ok {
		return
	}
	ctx := context.Background()
	c.fetches.push(func() {
		if _, err := c.groupBytes(ctx, cf, first); err != nil {
			c.ahead.Delete(k)
			return
		}
		go func() {
			defer c.ahead.Delete(k)
			for g := first; g < end; g++ {
				if _, err := c.group(ctx, cf, g); err != nil {
					return
				}
			}
		}()
	})
}

// queue runs jobs in the order pushed, at most width at a time, on
// goroutines that exist only while there is work.
type queue struct {
	mu     sync.Mutex
	jobs   []func()
	active int
	width  int
}

func (q *queue) push(job func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.jobs = append(q.jobs, job)
	if q.active < q.width {
		q.active++
		go q.work()
	}
}

func (q *queue) work() {
	for {
		q.mu.Lock()
		if len(q.jobs) == 0 {
			q.active--
			q.mu.Unlock()
			return
		}
		job := q.jobs[0]
		q.jobs[0] = nil
		q.jobs = q.jobs[1:]
		q.mu.Unlock()
		job()
	}
}

// cachedObject is the Parquet reader's view of an object: reads inside a
// fetched row group come from memory, and so do the ends of the file while
// it is being opened; anything else from the bucket.
type cachedObject struct {
	c   *ColdReader
	ctx context.Context
	key string
	id  string
	pre *prefetched
}

// prefetched holds the bytes fetched to open a file.
type prefetched struct {
	spans []parquet.Span
	bufs  [][]byte
}

// footerGuess is how much of an object's end an open fetches at once: the
// footer and the page index before it, in one ranged read instead of the
// several small ones parquet-go makes. They take 1.5-1.9 KiB per row group
// of the default 1 MiB (tiering.row_group_bytes), whatever the records'
// size (64 MiB segments of 10 B to 200 KB values), so a 256th of the
// segment's bytes is twice what they need. The object's size said little:
// zstd makes objects of 1 KiB JSON records a sixth of their segment, and
// its 256th was half their tail (two reads to open). When the segment's
// size is unknown, a 64th of the object's (an object of 10 B records was
// 82 times its tail).
func footerGuess(objectSize, segmentSize int64) int64 {
	g := segmentSize / 256
	if segmentSize <= 0 {
		g = objectSize / 64
	}
	return min(objectSize, max(64<<10, min(g, 8<<20)))
}

// prefetchEnds fetches the first bytes of an object (the magic) and its
// tail (footer, page index) at once, for Open to read from memory.
func (c *ColdReader) prefetchEnds(ctx context.Context, o cachedObject, size, segmentSize int64) error {
	tail := footerGuess(size, segmentSize)
	o.pre.spans = []parquet.Span{{Start: size - tail, End: size}, {Start: 0, End: min(4, size)}}
	o.pre.bufs = make([][]byte, 2)
	g, gctx := errgroup.WithContext(ctx)
	for i, sp := range o.pre.spans {
		if i == 1 && tail == size {
			break // the tail is the whole object
		}
		g.Go(func() error {
			buf := make([]byte, sp.End-sp.Start)
			n, err := c.bucket.ReadAt(gctx, o.key, buf, sp.Start)
			c.Fetches.Add(1)
			c.FetchedBytes.Add(int64(n))
			if err != nil && !(errors.Is(err, io.EOF) && int64(n) == sp.End-sp.Start) {
				return fmt.Errorf("cold object %s bytes %d-%d: %w", o.key, sp.Start, sp.End, err)
			}
			o.pre.bufs[i] = buf
			return nil
		})
	}
	return g.Wait()
}

func (o cachedObject) ReadAt(p []byte, off int64) (int, error) {
	if len(p) > 0 {
		if b, ok := spanBytes(o.pre.spans, o.pre.bufs)(off, off+int64(len(p))); ok {
			return copy(p, b), nil
		}
	}
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
