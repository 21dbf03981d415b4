package kafka

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A consumer catching up asks for the next records as soon as it has
// decoded the last ones: one fetch in flight per broker (franz-go, the
// Java client), so the broker's work and the client's take turns. Kafka
// sends stored batches with sendfile and has little to do per fetch;
// strata reframes every record. So once a fetch is answered with
// partitions cut short by their byte limit (more records are there), the
// connection reads and frames the next answer's partitions, from where the
// answer ended, while the answer travels and the client decodes it. The
// next fetch on the connection takes what matches it exactly (same
// partition, offset and byte limit); anything else is dropped. Like the
// operating system's read-ahead for sequential reads, it costs one answer's
// memory and, for a consumer that stops, one answer's work.
//
// What it serves is what a fetch would have answered when the read-ahead
// ran: records below the high watermark then, which are committed and
// never change. It is used only if, at the next fetch, they are still
// above the partition's log start (retention, DeleteRecords) and below its
// high watermark, and within readAheadTTL; the fetch's own checks
// (leadership, leader epoch) run as for any fetch.

// readAheadTTL bounds how stale a read-ahead answer may be when used.
const readAheadTTL = 5 * time.Second

// aheadKey is a partition's read as a fetch makes it.
type aheadKey struct {
	shard string
	from  uint64
	limit int
}

// ahead is one partition's framed batches, read ahead.
type ahead struct {
	batches []byte // from getBuf; the fetch that takes it hands it back
	next    uint64 // the offset after the last record framed
}

// aheadSet is one read-ahead's answers, taken by the next fetch.
type aheadSet struct {
	mu      sync.Mutex
	entries map[aheadKey]ahead
	bytes   *atomic.Int64 // the server's read-ahead bytes, given back as entries go
	count   func(result string)
	// deleted is the server's count of topics deleted, gen its value when
	// the read began: a topic deleted and created again under the same
	// name may have records at the same offsets, other ones.
	deleted *atomic.Int64
	gen     int64
}

// take removes and returns the batches read ahead for shard from offset
// from with limit bytes, if they are still valid for the partition's
// current log start low and high watermark high.
func (as *aheadSet) take(k aheadKey, low, high uint64) (ahead, bool) {
	if as == nil {
		return ahead{}, false
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	e, ok := as.entries[k]
	if !ok {
		return ahead{}, false
	}
	delete(as.entries, k)
	as.bytes.Add(-int64(cap(e.batches)))
	if k.from < low || e.next > high || as.deleted.Load() != as.gen {
		as.count("stale")
		putBuf(e.batches)
		return ahead{}, false
	}
	as.count("used")
	return e, true
}

// drop hands back what nobody took.
func (as *aheadSet) drop() {
	if as == nil {
		return
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	for k, e := range as.entries {
		as.count("unused")
		as.bytes.Add(-int64(cap(e.batches)))
		putBuf(e.batches)
		delete(as.entries, k)
	}
}

// readAhead is a connection's read-ahead: at most one in flight or
// waiting to be taken.
type readAhead struct {
	mu      sync.Mutex
	done    chan struct{} // closed when the read in flight has finished
	set     *aheadSet
	made    time.Time
	cancel  context.CancelFunc
	closed  bool
	planned map[string]uint64 // shard -> the offset read ahead from
	pending func()            // starts the next read-ahead, once the answer is written
}

type readAheadCtxKey struct{}

func withReadAhead(ctx context.Context, ra *readAhead) context.Context {
	return context.WithValue(ctx, readAheadCtxKey{}, ra)
}

func readAheadOf(ctx context.Context) *readAhead {
	ra, _ := ctx.Value(readAheadCtxKey{}).(*readAhead)
	return ra
}

// take returns the read-ahead's answers for a fetch of reads to use
// (waiting for a read in flight: it began before this fetch and costs less
// than reading anew), or nil. The fetch drops what it does not use. A read
// ahead from none of the offsets asked is stopped, not waited for.
func (ra *readAhead) take(ctx context.Context, reads []fetchRead) *aheadSet {
	if ra == nil {
		return nil
	}
	ra.mu.Lock()
	done, set, planned := ra.done, ra.set, ra.planned
	if done == nil {
		ra.mu.Unlock()
		return nil
	}
	if !slices.ContainsFunc(reads, func(rd fetchRead) bool { f, ok := planned[rd.shard]; return ok && f == rd.from }) {
		// A read still in flight drops what it framed itself (it is no
		// longer ra's).
		ra.cancel()
		ra.done, ra.set = nil, nil
		ra.mu.Unlock()
		set.drop()
		return nil
	}
	ra.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if ra.done != done { // another fetch took it meanwhile
		return nil
	}
	set = ra.set
	ra.done, ra.set = nil, nil
	if time.Since(ra.made) > readAheadTTL {
		set.drop()
		return nil
	}
	return set
}

// afterAnswer has f run once the answer being built is written (launch):
// a read-ahead started sooner would take the cores that write it, and the
// client would wait for its answer what the read-ahead saves it on the
// next one.
func (ra *readAhead) afterAnswer(f func()) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.pending = f
}

// launch runs what afterAnswer left: the answer is written.
func (ra *readAhead) launch() {
	ra.mu.Lock()
	f := ra.pending
	ra.pending = nil
	ra.mu.Unlock()
	if f != nil {
		f()
	}
}

// start runs read in the background unless one is in flight or waiting
// (then it returns false); read returns the answers it framed.
func (ra *readAhead) start(planned map[string]uint64, read func(context.Context) *aheadSet) bool {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if ra.closed || ra.done != nil {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ra.done, ra.cancel, ra.made, ra.planned = done, cancel, time.Now(), planned
	go func() {
		defer close(done)
		set := read(ctx)
		cancel()
		ra.mu.Lock()
		defer ra.mu.Unlock()
		if ra.done != done || ra.closed {
			set.drop()
			return
		}
		ra.set = set
	}()
	return true
}

// close stops a read in flight and hands back what was read: the
// connection is gone.
func (ra *readAhead) close() {
	ra.mu.Lock()
	ra.closed = true
	done, cancel, set := ra.done, ra.cancel, ra.set
	ra.done, ra.set = nil, nil
	ra.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
	set.drop()
}

// readAheadAfter starts reading the partitions of an answer that were cut
// short by their byte limit, from where the answer ended, with the limits
// the request set: what the client's next fetch will most likely ask.
func (s *Server) readAheadAfter(ctx context.Context, r *kmsg.FetchRequest, answered []fetchRead) {
	ra := readAheadOf(ctx)
	if ra == nil || s.cfg.MaxReadAheadBytes <= 0 {
		return
	}
	var next []fetchRead
	planned := map[string]uint64{}
	want := 0
	for _, rd := range answered {
		if rd.next == 0 || rd.next >= rd.high || len(rd.rp.RecordBatches) == 0 {
			continue // caught up (or nothing answered): a tailing consumer waits for appends
		}
		if rd.used < rd.limit {
			// Cut short by max_bytes, not its own limit: the next fetch
			// shares max_bytes out again, most likely differently.
			continue
		}
		next = append(next, fetchRead{rp: &kmsg.FetchResponseTopicPartition{}, shard: rd.shard, from: rd.next,
			limit: rd.limit, low: rd.low, high: rd.high})
		planned[rd.shard] = rd.next
		want += rd.limit
	}
	if len(next) == 0 {
		return
	}
	maxBytes := s.fetchMaxBytes(r)
	want = min(want, maxBytes)
	ra.afterAnswer(func() {
		// The server's read-ahead memory is bounded: when it is taken,
		// the next fetch reads as if there were none.
		if s.readAheadBytes.Add(int64(want)) > s.cfg.MaxReadAheadBytes {
			s.readAheadBytes.Add(-int64(want))
			return
		}
		s.startReadAhead(ra, next, planned, maxBytes, want)
	})
}

// startReadAhead starts reading next (want bytes of the server's
// read-ahead budget taken for it).
func (s *Server) startReadAhead(ra *readAhead, next []fetchRead, planned map[string]uint64, maxBytes, want int) {
	gen := s.topicsDeleted.Load()
	started := ra.start(planned, func(ctx context.Context) *aheadSet {
		s.readParts(ctx, next, maxBytes, readAheadWorkers, nil, aheadBuf)
		set := &aheadSet{entries: map[aheadKey]ahead{}, bytes: &s.readAheadBytes, count: s.cfg.Metrics.readAhead,
			deleted: &s.topicsDeleted, gen: gen}
		held := 0
		for _, rd := range next {
			b := rd.rp.RecordBatches
			if rd.next == 0 || len(b) == 0 || rd.rp.ErrorCode != errNone {
				putBuf(b)
				continue
			}
			held += cap(b)
			set.entries[aheadKey{rd.shard, rd.from, rd.used}] = ahead{batches: b, next: rd.next}
		}
		s.readAheadBytes.Add(int64(held - want))
		return set
	})
	if !started {
		s.readAheadBytes.Add(-int64(want))
	}
}

// readAheadWorkers frame a read-ahead's partitions: one, so that a core is
// left for the client decoding the last answer (on the same machine) and
// for the answers of other connections. With as many as a fetch's own
// (GOMAXPROCS), consumes beside Apache Kafka ran 0.75-0.86 as fast as
// without read-ahead on two loaded cores; with one, 0.86-0.94, which is
// why read-ahead is off by default (docs/bench.md).
const readAheadWorkers = 1
