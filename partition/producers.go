package partition

import (
	"cmp"
	"context"
	"encoding/binary"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"strata/engine/record"
	"strata/engine/store"
)

// Idempotent producers: a batch carries (producer id, epoch, first sequence)
// and a retried batch must be answered with the offsets it got the first
// time, not stored twice, even when the retry reaches a restarted broker.
// Every record keeps its producer id, epoch and sequence in ProtocolData, so
// the state is rebuilt from the partition's whole log the first time a
// producer writes to it after a start or after this node became its leader:
// every replica holds the same records, so every new leader knows every
// producer whose last batch its log holds.

// recentBatches is how many batches per producer and partition a retry can
// be matched against, as in Kafka (max.in.flight.requests.per.connection).
const recentBatches = 5

type seqKey struct {
	pid   int64
	shard string
}

// seqRange is one stored batch (or run of batches): sequences first..last
// of one producer at offsets base..base+(last-first).
type seqRange struct {
	first, last int32
	base        int64
}

// producerState is what is known of one producer on one partition.
type producerState struct {
	epoch   int16
	lastSeq int32
	recent  []seqRange // oldest first, at most recentBatches
	lastTS  int64      // the largest timestamp of its last batch (DescribeProducers)
	// open: the log holds only the first part of the last batch (it was
	// cut inside it: a crash mid-append), so a retry of that batch is
	// completed, not refused as out of order.
	open bool
}

type verdict int

const (
	appendBatch verdict = iota
	duplicateBatch
	unknownDuplicate // a sequence already stored, too old to name its offsets
	completeBatch    // a retry of the batch whose first part ends the log: store the rest
	outOfOrder
	fencedEpoch
)

// Sequences run from 0 to math.MaxInt32 and then wrap to 0, as Kafka's do,
// so they are compared on that circle: SeqAdd moves along it and seqDist
// is how far b is ahead of a.
func SeqAdd(s int32, n int32) int32 { return int32((int64(s) + int64(n)) % (math.MaxInt32 + 1)) }

func seqDist(a, b int32) int64 {
	return ((int64(b)-int64(a))%(math.MaxInt32+1) + math.MaxInt32 + 1) % (math.MaxInt32 + 1)
}

// check decides what to do with a batch of sequences first..last (last
// possibly wrapped past 0) from a producer at epoch, given what is known
// (st is nil for a producer with no batch in the partition's log). For a
// duplicate it returns the batch's base offset.
//
// A producer with no batch in the log is taken at any sequence, as
// Kafka's brokers do since KIP-360: its records may have been deleted by
// retention or DeleteRecords while it lived, and refusing its next
// sequence (UNKNOWN_PRODUCER_ID) would fail a producer that lost nothing.
// Its retry of a batch the log no longer holds cannot be told from a new
// batch, in Kafka as here.
func check(st *producerState, epoch int16, first, last int32) (verdict, int64) {
	switch {
	case st == nil:
		return appendBatch, -1
	case epoch < st.epoch:
		return fencedEpoch, -1
	case epoch > st.epoch:
		if first != 0 { // a new epoch starts its sequences again
			return outOfOrder, -1
		}
		return appendBatch, -1
	case st.open && len(st.recent) > 0 && seqDist(first, st.lastSeq) < math.MaxInt32/2 &&
		seqDist(st.lastSeq, last) > 0 && seqDist(st.lastSeq, last) < math.MaxInt32/2:
		// It starts at or before the last sequence stored and runs past it:
		// if it starts inside the open batch's run, it is that batch again.
		r := st.recent[len(st.recent)-1]
		if at := seqDist(r.first, first); at <= seqDist(r.first, r.last) {
			return completeBatch, r.base + at
		}
		return outOfOrder, -1
	case first == SeqAdd(st.lastSeq, 1):
		return appendBatch, -1
	case seqDist(last, st.lastSeq) < math.MaxInt32/2: // at or behind the last stored
		n := seqDist(first, last)
		for _, r := range st.recent {
			if at := seqDist(r.first, first); at+n <= seqDist(r.first, r.last) {
				return duplicateBatch, r.base + at
			}
		}
		return unknownDuplicate, -1
	default:
		return outOfOrder, -1
	}
}

// record notes a batch stored at base.
func (st *producerState) record(epoch int16, first, last int32, base int64) {
	if epoch != st.epoch {
		st.recent = st.recent[:0]
	}
	st.epoch, st.lastSeq, st.open = epoch, last, false
	st.recent = append(st.recent, seqRange{first, last, base})
	if len(st.recent) > recentBatches {
		st.recent = st.recent[len(st.recent)-recentBatches:]
	}
}

// sequences holds the state of every producer on every partition touched
// since the start, and serializes check-and-append per producer and
// partition so two in-flight copies of a batch cannot both be stored.
type sequences struct {
	log     *slog.Logger
	mu      sync.Mutex
	loaded  map[string]*loading
	state   map[seqKey]*producerState
	writing map[seqKey]*sync.Mutex
}

// loading is one rebuild of a shard's state; every writer waiting on it
// sees its error.
type loading struct {
	once sync.Once
	err  error
}

func newSequences(log *slog.Logger) *sequences {
	return &sequences{log: log, loaded: map[string]*loading{}, state: map[seqKey]*producerState{}, writing: map[seqKey]*sync.Mutex{}}
}

// lock rebuilds shard's state from its log if this is the first idempotent
// write to it since the start, then locks key for a check and an append.
func (q *sequences) lock(ctx context.Context, st store.Store, key seqKey) (unlock func(), err error) {
	q.mu.Lock()
	w := q.writing[key]
	if w == nil {
		w = &sync.Mutex{}
		q.writing[key] = w
	}
	q.mu.Unlock()
	if err := q.load(ctx, st, key.shard); err != nil {
		return nil, err
	}
	w.Lock()
	return w.Unlock, nil
}

// load rebuilds shard's state from its log, once after the start.
func (q *sequences) load(ctx context.Context, st store.Store, shard string) error {
	q.mu.Lock()
	l := q.loaded[shard]
	if l == nil {
		l = &loading{}
		q.loaded[shard] = l
	}
	q.mu.Unlock()
	l.once.Do(func() { l.err = q.rebuild(ctx, st, shard) })
	if l.err != nil {
		q.mu.Lock()
		if q.loaded[shard] == l {
			delete(q.loaded, shard) // try again on the next write
		}
		q.mu.Unlock()
	}
	return l.err
}

// Producer is what is known of an idempotent producer on a partition
// (Kafka's DescribeProducers shows it).
type Producer struct {
	ID           int64
	Epoch        int16
	LastSequence int32
	// LastTimestamp is the largest timestamp of its last batch; LastBase
	// is that batch's first offset (-1: unknown).
	LastTimestamp int64
	LastBase      int64
}

// producers lists the idempotent producers known on shard, by id, loading
// its state from the log first if no write has since the start.
func (q *sequences) producers(ctx context.Context, st store.Store, shard string) ([]Producer, error) {
	if err := q.load(ctx, st, shard); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Producer
	for k, ps := range q.state {
		if k.shard != shard {
			continue
		}
		p := Producer{ID: k.pid, Epoch: ps.epoch, LastSequence: ps.lastSeq, LastTimestamp: ps.lastTS, LastBase: -1}
		if n := len(ps.recent); n > 0 {
			p.LastBase = ps.recent[n-1].base
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Producer) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

func (q *sequences) get(key seqKey) *producerState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state[key]
}

func (q *sequences) put(key seqKey, epoch int16, first, last int32, base, maxTS int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.state[key]
	if st == nil {
		st = &producerState{}
		q.state[key] = st
	}
	st.record(epoch, first, last, base)
	st.lastTS = maxTS
}

// complete notes the rest of an open batch stored at base: its sequences
// past the last one stored, up to last.
func (q *sequences) complete(key seqKey, last int32, base, maxTS int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.state[key]
	if st == nil || len(st.recent) == 0 {
		return
	}
	r := &st.recent[len(st.recent)-1]
	if r.base+seqDist(r.first, r.last)+1 == base {
		r.last = last // right after its first part: one run again
		st.lastSeq, st.open = last, false
	} else {
		st.record(st.epoch, SeqAdd(st.lastSeq, 1), last, base)
	}
	st.lastTS = max(st.lastTS, maxTS)
}

// forget drops what is known of shard's producers: the shard was deleted,
// or this node has just become its leader.
func (q *sequences) forget(shard string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.loaded, shard)
	for k := range q.state {
		if k.shard == shard {
			delete(q.state, k)
		}
	}
}

// rebuild reads shard's whole log, from its log start to its log end, and
// recovers each producer's epoch, last sequence and recent runs of
// sequences with their offsets: the state is complete for every producer
// whose last batch the log still holds, however many records follow it.
// (It read the newest 20,000 records only, and a retry of a batch older
// than those was stored a second time after a failover or a restart.)
// The time it takes grows with the log; docs/kafka.md says what bounds it.
func (q *sequences) rebuild(ctx context.Context, st store.Store, shard string) error {
	start := time.Now()
	low, high, err := st.Watermarks(ctx, shard)
	if err != nil {
		return err
	}
	// A new leader's log may hold batches past its high watermark that the
	// old leader stored and a retry names: they count too.
	read := st.Read
	if r, ok := st.(store.Replica); ok {
		end, err := r.LogEnd(ctx, shard)
		if err != nil {
			return err
		}
		high, read = end, r.ReadToLogEnd
	}
	type run struct {
		epoch       int16
		first, last int32
		base, end   int64
		maxTS       int64
		ends        bool // its last record ends a batch
	}
	// Each producer's runs are folded into its state as the next begins,
	// so what the scan holds is one state and one run per producer, not
	// the log's runs.
	type rebuilt struct {
		ps  producerState
		cur run
	}
	fold := func(p *rebuilt) {
		p.ps.record(p.cur.epoch, p.cur.first, p.cur.last, p.cur.base)
		p.ps.lastTS = p.cur.maxTS
		p.ps.open = !p.cur.ends
	}
	found := map[int64]*rebuilt{}
	read0 := 0
	for off := low; off < high; {
		recs, err := read(ctx, shard, off, store.Budget{MaxBytes: 4 << 20})
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			break
		}
		read0 += len(recs)
		for _, r := range recs {
			pid, epoch, seq, ends, ok := parseProducerData(r.ProtocolData)
			if !ok {
				continue
			}
			p := found[pid]
			switch {
			case p == nil:
				p = &rebuilt{}
				found[pid] = p
			case p.cur.epoch == epoch && SeqAdd(p.cur.last, 1) == seq && p.cur.end+1 == int64(r.Offset):
				p.cur.last, p.cur.end, p.cur.ends = seq, int64(r.Offset), ends
				p.cur.maxTS = max(p.cur.maxTS, r.Timestamp)
				continue
			default:
				fold(p)
			}
			p.cur = run{epoch: epoch, first: seq, last: seq, base: int64(r.Offset), end: int64(r.Offset), maxTS: r.Timestamp, ends: ends}
		}
		off = recs[len(recs)-1].Offset + 1
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for pid, p := range found {
		fold(p)
		q.state[seqKey{pid, shard}] = &p.ps
	}
	if q.log != nil && read0 > 0 {
		q.log.Info("partition: producer state rebuilt from the log", "shard", shard, "from", low, "to", high,
			"records", read0, "producers", len(found), "took", time.Since(start))
	}
	return nil
}

// ProducerData is a record's ProtocolData for a Kafka producer: id, epoch,
// the record's sequence, big-endian, and a flags byte whose bit 0 marks the
// last record of its batch (docs/kafka.md). The producer state is rebuilt
// from it after a start. The mark is what lets a leader
// replicate a batch whole: a follower's fetch ends only after a record that
// ends its batch, so no new leader holds part of one. A negative id (no
// idempotent producer) has none.
func ProducerData(id int64, epoch int16, seq int32, last bool) []byte {
	if id < 0 {
		return nil
	}
	b := binary.BigEndian.AppendUint64(nil, uint64(id))
	b = binary.BigEndian.AppendUint16(b, uint16(epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(seq))
	var flags byte
	if last {
		flags |= flagBatchEnd
	}
	return append(b, flags)
}

// flagBatchEnd, in a record's producer flags: the last record of its batch.
const flagBatchEnd = 1

// parseProducerData reads a record's producer fields. A record stored
// before batches were marked has no flags byte (14 bytes): where its batch
// ends is unknown, and it counts as ending one, as every record did then.
func parseProducerData(b []byte) (pid int64, epoch int16, seq int32, ends bool, ok bool) {
	if len(b) != 14 && len(b) != 15 {
		return 0, 0, 0, false, false
	}
	ends = len(b) == 14 || b[14]&flagBatchEnd != 0
	return int64(binary.BigEndian.Uint64(b)), int16(binary.BigEndian.Uint16(b[8:])), int32(binary.BigEndian.Uint32(b[10:])), ends, true
}

// EndsBatch reports whether r is the last record of the produce batch it
// came in (a record without producer fields stands alone): replication
// ends a follower's fetch only after such a record (replica.NodeConfig's
// BatchEnd), as Kafka replicates whole batches.
func EndsBatch(r *record.Record) bool {
	_, _, _, ends, ok := parseProducerData(r.ProtocolData)
	return !ok || ends
}
