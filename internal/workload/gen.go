package workload

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Kind is an operation kind.
type Kind int

const (
	Create Kind = iota
	Delete
	Produce
	Fetch
	DeleteRecords
	Tier
	Kill    // SIGKILL and restart on the same data folder
	Restart // SIGTERM and restart
)

func (k Kind) String() string {
	return [...]string{"create", "delete", "produce", "fetch", "delete-records", "tier", "kill", "restart"}[k]
}

// Codec is a record batch compression codec, numbered as in Kafka.
type Codec int

const (
	None Codec = iota
	Gzip
	Snappy
	LZ4
	Zstd
)

func (c Codec) String() string { return [...]string{"none", "gzip", "snappy", "lz4", "zstd"}[c] }

// Op is one operation of the workload.
type Op struct {
	Kind       Kind
	Topic      string
	Partitions int32 // Create: how many
	Partition  int32 // Fetch, DeleteRecords
	Offset     int64 // Fetch: from; DeleteRecords: before
	MaxBytes   int32 // Fetch: the request's partition max bytes
	Records    []ProduceRec
	Codec      Codec
	Idempotent bool
}

func (o Op) String() string {
	switch o.Kind {
	case Create:
		return fmt.Sprintf("create %s partitions=%d", o.Topic, o.Partitions)
	case Delete:
		return "delete " + o.Topic
	case Produce:
		parts := map[int32]int{}
		size, over, old := 0, 0, 0
		for _, r := range o.Records {
			parts[r.Partition]++
			size += len(r.Rec.Value)
			if r.Oversize {
				over++
			}
			if r.Rec.Timestamp < time.Now().Add(-24*time.Hour).UnixMilli() {
				old++
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "produce %s %d records (%d value bytes) codec=%s idempotent=%v partitions=%v ids=%s..%s",
			o.Topic, len(o.Records), size, o.Codec, o.Idempotent, parts, o.Records[0].Rec.ID(), o.Records[len(o.Records)-1].Rec.ID())
		if over > 0 {
			b.WriteString(" OVER-LIMIT")
		}
		if old > 0 {
			fmt.Fprintf(&b, " old-timestamps=%d", old)
		}
		return b.String()
	case Fetch:
		return fmt.Sprintf("fetch %s/%d from %d max_bytes=%d", o.Topic, o.Partition, o.Offset, o.MaxBytes)
	case DeleteRecords:
		return fmt.Sprintf("delete-records %s/%d before %d", o.Topic, o.Partition, o.Offset)
	}
	return o.Kind.String()
}

// Names is the pool of topic names: small, so topics are re-created often,
// and with names whose shard names look alike ("wl-a-1" is a topic, and
// "wl-a" partition 1 is shard "wl-a-1").
var Names = []string{"wl-a", "wl-a-1", "wl.b", "wl_c"}

// Weights are the relative frequencies of the operation kinds.
type Weights map[Kind]int

// DefaultWeights: mostly produce and fetch; a kill or restart every few
// hundred operations.
var DefaultWeights = Weights{
	Create: 40, Delete: 25, Produce: 500, Fetch: 250, DeleteRecords: 30, Tier: 30, Kill: 3, Restart: 2,
}

// Gen draws operations from a seeded source. Each worker has its own Gen;
// with one worker the sequence of operations is a function of the seed and
// the service's answers.
type Gen struct {
	rng     *rand.Rand
	worker  int
	records int
	weights Weights
	kinds   []Kind
	// OldAge is how old an old timestamp is: past the service's retention.
	OldAge time.Duration
}

// NewGen returns worker's generator for seed.
func NewGen(seed uint64, worker int, w Weights) *Gen {
	g := &Gen{rng: rand.New(rand.NewPCG(seed, uint64(worker))), worker: worker, weights: w, OldAge: 48 * time.Hour}
	for k := Create; k <= Restart; k++ {
		if w[k] > 0 {
			g.kinds = append(g.kinds, k)
		}
	}
	return g
}

// Next draws the next operation given what the model holds now; now is the
// wall clock (ms), used for record timestamps.
func (g *Gen) Next(v View, now int64) Op {
	total := 0
	for _, k := range g.kinds {
		total += g.weights[k]
	}
	n := g.rng.IntN(total)
	kind := Produce
	for _, k := range g.kinds {
		if n < g.weights[k] {
			kind = k
			break
		}
		n -= g.weights[k]
	}
	// Operations on a topic need one; make one when there is none.
	needsTopic := kind == Produce || kind == Fetch || kind == DeleteRecords || kind == Delete
	if needsTopic && len(v.Live) == 0 {
		kind = Create
	}
	switch kind {
	case Create:
		// Mostly a free name; sometimes a live one, which must be refused.
		names := v.Free
		if len(names) == 0 || g.rng.IntN(10) == 0 {
			names = Names
		}
		return Op{Kind: Create, Topic: names[g.rng.IntN(len(names))], Partitions: 1 + g.rng.Int32N(4)}
	case Delete:
		return Op{Kind: Delete, Topic: v.Live[g.rng.IntN(len(v.Live))].Name}
	case Produce:
		return g.produce(v.Live[g.rng.IntN(len(v.Live))], now)
	case Fetch:
		t := v.Live[g.rng.IntN(len(v.Live))]
		p := g.rng.Int32N(t.Partitions)
		lo, hi := t.Low[p], t.Next[p]
		off := lo
		if hi > lo {
			off = lo + g.rng.Int64N(hi-lo+1)
		}
		maxBytes := []int32{1, 512, 64 << 10, 1 << 20}[g.rng.IntN(4)]
		return Op{Kind: Fetch, Topic: t.Name, Partition: p, Offset: off, MaxBytes: maxBytes}
	case DeleteRecords:
		t := v.Live[g.rng.IntN(len(v.Live))]
		p := g.rng.Int32N(t.Partitions)
		lo, hi := t.Low[p], t.Next[p]
		off := lo
		if hi > lo {
			// Usually a little, now and then everything.
			off = lo + 1 + g.rng.Int64N(min(hi-lo, 20))
			if g.rng.IntN(5) == 0 {
				off = hi
			}
		}
		return Op{Kind: DeleteRecords, Topic: t.Name, Partition: p, Offset: off}
	}
	return Op{Kind: kind}
}

// sizes are value sizes around the edges of varints, pages and batches.
var sizes = []int{0, 1, 2, 63, 64, 127, 128, 255, 256, 1023, 1024, 4095, 4096, 4097, 16383, 16384, 65535, 65536, 1<<20 - 1, 1 << 20, 1<<20 + 1}

func (g *Gen) produce(t TopicView, now int64) Op {
	op := Op{Kind: Produce, Topic: t.Name, Codec: Codec(g.rng.IntN(5)), Idempotent: g.rng.IntN(2) == 0}
	if g.rng.IntN(100) == 0 {
		return g.oversize(op, t, now)
	}
	n := 1 + g.rng.IntN(20)
	if g.rng.IntN(20) == 0 {
		n = 50 + g.rng.IntN(150)
	}
	// Timestamps: now, or old enough for retention to remove them (whole
	// operations, so some segments hold only old records), or ahead.
	ts := now
	switch g.rng.IntN(20) {
	case 0, 1:
		ts = now - g.OldAge.Milliseconds()
	case 2:
		ts = now + time.Hour.Milliseconds()
	}
	spread := g.rng.IntN(4) == 0 // records across partitions in one request
	p := g.rng.Int32N(t.Partitions)
	for i := 0; i < n; i++ {
		if spread {
			p = g.rng.Int32N(t.Partitions)
		}
		op.Records = append(op.Records, ProduceRec{Partition: p, Rec: g.record(ts + int64(i))})
	}
	return op
}

func (g *Gen) nextID() string {
	g.records++
	return fmt.Sprintf("w%d-%d", g.worker, g.records)
}

func (g *Gen) record(ts int64) Rec {
	r := Rec{Timestamp: ts, Headers: []Header{{IDHeader, []byte(g.nextID())}}}
	switch g.rng.IntN(10) {
	case 0, 1:
		// null key
	case 2:
		r.Key = []byte{}
	default:
		r.Key = g.bytes(1 + g.rng.IntN(40))
	}
	var size int
	switch x := g.rng.IntN(100); {
	case x < 15:
		size = sizes[g.rng.IntN(len(sizes))]
	case x < 55:
		size = g.rng.IntN(100)
	case x < 97:
		size = 100 + g.rng.IntN(4000)
	default:
		size = 4096 + g.rng.IntN(28<<10)
	}
	if g.rng.IntN(30) == 0 {
		r.Value = nil // a tombstone
	} else {
		r.Value = g.bytes(size)
	}
	for range g.rng.IntN(4) {
		h := Header{Key: fmt.Sprintf("h%d", g.rng.IntN(100))}
		if g.rng.IntN(5) > 0 {
			h.Value = g.bytes(g.rng.IntN(30))
		}
		r.Headers = append(r.Headers, h)
	}
	return r
}

// bytes is n bytes, either random or compressible (a repeated short run),
// so codecs see both.
func (g *Gen) bytes(n int) []byte {
	b := make([]byte, n)
	if g.rng.IntN(2) == 0 {
		for i := range b {
			b[i] = byte(g.rng.Uint32())
		}
		return b
	}
	run := 1 + g.rng.IntN(16)
	for i := range b {
		b[i] = byte('a' + i%run)
	}
	return b
}

// oversize is one record over the broker's limits, alone in its request and
// compressed (so the request stays small): either its batch inflates past
// MaxBatchInflated, or the batch fits and the record does not fit the
// engine's record.MaxSize.
func (g *Gen) oversize(op Op, t TopicView, now int64) Op {
	op.Codec = Codec(1 + g.rng.IntN(4))
	r := Rec{Timestamp: now, Headers: []Header{{IDHeader, []byte(g.nextID())}}}
	if g.rng.IntN(2) == 0 {
		r.Value = make([]byte, MaxBatchInflated+g.rng.IntN(64<<10))
	} else {
		// The largest value whose batch still inflates within the limit,
		// less a little: the engine's record (framing, metadata, producer
		// data) is then over its MaxSize.
		r.Value = make([]byte, MaxBatchInflated-InflatedSize(&Rec{Timestamp: now, Headers: r.Headers, Value: []byte{}}))
		r.Value = r.Value[:len(r.Value)-g.rng.IntN(8)]
		for InflatedSize(&r) > MaxBatchInflated {
			r.Value = r.Value[:len(r.Value)-1]
		}
	}
	op.Records = []ProduceRec{{Partition: g.rng.Int32N(t.Partitions), Rec: r, Oversize: OverLimit(&r, op.Idempotent)}}
	return op
}
