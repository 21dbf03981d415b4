package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"strata/bench"
	"strata/bench/load"
	"strata/engine/store"
)

// The replication benchmarks (issue #13) run on three `strata serve`
// processes on one etcd, like the cluster's, each figure beside the peer or
// limit it is judged against, measured in the same run.

func reportRepl(b *testing.B, f bench.Figure) {
	bench.Must(b, "make bench (go test -bench Replicated ./cluster/e2e)", f)
}

// replState is one node's Metadata answer about a topic: each partition's
// leader, leader epoch and ISR.
type replState struct {
	leader map[int32]int32
	epoch  map[int32]int32
	isr    map[int32][]int32
}

func (c *benchNodes) replState(id int32, topic string) (replState, error) {
	md, err := ask(c.nodes[id].Kafka, topic)
	if err != nil {
		return replState{}, err
	}
	if len(md.Topics) != 1 || md.Topics[0].ErrorCode != 0 {
		return replState{}, fmt.Errorf("metadata of %s from node %d: %+v", topic, id, md.Topics)
	}
	s := replState{leader: map[int32]int32{}, epoch: map[int32]int32{}, isr: map[int32][]int32{}}
	for _, p := range md.Topics[0].Partitions {
		s.leader[p.Partition], s.epoch[p.Partition] = p.Leader, p.LeaderEpoch
		s.isr[p.Partition] = slices.Sorted(slices.Values(p.ISR))
	}
	return s, nil
}

// waitISR waits until node id's Metadata shows each of topic's partitions
// led with n replicas in sync, and returns that answer.
func (c *benchNodes) waitISR(id int32, topic string, partitions, n int) replState {
	c.b.Helper()
	deadline := time.Now().Add(sessionTTL + 60*time.Second)
	var last replState
	var err error
	for time.Now().Before(deadline) {
		if last, err = c.replState(id, topic); err == nil && len(last.leader) == partitions {
			ok := true
			for p, l := range last.leader {
				ok = ok && l >= 0 && len(last.isr[p]) == n
			}
			if ok {
				return last
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.b.Fatalf("topic %s from node %d: leaders %v, ISRs %v (%v): want %d partitions led with %d in sync", topic, id, last.leader, last.isr, err, partitions, n)
	return replState{}
}

// seeds lists every node's Kafka address as they are now (a restarted
// node listens on a new port).
func (c *benchNodes) seeds() []string {
	var s []string
	for _, p := range c.nodes {
		s = append(s, p.Kafka)
	}
	return s
}

// shardInfo is one shard in a node's GET /v1/shards.
type shardInfo struct {
	Shard         string `json:"shard"`
	HighWatermark uint64 `json:"high_watermark"`
}

// highWatermark is shard's high watermark on node id, as its admin API
// says; a follower's is the leader's as far as it holds the records, so it
// reaches the leader's once the follower holds the leader's log end.
func (c *benchNodes) highWatermark(id int32, shard string) (uint64, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + c.nodes[id].Admin + "/v1/shards")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var shards []shardInfo
	if err := json.NewDecoder(resp.Body).Decode(&shards); err != nil {
		return 0, err
	}
	for _, s := range shards {
		if s.Shard == shard {
			return s.HighWatermark, nil
		}
	}
	return 0, fmt.Errorf("node %d holds no shard %s", id, shard)
}

// segmentHere is one segment in GET /v1/cluster's segments_here.
type segmentHere struct {
	State    string    `json:"state"`
	Start    uint64    `json:"start_offset"`
	End      uint64    `json:"end_offset"`
	Checksum uint32    `json:"checksum"`
	SealedAt time.Time `json:"sealed_at"`
}

// segmentsHere lists the segments node id holds of topic's partition.
func (c *benchNodes) segmentsHere(id int32, topic string, partition int32) ([]segmentHere, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + c.nodes[id].Admin + "/v1/cluster")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var a struct {
		Partitions []struct {
			Topic     string        `json:"topic"`
			Partition int32         `json:"partition"`
			Segments  []segmentHere `json:"segments_here"`
		} `json:"partitions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return nil, err
	}
	for _, p := range a.Partitions {
		if p.Topic == topic && p.Partition == partition {
			return p.Segments, nil
		}
	}
	return nil, nil
}

// Produce through a 3-node cluster with replication factor 3
// (min.insync.replicas 2) for acks=1, acks=all with the ISR and acks=all
// with `strata.acks.all=quorum`, beside replication factor 1 on the same
// cluster in the same run: 16 partitions, 1 KiB records, franz-go
// (bench/load, the peers' load; acks=1 without idempotence, which needs
// acks=all). One warm-up pass per side, then 3 runs of 100,000 records
// alternating sides, medians. Latency after, at one rate on every side
// (half the slowest side's median produce rate): p99 of 20,000 records per
// run, median of 3 runs.
func BenchmarkReplicatedProduce(b *testing.B) {
	const partitions, records, latRecords, size, runs = 16, 100_000, 20_000, 1024, 3
	ctx := context.Background()
	c := startNodes(b, 3)
	seed := c.nodes[1].Kafka
	two, quorum := "2", "quorum"
	sides := []struct {
		name    string
		rf      int
		configs map[string]*string
		opts    []kgo.Opt
	}{
		{"rf 1, acks=all", 1, nil, nil},
		{"rf 3, acks=1", 3, map[string]*string{"min.insync.replicas": &two}, []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}},
		{"rf 3, acks=all (ISR)", 3, map[string]*string{"min.insync.replicas": &two}, nil},
		{"rf 3, acks=all (quorum)", 3, map[string]*string{"min.insync.replicas": &two, "strata.acks.all": &quorum}, nil},
	}
	topics := make([]string, len(sides))
	clients := make([]*kgo.Client, len(sides))
	for i, side := range sides {
		topics[i] = fmt.Sprintf("rp-%d", i)
		if err := load.CreateReplicatedTopic(ctx, seed, topics[i], partitions, side.rf, side.configs); err != nil {
			b.Fatal(err)
		}
		c.waitISR(2, topics[i], partitions, side.rf)
		cl, err := kgo.NewClient(append(load.ClientOpts(seed), side.opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		clients[i] = cl
	}
	// whole logs a run in which a follower left the ISR: acks=all would
	// have waited for fewer replicas than the figure says.
	whole := func(i int, what string) {
		st, err := c.replState(1, topics[i])
		if err != nil {
			b.Fatal(err)
		}
		for p, isr := range st.isr {
			if len(isr) != sides[i].rf {
				b.Logf("%s %s: partition %d's ISR is %v after the run", sides[i].name, what, p, isr)
			}
		}
	}
	// A pass that crawls fails the benchmark, naming its side, rather than
	// holding `make bench` for an hour.
	pass := func(i, n int, rate float64) (load.Result, error) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		return load.Produce(ctx, clients[i], topics[i], n, size, rate, nil)
	}
	rates := make([][]float64, len(sides))
	for run := -1; run < runs; run++ { // run -1: the warm-up
		for i, side := range sides {
			res, err := pass(i, records, 0)
			if err != nil {
				b.Fatalf("%s: %v", side.name, err)
			}
			whole(i, fmt.Sprintf("run %d", run))
			b.Logf("run %d %s: produce %.0f rec/s", run, side.name, res.RecordsPerSec())
			if run >= 0 {
				rates[i] = append(rates[i], res.RecordsPerSec())
			}
		}
	}
	rate := 0.0
	for i := range sides {
		if m := bench.Median(rates[i]); rate == 0 || m < rate {
			rate = m
		}
	}
	rate /= 2
	p99s := make([][]float64, len(sides))
	for run := 0; run < runs; run++ {
		for i, side := range sides {
			res, err := pass(i, latRecords, rate)
			if err != nil {
				b.Fatalf("%s at %.0f rec/s: %v", side.name, rate, err)
			}
			whole(i, fmt.Sprintf("latency run %d", run))
			p50, p99 := bench.Percentile(res.Latencies, 50), bench.Percentile(res.Latencies, 99)
			b.Logf("latency run %d %s at %.0f rec/s: p50 %s, p99 %s", run, side.name, rate, p50, p99)
			p99s[i] = append(p99s[i], bench.Ms(p99))
		}
	}
	ref := sides[0].name + ", same cluster and run"
	for i := 1; i < len(sides); i++ {
		reportRepl(b, bench.Figure{Name: fmt.Sprintf("replicated produce 1KiB x16, %s, 3 nodes", sides[i].name),
			Value: bench.Median(rates[i]), Unit: "rec/s", Reference: ref, ReferenceValue: bench.Median(rates[0]), Runs: runs})
	}
	for i := 1; i < len(sides); i++ {
		reportRepl(b, bench.Figure{Name: fmt.Sprintf("replicated produce p99 at %.0f rec/s, %s, 3 nodes", rate, sides[i].name),
			Value: bench.Median(p99s[i]), Unit: "ms", Reference: ref, ReferenceValue: bench.Median(p99s[0]), Runs: runs})
	}
}

// send produces one record to topic's partition p and waits for its
// acknowledgement.
func send(cl *kgo.Client, topic string, p int32, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), sessionTTL+30*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(value)}).FirstErr()
}

// Failover with replication, as a producer sees it: on 3 nodes, 3
// partitions with replication factor 3 and min.insync.replicas 2, the
// leader of one partition is SIGKILLed, and the time runs from the kill to
// the first acks=all write (idempotent, franz-go) that its successor
// acknowledges; p50 and p99 over 20 kills, beside cluster.session_ttl: the
// dead leader's lease expires between 2/3 of the TTL and the TTL after the
// kill, then the controller elects a follower from the ISR, which must
// reach the high watermark with the other follower before it acknowledges.
// The producer re-asks for metadata every 50 ms and retries every 10 ms, so
// the figure is the cluster's, not the client's backoff. Each write is sent
// after the kill, so no answer from the dead leader can count. The killed
// node restarts and every ISR is whole again before the next kill. At the
// end every acknowledged record is read back, each once.
func BenchmarkReplicatedFailover(b *testing.B) {
	const partitions, kills = 3, 20
	c := startNodes(b, 3, "cluster.replica_lag_time_max=2s")
	topic := "rfo"
	two := "2"
	if err := load.CreateReplicatedTopic(context.Background(), c.nodes[1].Kafka, topic, partitions, 3, map[string]*string{"min.insync.replicas": &two}); err != nil {
		b.Fatal(err)
	}
	var acked []string
	var took []time.Duration
	for k := 0; k < kills; k++ {
		p := int32(k % partitions)
		st := c.waitISR(int32(k%3)+1, topic, partitions, 3)
		victim := st.leader[p]
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MetadataMinAge(50*time.Millisecond),
			kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
		if err != nil {
			b.Fatal(err)
		}
		// The client knows the leader and the partition takes writes.
		v := fmt.Sprintf("k%d-before", k)
		if err := send(cl, topic, p, v); err != nil {
			b.Fatalf("kill %d: a write to partition %d before the kill: %v", k, p, err)
		}
		acked = append(acked, v)

		t0 := time.Now()
		c.nodes[victim].Kill()
		var d time.Duration
		for i := 0; d == 0; i++ {
			if time.Since(t0) > sessionTTL+30*time.Second {
				b.Fatalf("kill %d: no write to partition %d acknowledged %s after node %d's SIGKILL", k, p, time.Since(t0), victim)
			}
			v := fmt.Sprintf("k%d-%d", k, i)
			if err := send(cl, topic, p, v); err != nil {
				b.Logf("kill %d: write %s: %v", k, v, err)
				continue
			}
			d = time.Since(t0)
			acked = append(acked, v)
		}
		cl.Close()
		took = append(took, d)
		now, _ := c.replState(victim%3+1, topic)
		b.Logf("kill %d: node %d, leader of partition %d at epoch %d: first write acknowledged after %s (leader now %d at epoch %d)",
			k, victim, p, st.epoch[p], d.Round(time.Millisecond), now.leader[p], now.epoch[p])
		c.nodes[victim].Restart()
	}
	c.waitISR(1, topic, partitions, 3)
	if lost, twice := readBack(b, c, topic, acked); len(lost) > 0 || len(twice) > 0 {
		b.Errorf("after %d kills, of %d acknowledged records %d were never read back (%v) and %d were read more than once (%v)",
			kills, len(acked), len(lost), lost, len(twice), twice)
	}
	ttl := bench.Ms(sessionTTL)
	for _, pc := range []float64{50, 99} {
		reportRepl(b, bench.Figure{Name: fmt.Sprintf("replicated leader SIGKILL to the first write its successor acknowledges (rf 3, min ISR 2), p%.0f", pc),
			Value: bench.Ms(bench.Percentile(took, pc)), Unit: "ms", Reference: "cluster.session_ttl", ReferenceValue: ttl, Runs: len(took)})
	}
}

// readBack reads topic from the start through every node until it has
// seen each of want or 30 s pass, and returns those it never saw and those
// it saw more than once.
func readBack(b *testing.B, c *benchNodes, topic string, want []string) (lost, twice []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	missing := func() []string {
		var m []string
		for _, v := range want {
			if seen[v] == 0 {
				m = append(m, v)
			}
		}
		return m
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	for v, n := range seen {
		if n > 1 {
			twice = append(twice, v)
		}
	}
	return missing(), twice
}

// Follower catch-up on 3 nodes, one partition with replication factor 3
// and min.insync.replicas 2: a follower is stopped (SIGTERM), 128 MiB of
// 1 KiB records are produced with acks=all, the follower is started again,
// and the time runs from its start (it serves) until it holds the leader's
// log end (its high watermark, GET /v1/shards, reaches the leader's) and
// until the leader's Metadata lists it in the ISR again. MB/s are the bytes
// its engine appended (strata_engine_appended_bytes_total) over that time,
// beside the disk's own rate for those bytes in the engine's chunks (its
// appended bytes per fsync, strata_engine_fsyncs_total), one file, measured
// in the follower's data folder right after (bench.DiskLimit). 3 runs,
// stopping each follower in turn, medians.
func BenchmarkReplicatedCatchUp(b *testing.B) {
	const runs, size = 3, 1024
	const records = 128 << 10 // 128 MiB of values while the follower is down
	ctx := context.Background()
	c := startNodes(b, 3, "cluster.replica_lag_time_max=2s")
	topic := "catchup"
	shard := store.ShardName(topic, 0)
	two := "2"
	if err := load.CreateReplicatedTopic(ctx, c.nodes[1].Kafka, topic, 1, 3, map[string]*string{"min.insync.replicas": &two}); err != nil {
		b.Fatal(err)
	}
	st := c.waitISR(1, topic, 1, 3)
	leader := st.leader[0]
	var followers []int32
	for id := range c.nodes {
		if id != leader {
			followers = append(followers, id)
		}
	}
	slices.Sort(followers)
	cl, err := kgo.NewClient(load.ClientOpts(c.nodes[leader].Kafka)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var toEnd, toISR, limits []float64
	var chunk int64
	for run := 0; run < runs; run++ {
		f := followers[run%len(followers)]
		c.nodes[f].Stop()
		c.waitISR(leader, topic, 1, 2)
		if _, err := load.Produce(ctx, cl, topic, records, size, 0, nil); err != nil {
			b.Fatal(err)
		}
		end, err := c.highWatermark(leader, shard)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		c.nodes[f].Restart()
		t1 := time.Now()
		var caught, inISR time.Duration
		for caught == 0 || inISR == 0 {
			if time.Since(t1) > 2*time.Minute {
				b.Fatalf("run %d: node %d not back after %s: holds the log end after %s, in the ISR after %s", run, f, time.Since(t1), caught, inISR)
			}
			if hw, err := c.highWatermark(f, shard); caught == 0 && err == nil && hw >= end {
				caught = time.Since(t1)
			}
			if s, err := c.replState(leader, topic); inISR == 0 && err == nil && slices.Contains(s.isr[0], f) {
				inISR = time.Since(t1)
			}
			time.Sleep(10 * time.Millisecond)
		}
		bytes := int64(scrape(b, c.nodes[f].Admin, "strata_engine_appended_bytes_total"))
		fsyncs := int64(scrape(b, c.nodes[f].Admin, "strata_engine_fsyncs_total"))
		if bytes == 0 {
			b.Fatalf("run %d: node %d caught up to offset %d having appended nothing", run, f, end)
		}
		chunk = bytes / max(1, fsyncs)
		limit, err := bench.DiskLimit(c.dirs[f], bytes, chunk, 1)
		if err != nil {
			b.Fatal(err)
		}
		mb := float64(bytes) / 1e6
		b.Logf("run %d: node %d started in %s, copied %.1f MB (%d fsyncs) to offset %d in %s, back in the ISR after %s; disk %.0f MB/s",
			run, f, t1.Sub(t0).Round(time.Millisecond), mb, fsyncs, end, caught.Round(time.Millisecond), inISR.Round(time.Millisecond), limit)
		toEnd = append(toEnd, mb/caught.Seconds())
		toISR = append(toISR, mb/inISR.Seconds())
		limits = append(limits, limit)
	}
	ref := fmt.Sprintf("disk, 1 file, %d KiB/fsync", chunk>>10)
	reportRepl(b, bench.Figure{Name: "replicated follower catch-up, 128MiB behind, to the leader's log end",
		Value: bench.Median(toEnd), Unit: "MB/s", Reference: ref, ReferenceValue: bench.Median(limits), Runs: runs})
	reportRepl(b, bench.Figure{Name: "replicated follower catch-up, 128MiB behind, to back in the ISR",
		Value: bench.Median(toISR), Unit: "MB/s", Reference: ref, ReferenceValue: bench.Median(limits), Runs: runs})
}

// Roll to sealed on every replica: on 3 nodes, one partition with
// replication factor 3 and 1 MiB segments (segment.bytes, rolls checked
// every 128 offsets) takes 4,000 records of 1 KiB a second for 10 s, while
// each node's GET /v1/cluster is polled every 10 ms. For each segment the
// leader seals, the time from its sealed_at on the leader to the first
// poll at which every replica lists a sealed segment with the same start,
// end and checksum; p50 and p99 over the run's rolls, beside
// cluster.replica_lag_time_max, the bound on how far an ISR follower lags.
// A follower seals its copy where it copies the first record of the
// leader's next segment (it rolls where the leader rolled), so this is the
// replication lag at a roll; seal agreement (a sealed record in etcd with
// the checksum and replica list) is not on main yet.
func BenchmarkReplicatedRollToSealed(b *testing.B) {
	const rate, seconds, size = 4000, 10, 1024
	const lag = 2 * time.Second
	ctx := context.Background()
	c := startNodes(b, 3, "cluster.replica_lag_time_max="+lag.String(), "segment.roll_check_interval=128")
	topic := "seal"
	two, mib := "2", "1048576"
	if err := load.CreateReplicatedTopic(ctx, c.nodes[1].Kafka, topic, 1, 3, map[string]*string{"min.insync.replicas": &two, "segment.bytes": &mib}); err != nil {
		b.Fatal(err)
	}
	leader := c.waitISR(1, topic, 1, 3).leader[0]

	type sealed struct {
		seg  segmentHere
		seen time.Time // the first poll that showed it sealed
	}
	var mu sync.Mutex
	held := map[int32]map[uint64]sealed{} // node → start offset → its sealed copy
	recorded := map[uint64]time.Time{}    // start offset → when its sealed/ record was first seen
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	sealKeys := fmt.Sprintf("%s/sealed/%s/%010d/", c.pfx, topic, 0)
	for id := range c.nodes {
		held[id] = map[uint64]sealed{}
	}
	poll := func() {
		for id := range c.nodes {
			segs, err := c.segmentsHere(id, topic, 0)
			now := time.Now()
			if err != nil {
				continue
			}
			mu.Lock()
			for _, s := range segs {
				if _, ok := held[id][s.Start]; !ok && s.State == "sealed" {
					held[id][s.Start] = sealed{s, now}
				}
			}
			mu.Unlock()
		}
		resp, err := cli.Get(ctx, sealKeys, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		now := time.Now()
		if err != nil {
			return
		}
		mu.Lock()
		for _, kv := range resp.Kvs {
			start, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), sealKeys), 10, 64)
			if _, ok := recorded[start]; err == nil && !ok {
				recorded[start] = now
			}
		}
		mu.Unlock()
	}
	// done says when each segment the leader sealed was first seen sealed
	// alike on every node and recorded sealed for the cluster in etcd (the
	// replicas' checksums compared), and which are not yet.
	done := func() (took []time.Duration, pending []uint64, differ []string) {
		mu.Lock()
		defer mu.Unlock()
		for start, l := range held[leader] {
			at := l.seg.SealedAt
			if at.IsZero() {
				at = l.seen
			}
			last, all := at, true
			for id := range c.nodes {
				s, ok := held[id][start]
				switch {
				case !ok:
					all = false
				case s.seg.Checksum != l.seg.Checksum || s.seg.End != l.seg.End:
					differ = append(differ, fmt.Sprintf("segment at %d: node %d holds [%d,%d) checksum %08x, leader %d [%d,%d) %08x",
						start, id, s.seg.Start, s.seg.End, s.seg.Checksum, leader, l.seg.Start, l.seg.End, l.seg.Checksum))
				case s.seen.After(last):
					last = s.seen
				}
			}
			if rec, ok := recorded[start]; !ok {
				all = false
			} else if rec.After(last) {
				last = rec
			}
			if all {
				took = append(took, last.Sub(at))
			} else {
				pending = append(pending, start)
			}
		}
		return took, pending, differ
	}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				poll()
			}
		}
	}()
	cl, err := kgo.NewClient(load.ClientOpts(c.nodes[leader].Kafka)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := load.Produce(ctx, cl, topic, rate*seconds, size, rate, nil); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	var pending []uint64
	var differ []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		took, pending, differ = done()
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
	}
	close(stop)
	<-polled
	sort.Slice(pending, func(i, j int) bool { return pending[i] < pending[j] })
	if len(differ) > 0 {
		b.Errorf("replicas' sealed segments differ from the leader's: %s", strings.Join(differ, "; "))
	}
	if len(pending) > 0 {
		b.Errorf("segments the leader sealed at offsets %v are not sealed on every replica and recorded in etcd 30 s after the last write", pending)
	}
	if len(took) < 20 {
		b.Fatalf("%d segments sealed everywhere: too few rolls for a p99", len(took))
	}
	mu.Lock()
	for start, l := range held[leader] {
		if l.seg.Checksum == 0 {
			b.Errorf("the leader's sealed segment at %d has no checksum: agreement on it would say nothing", start)
		}
	}
	b.Logf("%d segments sealed on all 3 replicas; slowest %s", len(took), slices.Max(took))
	mu.Unlock()
	for _, pc := range []float64{50, 99} {
		reportRepl(b, bench.Figure{Name: fmt.Sprintf("replicated roll to sealed for the cluster (all 3 copies alike, recorded in etcd; 1MiB segments, 4 MB/s), p%.0f", pc),
			Value: bench.Ms(bench.Percentile(took, pc)), Unit: "ms", Reference: "cluster.replica_lag_time_max", ReferenceValue: bench.Ms(lag), Runs: len(took)})
	}
}
