package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	"strata/bench"
	"strata/bench/load"
	"strata/internal/testsvc"
)

func report(b *testing.B, f bench.Figure) {
	bench.Must(b, "make bench (go test -bench Cluster ./cluster/e2e)", f)
}

// benchNodes is a cluster for benchmarks: n `strata serve` processes on
// one etcd prefix, each with the extra settings given. (The tests' cluster
// type is tied to *testing.T.)
type benchNodes struct {
	b     *testing.B
	etcd  string
	pfx   string
	nodes map[int32]*testsvc.Process
	dirs  map[int32]string // each node's data folder
}

func startNodes(b *testing.B, n int, sets ...string) *benchNodes {
	c := &benchNodes{b: b, etcd: testsvc.StartEtcd(b), pfx: "/" + testsvc.UniquePrefix(b), nodes: map[int32]*testsvc.Process{}, dirs: map[int32]string{}}
	for id := int32(1); id <= int32(n); id++ {
		c.dirs[id] = b.TempDir()
		c.nodes[id] = testsvc.StartProcess(b, strataBin, c.dirs[id], append([]string{
			"cluster.etcd_endpoints=" + c.etcd, "cluster.etcd_prefix=" + c.pfx, "cluster.session_ttl=" + sessionTTL.String(),
			"node.id=" + strconv.Itoa(int(id)), "tiering.enabled=false", "kafka.auto_create_topics=false"}, sets...)...)
	}
	return c
}

// ask sends Metadata for topic to exactly one node (a kgo client would
// pick any broker it knows, and answer from its cache).
func ask(addr, topic string) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return askWith(cl, topic)
}

func askWith(cl *kgo.Client, topic string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = []kmsg.MetadataRequestTopic{rt}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.MetadataResponse), nil
}

// shape is what one Metadata answer says about the cluster.
type shape struct {
	brokers    int
	controller int32
	leaders    []int32 // by partition; -1 leaderless
}

func shapeOf(md *kmsg.MetadataResponse) shape {
	s := shape{brokers: len(md.Brokers), controller: md.ControllerID}
	if len(md.Topics) == 1 {
		s.leaders = make([]int32, len(md.Topics[0].Partitions))
		for _, p := range md.Topics[0].Partitions {
			if int(p.Partition) < len(s.leaders) {
				s.leaders[p.Partition] = p.Leader
			}
		}
	}
	return s
}

// whole says every node is listed, a controller named and every
// partition led.
func (s shape) whole(nodes, partitions int) bool {
	return s.brokers == nodes && s.controller > 0 && len(s.leaders) == partitions && !slices.Contains(s.leaders, -1)
}

// waitShape polls node id's Metadata until ok holds and returns that answer.
func (c *benchNodes) waitShape(id int32, topic string, ok func(shape) bool) shape {
	c.b.Helper()
	deadline := time.Now().Add(sessionTTL + 30*time.Second)
	var last shape
	for time.Now().Before(deadline) {
		if md, err := ask(c.nodes[id].Kafka, topic); err == nil {
			if last = shapeOf(md); ok(last) {
				return last
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.b.Fatalf("metadata from node %d never reached the wanted state; last %+v", id, last)
	return shape{}
}

// scrape sums every sample of the named metrics on one node's /metrics.
func scrape(b *testing.B, admin string, names ...string) float64 {
	b.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if !slices.Contains(names, name) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			b.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return sum
}

// segments counts the segments of topic's shards on one node, as its
// admin API lists them (which first lets the catalog catch up with the
// engine's events, so every roll has been written by then).
func segments(b *testing.B, admin, topic string) int {
	b.Helper()
	resp, err := http.Get("http://" + admin + "/v1/shards")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var shards []struct {
		Shard    string `json:"shard"`
		Segments int    `json:"segments"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&shards); err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, s := range shards {
		if strings.HasPrefix(s.Shard, topic+"-") {
			n += s.Segments
		}
	}
	return n
}

// revisions counts etcd's write revisions under a prefix, from a watch:
// every transaction that changed a key there, whoever sent it and whether
// or not a metric counts it (committed offsets, registrations, catalog,
// placement). A lease keepalive changes no key.
type revisions struct {
	cli  *clientv3.Client
	mu   sync.Mutex
	seen map[int64]bool
	head int64 // the watch has reported everything up to here
}

func watchRevisions(b *testing.B, endpoint, pfx string) *revisions {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); cli.Close() })
	r := &revisions{cli: cli, seen: map[int64]bool{}}
	start, err := cli.Get(ctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	r.head = start.Header.Revision
	w := cli.Watch(clientv3.WithRequireLeader(ctx), pfx+"/", clientv3.WithPrefix(), clientv3.WithRev(r.head+1))
	go func() {
		for resp := range w {
			r.mu.Lock()
			for _, ev := range resp.Events {
				r.seen[ev.Kv.ModRevision] = true
			}
			r.head = max(r.head, resp.Header.Revision)
			r.mu.Unlock()
		}
	}()
	return r
}

// now returns etcd's current revision once the watch has caught up to it.
func (r *revisions) now(b *testing.B) int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := r.cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	rev := cur.Header.Revision
	for {
		r.mu.Lock()
		head := r.head
		r.mu.Unlock()
		if head >= rev {
			return rev
		}
		// Ask the watch to report its revision even if nothing under the
		// prefix changed (etcd 3.4 and later).
		if err := r.cli.RequestProgress(ctx); err != nil || ctx.Err() != nil {
			b.Fatalf("etcd watch stuck at revision %d, want %d: %v", head, rev, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// between counts the write revisions in (from, to].
func (r *revisions) between(from, to int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for rev := range r.seen {
		if rev > from && rev <= to {
			n++
		}
	}
	return n
}

// etcd writes per produced MB at steady state, on a 3-node cluster with
// 4 MiB segments so that partitions roll during the run: the writes the
// nodes count (catalog and placement transactions, from every node's
// /metrics) and the write revisions etcd itself shows under the cluster's
// prefix (anything else too: committed offsets, registrations), each beside
// the rolls of the same run. The design writes etcd on segment and topic
// events only, so writes ≈ rolls × a small constant, never one per produce
// request. Median of 3 runs of 96 MiB each after a warm-up.
func BenchmarkClusterEtcdWritesPerMB(b *testing.B) {
	const partitions, size, runs = 16, 1024, 3
	const records = 96 << 10 // 96 MiB of values per run
	ctx := context.Background()
	c := startNodes(b, 3, "segment.max_bytes=4MiB", "segment.roll_check_interval=1000")
	revs := watchRevisions(b, c.etcd, c.pfx)
	seed := c.nodes[1].Kafka
	topic := "steady"
	if err := load.CreateTopic(ctx, seed, topic, partitions, nil); err != nil {
		b.Fatal(err)
	}
	c.waitShape(2, topic, func(s shape) bool { return s.whole(3, partitions) })
	cl, err := kgo.NewClient(load.ClientOpts(seed)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	// Warm-up: the client learns every leader, every shard's first
	// segment exists and has rolled once, topic creation is behind us.
	if _, err := load.Produce(ctx, cl, topic, records/2, size, 0, nil); err != nil {
		b.Fatal(err)
	}

	counters := []string{"strata_catalog_etcd_writes_total", "strata_cluster_placement_writes_total"}
	type snap struct {
		segs   int
		writes float64
		rev    int64
	}
	take := func() snap {
		var s snap
		for _, n := range c.nodes {
			s.segs += segments(b, n.Admin, topic) // first: lets the catalog write every roll
			s.writes += scrape(b, n.Admin, counters...)
		}
		s.rev = revs.now(b)
		return s
	}
	var perMB, revsPerMB, rollsPerMB []float64
	for run := 0; run < runs; run++ {
		before := take()
		res, err := load.Produce(ctx, cl, topic, records, size, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		after := take()
		mb := float64(res.Bytes) / 1e6
		rolls := after.segs - before.segs
		writes := after.writes - before.writes
		changed := revs.between(before.rev, after.rev)
		b.Logf("run %d: %.1f MB, %d rolls, %.0f counted etcd writes, %d etcd revisions under the prefix", run, mb, rolls, writes, changed)
		if rolls == 0 {
			b.Fatalf("run %d: %.1f MB across %d partitions rolled no segment: the figure would say nothing", run, mb, partitions)
		}
		perMB = append(perMB, writes/mb)
		revsPerMB = append(revsPerMB, float64(changed)/mb)
		rollsPerMB = append(rollsPerMB, float64(rolls)/mb)
	}
	rolls := bench.Median(rollsPerMB)
	report(b, bench.Figure{Name: "cluster etcd writes per produced MB (catalog+placement counters), 3 nodes, 4MiB segments",
		Value: bench.Median(perMB), Unit: "writes/MB", Reference: "segment rolls per MB, same run", ReferenceValue: rolls,
		Target: "<= 1.00", Runs: runs})
	report(b, bench.Figure{Name: "cluster etcd revisions under its prefix per produced MB (every writer), 3 nodes",
		Value: bench.Median(revsPerMB), Unit: "writes/MB", Reference: "segment rolls per MB, same run", ReferenceValue: rolls,
		Target: "<= 1.00", Runs: runs})
}

// Failover as clients see it, on a 3-node cluster with a 2 s session TTL
// and 12 partitions: the time from a node's SIGKILL to Metadata from
// another node reporting every partition it led leaderless, and from the
// controller's SIGKILL to Metadata naming another controller; p50 and p99
// over 10 kills each, beside cluster.session_ttl: etcd expires a dead
// node's lease a TTL after its last keepalive, sent every third of the
// TTL, so between 2/3 of the TTL and the TTL after the kill, and Metadata
// follows once the controller has written the change. Each killed node is
// restarted and the cluster whole again before the next kill.
func BenchmarkClusterFailover(b *testing.B) {
	const partitions, kills = 12, 10
	c := startNodes(b, 3)
	topic := "failover"
	if err := load.CreateTopic(context.Background(), c.nodes[1].Kafka, topic, partitions, nil); err != nil {
		b.Fatal(err)
	}
	whole := func(s shape) bool { return s.whole(3, partitions) }
	var leaderless, elected []time.Duration
	for k := 0; k < 2*kills; k++ {
		s := c.waitShape(1+int32(k%3), topic, whole)
		killController := k%2 == 1
		victim := s.controller
		if !killController {
			for id := int32(1); id <= 3; id++ {
				if id != s.controller && slices.Contains(s.leaders, id) {
					victim = id
					break
				}
			}
		}
		var theirs []int
		for p, l := range s.leaders {
			if l == victim {
				theirs = append(theirs, p)
			}
		}
		if len(theirs) == 0 {
			b.Fatalf("node %d leads none of %v: its kill would measure nothing", victim, s.leaders)
		}
		watcher := victim%3 + 1
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.nodes[watcher].Kafka))
		if err != nil {
			b.Fatal(err)
		}

		t0 := time.Now()
		c.nodes[victim].Kill()
		var gone, next time.Duration
		for gone == 0 || (killController && next == 0) {
			if time.Since(t0) > sessionTTL+30*time.Second {
				b.Fatalf("kill %d of node %d: after %s node %d reports leaderless after %s, a new controller after %s",
					k, victim, time.Since(t0), watcher, gone, next)
			}
			md, err := askWith(cl, topic)
			if err != nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			now, s := time.Since(t0), shapeOf(md)
			if gone == 0 && len(s.leaders) == partitions && !slices.ContainsFunc(theirs, func(p int) bool { return s.leaders[p] != -1 }) {
				gone = now
			}
			if next == 0 && s.controller > 0 && s.controller != victim {
				next = now
			}
			time.Sleep(5 * time.Millisecond)
		}
		cl.Close()
		if killController {
			elected = append(elected, next)
		} else {
			leaderless = append(leaderless, gone)
		}
		if killController {
			b.Logf("kill %d: controller %d (led %d partitions): a new controller after %s, its partitions leaderless after %s",
				k, victim, len(theirs), next.Round(time.Millisecond), gone.Round(time.Millisecond))
		} else {
			b.Logf("kill %d: node %d (led %d partitions): leaderless after %s", k, victim, len(theirs), gone.Round(time.Millisecond))
		}
		c.nodes[victim].Restart()
	}
	ttl := bench.Ms(sessionTTL)
	for _, f := range []struct {
		what string
		ds   []time.Duration
	}{{"node SIGKILL to its partitions leaderless in Metadata", leaderless}, {"controller SIGKILL to a new controller in Metadata", elected}} {
		for _, p := range []float64{50, 99} {
			report(b, bench.Figure{Name: fmt.Sprintf("cluster %s, p%.0f", f.what, p), Value: bench.Ms(bench.Percentile(f.ds, p)),
				Unit: "ms", Reference: "cluster.session_ttl", ReferenceValue: ttl, Runs: len(f.ds)})
		}
	}
}

// Produce and consume through a 3-node cluster (16 partitions, replication
// factor 1, 1 KiB records, franz-go with acks=all: bench/load) beside one
// `strata serve` without cluster settings, started in the same benchmark
// with otherwise the same settings. The goal: the cluster's
// coordination costs no more than 10% on the same hardware. One untimed
// warm-up pass per side, then 5 runs alternating sides, medians.
func BenchmarkClusterProduceConsume(b *testing.B) {
	const partitions, records, size, runs = 16, 100_000, 1024, 5
	ctx := context.Background()
	single := testsvc.StartProcess(b, strataBin, b.TempDir(), "tiering.enabled=false", "kafka.auto_create_topics=false")
	c := startNodes(b, 3)
	sides := []struct {
		name string
		seed string
	}{{"single", single.Kafka}, {"cluster", c.nodes[1].Kafka}}
	rates := map[string]map[string][]float64{}
	for _, side := range sides {
		rates[side.name] = map[string][]float64{}
	}
	for run := -1; run < runs; run++ { // run -1: the warm-up
		for _, side := range sides {
			topic := fmt.Sprintf("pc-%d", run+1)
			if err := load.CreateTopic(ctx, side.seed, topic, partitions, nil); err != nil {
				b.Fatal(err)
			}
			cl, err := kgo.NewClient(load.ClientOpts(side.seed)...)
			if err != nil {
				b.Fatal(err)
			}
			prod, err := load.Produce(ctx, cl, topic, records, size, 0, nil)
			cl.Close()
			if err != nil {
				b.Fatalf("%s: %v", side.name, err)
			}
			cons, err := load.Consume(ctx, side.seed, topic, records, nil)
			if err != nil {
				b.Fatalf("%s: %v", side.name, err)
			}
			if cons.Records != records {
				b.Fatalf("%s: consumed %d records of %d produced", side.name, cons.Records, records)
			}
			b.Logf("run %d %s: produce %.0f rec/s, consume %.0f rec/s", run, side.name, prod.RecordsPerSec(), cons.RecordsPerSec())
			if run >= 0 {
				rates[side.name]["produce"] = append(rates[side.name]["produce"], prod.RecordsPerSec())
				rates[side.name]["consume"] = append(rates[side.name]["consume"], cons.RecordsPerSec())
			}
		}
	}
	report(b, bench.Figure{Name: "cluster produce 1KiB x16, acks=all, 3 nodes (rf 1)", Value: bench.Median(rates["cluster"]["produce"]),
		Unit: "rec/s", Reference: "one node, same run", ReferenceValue: bench.Median(rates["single"]["produce"]), Target: ">= 0.90", Runs: runs})
	report(b, bench.Figure{Name: "cluster consume from the start, 3 nodes (rf 1)", Value: bench.Median(rates["cluster"]["consume"]),
		Unit: "rec/s", Reference: "one node, same run", ReferenceValue: bench.Median(rates["single"]["consume"]), Target: ">= 0.90", Runs: runs})
}
