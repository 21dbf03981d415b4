// Package replicatest runs replication in one process: several
// replica.Nodes, each on its own segment engine in a folder of its own,
// over an in-memory transport (Net), a fake of the cluster's partition
// records with compare-and-swap (Meta) and a fake clock (Clock). A test,
// or a datadriven script (docs/testing.md), says which fetch is answered
// when, when time passes, who leads, and which node dies; it then reads
// the logs and high watermarks as a user would. The nodes run the same
// code as in a cluster: Node.Run, its followers and fetchers, its seals.
package replicatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/partition"
	"strata/replica"
)

// Config shapes a kit's nodes.
type Config struct {
	// FetchBytes bounds one fetch's records (replica.NodeConfig).
	FetchBytes int32
	// SegmentBytes rolls a node's segments at this size (segment engine's
	// MaxSegmentBytes; 0: 1 MiB).
	SegmentBytes int64
	// LagTimeMax is replica.lag.time.max.ms (0: 30s).
	LagTimeMax time.Duration
	// Log receives the nodes' logs (nil: discarded).
	Log *slog.Logger
}

// Cluster is a kit's nodes, their net, metadata and clock.
type Cluster struct {
	t     testing.TB
	cfg   Config
	Clock *Clock
	Meta  *Meta
	Net   *Net
	nodes map[int32]*Node
	dirs  int // folders made, for fresh ones after a wipe

	mu      sync.Mutex
	pending sync.WaitGroup // produces waiting for acks, deletes for the ISR
	results []string       // what they answered, in order of their ends
	trace   []string
}

// Node is one node: its engine and its replication, while it is up.
type Node struct {
	ID     int32
	Dir    string
	Engine *segment.Engine
	Repl   *replica.Node
	// Append is the node's leader append path, on the same gates as its
	// replication.
	Append *partition.Manager
	sealed int // seal events its engine delivered
	cancel context.CancelFunc
	done   chan struct{}
	c      *Cluster
	mu     sync.Mutex
}

// New makes a kit with nodes ids, all up.
func New(t testing.TB, cfg Config, ids ...int32) *Cluster {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = 1 << 20
	}
	c := &Cluster{t: t, cfg: cfg, Clock: NewClock(time.Unix(1_700_000_000, 0).UTC()), Meta: NewMeta(), nodes: map[int32]*Node{}}
	c.Net = NewNet(c.Clock)
	for _, id := range ids {
		c.nodes[id] = &Node{ID: id, c: c}
		c.Start(id, true)
	}
	t.Cleanup(c.Close)
	return c
}

// Node is node id (up or not).
func (c *Cluster) Node(id int32) *Node {
	n := c.nodes[id]
	if n == nil {
		c.t.Fatalf("no node %d", id)
	}
	return n
}

// IDs lists the nodes, in order.
func (c *Cluster) IDs() []int32 {
	return slices.Sorted(maps.Keys(c.nodes))
}

// BatchEnd is the kit's replica.NodeConfig.BatchEnd: a record whose
// protocol data is "more" is followed by more of its produce batch.
func BatchEnd(r *record.Record) bool {
	return string(r.ProtocolData) != "more" && partition.EndsBatch(r)
}

// Start brings node id up: its engine opened on its folder (a new, empty
// one if fresh, as a replaced disk is), its replication running, its lease
// taken. The shards of the partitions it is a replica of are made if its
// folder lacks them, as cluster.KeepShards does.
func (c *Cluster) Start(id int32, fresh bool) {
	n := c.Node(id)
	if n.Repl != nil {
		c.t.Fatalf("node %d is up", id)
	}
	if fresh || n.Dir == "" {
		c.dirs++
		n.Dir = filepath.Join(c.t.TempDir(), fmt.Sprintf("node%d-%d", id, c.dirs))
	}
	e, err := segment.Open(segment.Config{Dir: n.Dir, Workers: 2, MaxSegmentBytes: c.cfg.SegmentBytes, RollCheckInterval: 1,
		Logger: c.cfg.Log, Now: c.Clock.Now, Events: segment.EventListener{
			SegmentSealed: func(s, _ segment.SegmentMeta) error {
				n.mu.Lock()
				r := n.Repl
				n.sealed++
				n.mu.Unlock()
				if r != nil {
					r.Sealed(s.Shard, s.No, replica.Seal{Start: s.StartOffset, Last: s.EndOffset, CRC: s.Checksum})
				}
				return nil
			}}})
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	for _, shard := range c.Meta.shardsOf(id) {
		if err := e.CreateShard(context.Background(), shard); err != nil && !errors.Is(err, store.ErrShardExists) {
			e.Close()
			c.t.Fatalf("node %d: creating %s: %v", id, shard, err)
		}
	}
	gates := partition.NewGates()
	r := replica.NewNode(replica.NodeConfig{Self: id, Store: e, Meta: c.Meta.For(id), LagTimeMax: c.cfg.LagTimeMax,
		FetchBytes: c.cfg.FetchBytes, Clock: c.Clock, Log: c.cfg.Log.With("node", id), BatchEnd: BatchEnd, Gates: gates})
	app := partition.New(e, partition.Config{Meta: c.Meta.appendView(id), Replication: r, Gates: gates, Log: c.cfg.Log.With("node", id)})
	ctx, cancel := context.WithCancel(context.Background())
	n.mu.Lock()
	n.Engine, n.Repl, n.Append, n.cancel, n.done = e, r, app, cancel, make(chan struct{})
	n.mu.Unlock()
	c.Net.Up(id, r)
	done := n.done
	go func() {
		defer close(done)
		r.Run(ctx, c.Net.For(id))
	}()
	c.Meta.SetLive(id, true)
	c.Settle()
}

// Kill stops node id as a crash does, but for what its engine had not
// synced: its lease ends, the net drops it, its replication stops, its
// engine closes.
func (c *Cluster) Kill(id int32) {
	n := c.Node(id)
	if n.Repl == nil {
		c.t.Fatalf("node %d is down", id)
	}
	c.Meta.SetLive(id, false)
	c.Net.Down(id)
	n.cancel()
	<-n.done
	n.mu.Lock()
	n.Repl, n.Append = nil, nil
	e := n.Engine
	n.Engine = nil
	n.mu.Unlock()
	if err := e.Close(); err != nil {
		c.t.Errorf("node %d: closing its engine: %v", id, err)
	}
	c.Settle()
}

// Close stops every node that is up and waits for what the kit started.
func (c *Cluster) Close() {
	for _, id := range c.IDs() {
		if c.nodes[id].Repl != nil {
			c.Kill(id)
		}
	}
	c.pending.Wait()
}

// CreatePartition records a partition and makes its shard on its
// replicas.
func (c *Cluster) CreatePartition(p Partition) {
	shard := store.ShardName(p.Topic, p.Partition)
	for _, id := range p.Replicas {
		if n := c.Node(id); n.Engine != nil {
			if err := n.Engine.CreateShard(context.Background(), shard); err != nil {
				c.t.Fatalf("node %d: %v", id, err)
			}
		}
	}
	c.Meta.Create(p)
	c.Settle()
}

// Produce appends records to shard on node id as one produce batch,
// through the leader's append path the Kafka front end calls
// (partition.Manager.Append: the gate, replication's check, the append,
// the leader's notice); with acksAll it waits for the ISR in the
// background, and its answer is among Results once it comes.
func (c *Cluster) Produce(id int32, shard string, values []string, acksAll bool) (string, error) {
	return c.ProduceAs(id, shard, values, acksAll, nil)
}

// Producer is an idempotent producer's batch as ProduceAs sends it.
type Producer struct {
	ID    int64
	Epoch int16
	Seq   int32 // the batch's first sequence
}

// ProduceAs is Produce from an idempotent producer (nil: none): its records
// carry the producer's fields as the Kafka front end stores them, and the
// answer names the base offset the batch got (a retry: its first one).
func (c *Cluster) ProduceAs(id int32, shard string, values []string, acksAll bool, prod *Producer) (string, error) {
	n := c.Node(id)
	if n.Repl == nil {
		return "", fmt.Errorf("node %d is down", id)
	}
	p, ok := c.Meta.Get(shard)
	if !ok {
		return "", fmt.Errorf("no partition %s", shard)
	}
	recs := make([]record.Record, len(values))
	for i, v := range values {
		recs[i] = record.Record{Timestamp: c.Clock.Now().UnixMilli(), Value: []byte(v)}
		if i < len(values)-1 {
			recs[i].ProtocolData = []byte("more")
		}
		if prod != nil {
			recs[i].ProtocolData = partition.ProducerData(prod.ID, prod.Epoch, partition.SeqAdd(prod.Seq, int32(i)), i == len(values)-1)
		}
	}
	batch := partition.Batch{Records: recs}
	if prod != nil {
		batch.Producer = &partition.ProducerBatch{ID: prod.ID, Epoch: prod.Epoch, FirstSequence: prod.Seq, LastOffsetDelta: int32(len(recs) - 1)}
	}
	start, err := n.Engine.LogEnd(context.Background(), shard)
	if err != nil {
		return "", err
	}
	what := fmt.Sprintf("produce %s [%d, %d) on node %d", shard, start, start+uint64(len(recs)), id)
	acks := partition.AckLeader
	if acksAll {
		acks = partition.AckAll
	}
	app, eng := n.Append, n.Engine
	answered := make(chan error, 1)
	c.background(func(ctx context.Context) string {
		base, err := app.Append(ctx, partition.ID{Topic: p.Topic, Partition: p.Partition}, batch, acks, time.Minute)
		answered <- err
		if err != nil {
			return fmt.Sprintf("%s: %v", what, err)
		}
		if prod != nil {
			return fmt.Sprintf("%s: OK at base %d", what, base)
		}
		return what + ": OK"
	})
	if !acksAll {
		<-answered
		// The answer comes before background records its line: wait for
		// the line, which may not be the last one recorded.
		for out := ""; ; runtime.Gosched() {
			c.mu.Lock()
			for i, r := range c.results {
				if strings.HasPrefix(r, what+":") {
					out = r
					c.results = append(c.results[:i], c.results[i+1:]...)
					break
				}
			}
			c.mu.Unlock()
			if out != "" {
				c.Settle()
				return out, nil
			}
		}
	}
	// The append is made before the wait for acks: the command returns
	// once it is in the leader's log, or refused.
	var refused error
	c.until("the append", func() bool {
		select {
		case refused = <-answered:
			return true
		default:
		}
		end, _ := eng.LogEnd(context.Background(), shard)
		return end >= start+uint64(len(recs))
	})
	if refused != nil {
		c.Settle()
		c.mu.Lock()
		c.results = slices.DeleteFunc(c.results, func(r string) bool { return strings.HasPrefix(r, what+":") })
		c.mu.Unlock()
		return "", refused
	}
	c.Settle()
	return what + ": appended", nil
}

// DeleteRecords deletes shard's records below offset on node id, its
// leader, and waits in the background for its ISR to have deleted them
// too (replica.Node.AwaitLogStart), as Kafka's DeleteRecords answers.
func (c *Cluster) DeleteRecords(id int32, shard string, offset uint64) error {
	n := c.Node(id)
	if n.Repl == nil || !n.Repl.Leads(shard) {
		return fmt.Errorf("node %d does not lead %s", id, shard)
	}
	if err := n.Engine.DeleteBefore(context.Background(), shard, offset); err != nil {
		return err
	}
	repl := n.Repl
	c.background(func(ctx context.Context) string {
		what := fmt.Sprintf("delete %s below %d on node %d", shard, offset, id)
		if err := repl.AwaitLogStart(ctx, shard, int64(offset)); err != nil {
			return fmt.Sprintf("%s: %v", what, err)
		}
		return what + ": ok"
	})
	c.Settle()
	return nil
}

func (c *Cluster) background(f func(ctx context.Context) string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c.pending.Add(1)
	go func() {
		defer c.pending.Done()
		defer cancel()
		r := f(ctx)
		c.mu.Lock()
		c.results = append(c.results, r)
		c.mu.Unlock()
	}()
}

// Results returns the answers that came since the last call, sorted:
// those that come together (a leader deposed answers all its waiting
// produces) come in any order.
func (c *Cluster) Results() []string {
	c.Settle()
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.results
	c.results = nil
	slices.Sort(r)
	return r
}

// Deliver answers the first fetch waiting from node from (to any node if
// from < 0), waits until the nodes have taken it, and returns the trace
// of the fetch, or "" if none was waiting.
func (c *Cluster) Deliver(from int32) string {
	call, ans := c.deliver(from)
	if call == nil {
		return ""
	}
	return describe(call, ans)
}

func (c *Cluster) deliver(from int32) (*Call, []replica.FetchAnswer) {
	for _, call := range c.Net.Waiting() {
		if from < 0 || call.From == from {
			return c.deliverCall(call)
		}
	}
	return nil, nil
}

func (c *Cluster) deliverCall(call *Call) (*Call, []replica.FetchAnswer) {
	{
		waits := c.Clock.Waiting()
		ans := c.Net.Deliver(call)
		if ans == nil {
			return nil, nil // it left the net meanwhile
		}
		// The sender takes the answer, then fetches again or backs off.
		c.until(fmt.Sprintf("node %d to take the answer", call.From), func() bool {
			return c.latest(call.From) > call.seq || c.Clock.Waiting() > waits || c.nodes[call.From].Repl == nil
		})
		c.Settle()
		return call, ans
	}
}

// latest is the newest fetch waiting from node, by when it was sent (0:
// none).
func (c *Cluster) latest(node int32) int {
	c.Net.mu.Lock()
	defer c.Net.mu.Unlock()
	k := 0
	for _, call := range c.Net.calls {
		if call.From == node {
			k = max(k, call.seq)
		}
	}
	return k
}

// Stabilize delivers the waiting fetches, each sender's oldest in turn,
// round after round, until a round brings nothing: no records, no probe
// answered, no change to any node's log, high watermark or log start or to
// the metadata. It returns the trace. The fetches the last round left
// waiting stay, as long polls do.
func (c *Cluster) Stabilize() string {
	var b strings.Builder
	for range 100 {
		before := c.state()
		var senders []int32
		for _, call := range c.Net.Waiting() {
			if !slices.Contains(senders, call.From) {
				senders = append(senders, call.From)
			}
		}
		news := false
		for _, s := range senders {
			call, ans := c.deliver(s)
			if call == nil {
				continue
			}
			b.WriteString(describe(call, ans))
			for i, a := range ans {
				news = news || call.Reqs[i].Probe || len(a.Records) > 0
			}
		}
		if !news && c.state() == before {
			return b.String()
		}
	}
	c.t.Fatalf("no stable state after 100 rounds of fetches:\n%s", b.String())
	return ""
}

// Tick moves the clock on by d, in steps of step. After each, the long
// polls that have ended are answered, as their leaders answer them once
// their wait is over, and the nodes settle. It returns the trace of the
// answers that brought records, errors or probes, and how many idle long
// polls were answered.
func (c *Cluster) Tick(d, step time.Duration) string {
	var b strings.Builder
	idles := 0
	for left := d; left > 0; left -= step {
		c.Clock.Advance(min(step, left))
		c.Settle()
		now := c.Clock.Now()
		for _, call := range c.Net.Waiting() {
			if call.due.After(now) {
				continue
			}
			if call, ans := c.deliverCall(call); call != nil {
				if idle(call, ans) {
					idles++
				} else {
					b.WriteString(describe(call, ans))
				}
			}
		}
	}
	if idles > 0 {
		fmt.Fprintf(&b, "(%d idle long polls answered)\n", idles)
	}
	return b.String()
}

// state is what the nodes hold and the metadata says, as a string to
// compare: every shard's log start, high watermark and log end on every
// node that is up, and the metadata's version.
func (c *Cluster) state() string {
	var b strings.Builder
	v, reads := c.Meta.state()
	fmt.Fprintf(&b, "meta %d %v;", v, reads)
	for _, id := range c.IDs() {
		n := c.nodes[id]
		n.mu.Lock()
		e, sealed := n.Engine, n.sealed
		n.mu.Unlock()
		if e == nil {
			continue
		}
		fmt.Fprintf(&b, "node %d sealed %d:", id, sealed)
		shards, _ := e.Shards(context.Background())
		slices.Sort(shards)
		for _, s := range shards {
			low, hw, _ := e.Watermarks(context.Background(), s)
			end, _ := e.LogEnd(context.Background(), s)
			fmt.Fprintf(&b, " %s %d %d %d", s, low, hw, end)
		}
		b.WriteString(";")
	}
	return b.String()
}

// Settle waits until the nodes' goroutines have done what they can do
// without a fetch answered or the clock moved: the metadata's changes
// reconciled, ISR writes and seal records made. It watches what they
// leave (the state, the fetches waiting, the clock's waits, the
// goroutines) until nothing has moved for 30 polls a millisecond apart:
// the nodes' goroutines are not the kit's to step, so this is the one
// wait on real time.
func (c *Cluster) Settle() {
	fingerprint := func() string {
		var b strings.Builder
		b.WriteString(c.state())
		for _, call := range c.Net.Waiting() {
			fmt.Fprintf(&b, " call %d>%d#%d", call.From, call.To, call.seq)
		}
		c.mu.Lock()
		fmt.Fprintf(&b, " clock %d results %d goroutines %d", c.Clock.Waiting(), len(c.results), runtime.NumGoroutine())
		c.mu.Unlock()
		return b.String()
	}
	v, _ := c.Meta.state()
	c.until("the nodes to read the metadata", func() bool {
		_, reads := c.Meta.state()
		for _, id := range c.IDs() {
			if c.nodes[id].Repl != nil && reads[id] < v {
				return false
			}
		}
		return true
	})
	last, quiet := fingerprint(), 0
	c.until("the nodes to settle", func() bool {
		if f := fingerprint(); f != last {
			last, quiet = f, 0
			return false
		}
		if quiet++; quiet < 30 {
			return false
		}
		if othersBusy() {
			quiet = 0
			return false
		}
		return true
	})
}

// othersBusy says whether a goroutine other than the caller is running,
// waiting for a CPU or in a system call (an fsync): on a loaded machine a
// node's goroutine can wait for a CPU longer than the quiet polls last, and
// nothing it leaves would have moved yet.
func othersBusy() bool {
	buf := make([]byte, 1<<20)
	dump := buf[:runtime.Stack(buf, true)]
	busy := 0
	for _, l := range bytes.Split(dump, []byte("\n")) {
		if bytes.HasPrefix(l, []byte("goroutine ")) &&
			(bytes.Contains(l, []byte("[running")) || bytes.Contains(l, []byte("[runnable")) || bytes.Contains(l, []byte("[syscall"))) {
			busy++
		}
	}
	return busy > 1 // the caller is running
}

// until polls cond, a millisecond apart, for up to 20 seconds.
func (c *Cluster) until(what string, cond func() bool) {
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			c.t.Fatalf("waited 20s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Log is shard's log on node id as a user reads it: the log start, the
// high watermark, the log end and every record's value ("|" ends a
// produce batch).
func (c *Cluster) Log(id int32, shard string) string {
	n := c.Node(id)
	if n.Engine == nil {
		return fmt.Sprintf("node %d: down", id)
	}
	ctx := context.Background()
	low, hw, err := n.Engine.Watermarks(ctx, shard)
	if err != nil {
		return fmt.Sprintf("node %d: %v", id, err)
	}
	end, _ := n.Engine.LogEnd(ctx, shard)
	var b strings.Builder
	fmt.Fprintf(&b, "node %d: start=%d hw=%d end=%d", id, low, hw, end)
	for off := low; off < end; {
		recs, err := n.Engine.ReadToLogEnd(ctx, shard, off, store.Budget{MaxBytes: 1 << 20})
		if err != nil || len(recs) == 0 {
			fmt.Fprintf(&b, " (read at %d: %v)", off, err)
			break
		}
		for i := range recs {
			fmt.Fprintf(&b, " %s", recs[i].Value)
			if BatchEnd(&recs[i]) {
				b.WriteString("|")
			}
		}
		off = recs[len(recs)-1].Offset + 1
	}
	return b.String()
}
