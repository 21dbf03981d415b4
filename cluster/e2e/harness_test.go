package e2e

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	stratacluster "strata/cluster"
	"strata/internal/testsvc"
	"strata/internal/workload/harness"
	"strata/peer"
)

// TestClusterHarness runs the randomized fault harness (docs/testing.md):
// three nodes on an etcd of the test's own, each behind proxies to its
// peers and to etcd, under a seeded schedule that mixes faults (the mix,
// internal/workload/harness) with client operations, and then checks the
// whole history: no acknowledged acks=all record lost, none stored twice,
// no two records at one offset, no deleted record served, every sealed
// segment tiered within a bound, every replica's sealed copies alike.
//
//	STRATA_HARNESS_SEED=N       replay seed N (the schedule is the seed's; timing is the machine's)
//	STRATA_HARNESS_TIME=60m     how long faults and operations run (default 2m; `make soak` runs SOAK_TIME)
//	STRATA_HARNESS_FAULTS=all   the fault mix: "default", "all", names, "-name" (harness.ParseFaults)
func TestClusterHarness(t *testing.T) {
	seed := harnessSeed(t)
	budget := 2 * time.Minute
	if s := os.Getenv("STRATA_HARNESS_TIME"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("STRATA_HARNESS_TIME=%q: %v", s, err)
		}
		budget = d
	}
	mix, err := harness.ParseFaults(os.Getenv("STRATA_HARNESS_FAULTS"))
	if err != nil {
		t.Fatalf("STRATA_HARNESS_FAULTS: %v", err)
	}
	t.Logf("cluster harness seed=%d time=%s faults=%v", seed, budget, mix)
	t.Logf("replay: STRATA_HARNESS_SEED=%d STRATA_HARNESS_TIME=%s STRATA_HARNESS_FAULTS=%s go test -count=1 -run 'TestClusterHarness$' ./cluster/e2e/",
		seed, budget, faultList(mix))
	sched := harness.Generate(harness.Config{Seed: seed, Nodes: 3, Duration: budget, Mix: mix, Topic: "main", Partitions: 3, Lease: sessionTTL})
	t.Logf("schedule: %d faults (%s), %d operations, quiet from %s", len(sched.Faults), sched.Summary(), len(sched.Ops), sched.Quiet)

	hc := newHarnessCluster(t, 3)
	hc.run(sched)
	hc.finish()
	vs := hc.h.Check()
	t.Logf("cluster harness seed=%d: %s", seed, hc.h.Stats())
	if len(vs) == 0 {
		if t.Failed() {
			t.Logf("timeline:\n  %s", strings.Join(hc.timeline(), "\n  "))
		}
		return
	}
	t.Errorf("cluster harness seed=%d: %d violations\n%s\ntimeline:\n  %s\nreplay: STRATA_HARNESS_SEED=%d STRATA_HARNESS_TIME=%s STRATA_HARNESS_FAULTS=%s",
		seed, len(vs), harness.Summarize(vs, 6), strings.Join(hc.timeline(), "\n  "), seed, budget, faultList(mix))
}

func harnessSeed(t *testing.T) uint64 {
	if s := os.Getenv("STRATA_HARNESS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STRATA_HARNESS_SEED=%q: %v", s, err)
		}
		return n
	}
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1
}

func faultList(mix []harness.Fault) string {
	if len(mix) == 0 {
		return "none"
	}
	var s []string
	for _, f := range mix {
		s = append(s, string(f))
	}
	return strings.Join(s, ",")
}

const (
	churnTopic = "churn"
	mainTopic  = "main"
	hGroup     = "harness"
	// How long, once the faults stop, every sealed segment has to be
	// tiered (docs/testing.md).
	tierBound = 90 * time.Second
	// The harness's etcd is small, so the etcd-quota fault fills it in
	// seconds; the nodes' own use of two minutes stays far below it.
	etcdQuota = 64 << 20
)

// harnessCluster is the nodes, their proxies, the etcd and the clients of
// one harness run. The fault goroutine alone starts and stops processes;
// everyone else reads their addresses through addrs, under mu.
type harnessCluster struct {
	t      *testing.T
	etcd   *etcdProc
	ecli   *clientv3.Client // the etcd-quota fault's, another writer's
	pfx    string
	shared string // the cold tier, one local folder for every node
	n      int
	procs  map[int32]*testsvc.Process
	sets   map[int32][]string
	kproxy map[int32]*netProxy
	eproxy map[int32]*netProxy
	start  time.Time
	h      *harness.History

	mu     sync.Mutex
	kafka  map[int32]string // node: its Kafka listener now
	admin  map[int32]string
	log    []string
	parts  int32 // the main topic's partition count
	inc    int   // the churn topic's incarnation
	churnW sync.RWMutex
	churnN atomic.Int64 // churn records not yet answered

	steady, large, acks1, adm *kgo.Client
	seq                       atomic.Int64
	commitOff                 atomic.Int64
	pw                        passwords
}

func newHarnessCluster(t *testing.T, n int) *harnessCluster {
	e := startEtcdWith(t, fmt.Sprintf("--quota-backend-bytes=%d", etcdQuota))
	hc := &harnessCluster{t: t, etcd: e, ecli: etcdClientTo(t, e.client), pfx: "/" + testsvc.UniquePrefix(t), shared: t.TempDir(), n: n,
		procs: map[int32]*testsvc.Process{}, sets: map[int32][]string{}, kproxy: map[int32]*netProxy{}, eproxy: map[int32]*netProxy{},
		kafka: map[int32]string{}, admin: map[int32]string{}, h: &harness.History{}, parts: 3, start: time.Now()}
	for id := int32(1); id <= int32(n); id++ {
		hc.kproxy[id], hc.eproxy[id] = newNetProxy(t), newNetProxy(t)
		hc.eproxy[id].setTarget(e.client)
	}
	sasl := harnessSASL(t, t.TempDir())
	for id := int32(1); id <= int32(n); id++ {
		hc.sets[id] = []string{"cluster.etcd_endpoints=" + hc.eproxy[id].addr(), "cluster.etcd_prefix=" + hc.pfx,
			"cluster.session_ttl=" + sessionTTL.String(), "node.id=" + strconv.Itoa(int(id)),
			"kafka.auto_create_topics=false", "node.advertised_kafka_addr=" + hc.kproxy[id].addr(),
			"cluster.replica_lag_time_max=2s", "segment.max_bytes=64KiB", "segment.roll_check_interval=5",
			"tiering.enabled=true", "tiering.schedule=@every 15s", "tiering.min_sealed_age=0s", "tiering.local_retention=0s",
			"tiering.replica_grace=5s", "cold.local.dir=" + hc.shared, fmt.Sprintf("cluster.etcd_quota_bytes=%d", etcdQuota)}
		hc.sets[id] = append(hc.sets[id], sasl...)
		hc.procs[id] = testsvc.StartProcess(t, strataBin, t.TempDir(), hc.sets[id]...)
		hc.published(id)
	}
	hc.adm = hc.client()
	hc.createTopic(mainTopic, 3)
	hc.createTopic(churnTopic, 2)
	hc.h.SetInc(mainTopic, 0)
	hc.h.SetInc(churnTopic, 0)
	hc.waitInSync(mainTopic, time.Minute)
	hc.waitInSync(churnTopic, time.Minute)
	produceOpts := func(more ...kgo.Opt) []kgo.Opt {
		return append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordDeliveryTimeout(20 * time.Second),
			kgo.MaxBufferedRecords(100000), kgo.ProduceRequestTimeout(10 * time.Second)}, more...)
	}
	// franz-go's producer is idempotent by default, with acks=all.
	hc.steady = hc.client(produceOpts(kgo.RequiredAcks(kgo.AllISRAcks()))...)
	hc.large = hc.client(produceOpts(kgo.RequiredAcks(kgo.AllISRAcks()))...)
	hc.acks1 = hc.client(produceOpts(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())...)
	return hc
}

// published makes node id's current addresses the ones clients dial.
func (hc *harnessCluster) published(id int32) {
	p := hc.procs[id]
	hc.mu.Lock()
	hc.kafka[id], hc.admin[id] = p.Kafka, p.Admin
	hc.mu.Unlock()
	hc.kproxy[id].setTarget(p.Kafka)
}

func (hc *harnessCluster) adminAddr(id int32) string {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.admin[id]
}

// client bootstraps from every node; it dials the nodes directly (each
// advertised proxy address mapped to the node behind it), so cuts between
// nodes leave the test's clients in touch with all of them.
func (hc *harnessCluster) client(opts ...kgo.Opt) *kgo.Client {
	var seeds []string
	for id := int32(1); id <= int32(hc.n); id++ {
		seeds = append(seeds, hc.kproxy[id].addr())
	}
	dial := kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		hc.mu.Lock()
		for id, p := range hc.kproxy {
			if p.addr() == host {
				host = hc.kafka[id]
				break
			}
		}
		hc.mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, host)
	})
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), dial, rootSASL()}, opts...)...)
	if err != nil {
		hc.t.Fatal(err)
	}
	hc.t.Cleanup(cl.Close)
	return cl
}

func (hc *harnessCluster) now() time.Duration { return time.Since(hc.start) }

// note adds a line to the run's timeline, which a failure prints.
func (hc *harnessCluster) note(format string, args ...any) {
	line := fmt.Sprintf("%7.1fs ", hc.now().Seconds()) + fmt.Sprintf(format, args...)
	hc.mu.Lock()
	hc.log = append(hc.log, line)
	hc.mu.Unlock()
}

func (hc *harnessCluster) timeline() []string {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return slices.Clone(hc.log)
}

func (hc *harnessCluster) createTopic(topic string, partitions int32) {
	two := "2"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := kadm.NewClient(hc.adm).CreateTopic(ctx, partitions, 3, map[string]*string{"min.insync.replicas": &two}, topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			hc.t.Fatalf("create topic %s: %v", topic, err)
		}
		time.Sleep(200 * time.Millisecond) // TOPIC_ALREADY_EXISTS while a deleted one is cleared, or a node restarting
	}
}

// partitionsOf asks the cluster for topic's leaders and ISRs.
func (hc *harnessCluster) partitionsOf(topic string) (leaders map[int32]int32, isr map[int32][]int32, err error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	md, err := req.RequestWith(ctx, hc.adm)
	if err != nil {
		return nil, nil, err
	}
	if len(md.Topics) != 1 {
		return nil, nil, fmt.Errorf("metadata names %d topics", len(md.Topics))
	}
	if err := kerr.ErrorForCode(md.Topics[0].ErrorCode); err != nil {
		return nil, nil, err
	}
	leaders, isr = map[int32]int32{}, map[int32][]int32{}
	for _, p := range md.Topics[0].Partitions {
		leaders[p.Partition], isr[p.Partition] = p.Leader, sorted32(p.ISR)
	}
	return leaders, isr, nil
}

// waitInSync waits until every partition of topic is led with every node
// in sync; it reports (not fails) when that does not come within d, so the
// checker still judges the history.
func (hc *harnessCluster) waitInSync(topic string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	var last string
	for {
		leaders, isr, err := hc.partitionsOf(topic)
		ok := err == nil && len(leaders) > 0
		for p, l := range leaders {
			ok = ok && l >= 0 && len(isr[p]) == hc.n
		}
		if ok {
			return true
		}
		last = fmt.Sprintf("leaders %v, ISRs %v, %v", leaders, isr, err)
		if time.Now().After(deadline) {
			hc.t.Errorf("%s: not every partition led with all %d in sync %s after asked: %s", topic, hc.n, d, last)
			hc.note("%s not in sync: %s", topic, last)
			return false
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// run plays the schedule: faults on one goroutine, operations on another,
// the steady producer on a third, until the last operation.
func (hc *harnessCluster) run(s harness.Schedule) {
	hc.start = time.Now()       // the schedule's clock
	hc.changePassword(1, false) // rotor's first password
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); hc.produceSteadily(quit) }()
	var faults sync.WaitGroup
	faults.Add(1)
	go func() {
		defer faults.Done()
		for _, st := range s.Faults {
			time.Sleep(time.Until(hc.start.Add(st.At)))
			hc.faultBegins()
			hc.fault(st)
			hc.faultEnds()
		}
		hc.healAll()
		hc.note("faults over (schedule quiet from %s)", s.Quiet)
	}()
	for _, op := range s.Ops {
		time.Sleep(time.Until(hc.start.Add(op.At)))
		hc.op(op)
	}
	faults.Wait()
	close(quit)
	wg.Wait()
	hc.note("load stopped")
}

// produceSteadily sends small idempotent acks=all records, about 100 a
// second, round the main topic's partitions and the churn topic's.
func (hc *harnessCluster) produceSteadily(quit chan struct{}) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-quit:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := hc.steady.Flush(ctx); err != nil {
				hc.note("steady producer: records unanswered 30s after the load stopped: %v", err)
			}
			return
		case <-tick.C:
		}
		if i%4 == 3 {
			hc.produceChurn(i)
			continue
		}
		hc.mu.Lock()
		p := int32(i) % hc.parts
		hc.mu.Unlock()
		hc.produceAsync(hc.steady, harness.Part{Topic: mainTopic, Partition: p}, fmt.Sprintf("s%07d", hc.seq.Add(1)), true, nil)
	}
}

func (hc *harnessCluster) produceChurn(i int) {
	// A record of one incarnation must not land in the next: recreate
	// waits for every churn record's answer before it deletes.
	// While one is under way, churn records are not sent at all.
	if !hc.churnW.TryRLock() {
		return
	}
	defer hc.churnW.RUnlock()
	hc.mu.Lock()
	inc := hc.inc
	hc.mu.Unlock()
	hc.churnN.Add(1)
	hc.produceAsync(hc.steady, harness.Part{Topic: churnTopic, Inc: inc, Partition: int32(i) % 2},
		fmt.Sprintf("c%d-%07d", inc, hc.seq.Add(1)), true, func() { hc.churnN.Add(-1) })
}

func (hc *harnessCluster) produceAsync(cl *kgo.Client, p harness.Part, v string, acksAll bool, done func()) {
	t0 := hc.now()
	cl.Produce(context.Background(), &kgo.Record{Topic: p.Topic, Partition: p.Partition, Value: []byte(v)}, func(r *kgo.Record, err error) {
		hc.h.AddProduced(harness.Produced{Part: p, Value: v, AcksAll: acksAll, OK: err == nil, Offset: r.Offset, T0: t0, T1: hc.now()})
		if done != nil {
			done()
		}
	})
}

// produceBatch sends n records to main-p in one ProduceSync (one batch, or
// a few at the client's batch size) and waits for their outcomes.
func (hc *harnessCluster) produceBatch(cl *kgo.Client, p int32, n int, acksAll bool, tag string) (ok int, firstErr error) {
	part := harness.Part{Topic: mainTopic, Partition: p}
	pad := strings.Repeat("x", 80)
	var recs []*kgo.Record
	for range n {
		recs = append(recs, &kgo.Record{Topic: mainTopic, Partition: p, Value: []byte(fmt.Sprintf("%s%07d-%s", tag, hc.seq.Add(1), pad))})
	}
	t0 := hc.now()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	res := cl.ProduceSync(ctx, recs...)
	t1 := hc.now()
	for _, r := range res {
		hc.h.AddProduced(harness.Produced{Part: part, Value: string(r.Record.Value), AcksAll: acksAll, OK: r.Err == nil, Offset: r.Record.Offset, T0: t0, T1: t1})
		if r.Err == nil {
			ok++
		} else if firstErr == nil {
			firstErr = r.Err
		}
	}
	return ok, firstErr
}

func (hc *harnessCluster) mainParts() int32 {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.parts
}

// op runs one client operation; failures are part of the history (a
// cluster under faults refuses things), not of the test's verdict.
func (hc *harnessCluster) op(o harness.Op) {
	p := o.Partition % hc.mainParts()
	switch o.Kind {
	case harness.ProduceLarge:
		if ok, err := hc.produceBatch(hc.large, p, o.Records, true, "L"); err != nil {
			hc.note("produce %d records acks=all to main-%d: %d acknowledged, %v", o.Records, p, ok, err)
		}
	case harness.ProduceAcks1:
		if ok, err := hc.produceBatch(hc.acks1, p, o.Records, false, "a"); err != nil {
			hc.note("produce %d records acks=1 to main-%d: %d acknowledged, %v", o.Records, p, ok, err)
		}
	case harness.Fetch:
		n, err := hc.fetch(harness.Part{Topic: mainTopic, Partition: p}, false, 5*time.Second)
		if err != nil {
			hc.note("fetch main-%d: %d records, %v", p, n, err)
		}
	case harness.DeleteRecords:
		hc.deleteRecords(p, o.Fraction)
	case harness.CreatePartitions:
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := kadm.NewClient(hc.adm).CreatePartitions(ctx, 1, mainTopic)
		if err == nil {
			err = resp.Error()
		}
		// Whether it took or not, the producers follow what the cluster
		// says, once their own metadata has it (a partition they do not
		// know of is refused before it is sent).
		for _, cl := range []*kgo.Client{hc.steady, hc.large, hc.acks1} {
			cl.ForceMetadataRefresh()
		}
		time.Sleep(2 * time.Second)
		if leaders, _, merr := hc.partitionsOf(mainTopic); merr == nil {
			hc.mu.Lock()
			hc.parts = max(hc.parts, int32(len(leaders)))
			hc.mu.Unlock()
		}
		hc.note("create a partition of main: %v; %d partitions", err, hc.mainParts())
	case harness.Recreate:
		hc.recreateChurn()
	case harness.TierRun:
		err := hc.tierRun(o.Node)
		if err != nil {
			hc.note("tiering run on node %d: %v", o.Node, err)
		}
	case harness.PasswordChange:
		// In the background: a change sent to a node that is down waits
		// out its timeout, and the other operations keep their times.
		hc.pw.checks.Add(1)
		go func() {
			defer hc.pw.checks.Done()
			hc.changePassword(o.Node, true)
		}()
	case harness.GroupCommit:
		off := hc.commitOff.Add(int64(1 + o.Records))
		part := harness.Part{Topic: mainTopic, Partition: 0}
		t0 := hc.now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: mainTopic, Partition: 0, At: off, LeaderEpoch: -1})
		resp, err := kadm.NewClient(hc.adm).CommitOffsets(ctx, hGroup, offs)
		if err == nil {
			err = resp.Error()
		}
		hc.h.AddCommit(harness.Commit{Group: hGroup, Part: part, Offset: off, OK: err == nil, T0: t0, T1: hc.now()})
		if err != nil {
			hc.note("commit %s main-0 at %d: %v", hGroup, off, err)
		}
	}
}

// fetch reads part from its log start to the high watermark it had when
// the read began (during the run, its first 3,000 records), into the
// history.
func (hc *harnessCluster) fetch(part harness.Part, final bool, d time.Duration) (int, error) {
	t0 := hc.now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	adm := kadm.NewClient(hc.adm)
	starts, err := adm.ListStartOffsets(ctx, part.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("log start: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, part.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("end offset: %w", err)
	}
	s, _ := starts.Lookup(part.Topic, part.Partition)
	e, _ := ends.Lookup(part.Topic, part.Partition)
	rd := harness.Read{Part: part, T0: t0, Final: final, LogStart: s.Offset}
	defer func() { hc.h.AddRead(rd) }()
	if e.Offset <= s.Offset {
		return 0, nil
	}
	cl := hc.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{part.Topic: {part.Partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(500*time.Millisecond))
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return len(rd.Records), fmt.Errorf("read to %d of [%d, %d): %w", lastOffset(rd.Records), s.Offset, e.Offset, ctx.Err())
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		fs.EachRecord(func(r *kgo.Record) {
			rd.Records = append(rd.Records, harness.Rec{Offset: r.Offset, Value: string(r.Value)})
		})
		// A read during the run looks at the log's start (where deletes
		// act), not at all of it: long runs would reread everything.
		if n := len(rd.Records); n > 0 && (rd.Records[n-1].Offset+1 >= e.Offset || (!final && n >= 3000)) {
			return n, nil
		}
		if ferr != nil && final {
			hc.note("final read of %s: %v (retrying)", part, ferr)
		}
	}
}

func lastOffset(rs []harness.Rec) int64 {
	if len(rs) == 0 {
		return -1
	}
	return rs[len(rs)-1].Offset
}

// deleteRecords moves main-p's log start fraction of the way to its high
// watermark and returns the leader it was sent to.
func (hc *harnessCluster) deleteRecords(p int32, fraction float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	adm := kadm.NewClient(hc.adm)
	starts, err := adm.ListStartOffsets(ctx, mainTopic)
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, mainTopic)
	}
	if err != nil {
		hc.note("DeleteRecords main-%d: offsets: %v", p, err)
		return
	}
	s, _ := starts.Lookup(mainTopic, p)
	e, _ := ends.Lookup(mainTopic, p)
	if s.Err != nil || e.Err != nil || e.Offset <= s.Offset {
		hc.note("DeleteRecords main-%d: nothing to delete [%d, %d) %v %v", p, s.Offset, e.Offset, s.Err, e.Err)
		return
	}
	before := s.Offset + int64(fraction*float64(e.Offset-s.Offset))
	part := harness.Part{Topic: mainTopic, Partition: p}
	t0 := hc.now()
	resp, err := adm.DeleteRecords(ctx, kadm.Offsets{mainTopic: {p: {Topic: mainTopic, Partition: p, At: before}}})
	if err == nil {
		err = resp.Error()
	}
	hc.h.AddDeleted(harness.Deleted{Part: part, Before: before, OK: err == nil, T0: t0, T1: hc.now()})
	hc.note("DeleteRecords main-%d before %d (log was [%d, %d)): %v", p, before, s.Offset, e.Offset, err)
}

// recreateChurn deletes the churn topic and creates it again: a new
// incarnation, whose offsets start at 0, and in which no record of the
// old one may be served.
func (hc *harnessCluster) recreateChurn() {
	hc.churnW.Lock()
	defer hc.churnW.Unlock()
	// A promise can stay unanswered for minutes: then the topic is not
	// deleted this time.
	for deadline := time.Now().Add(30 * time.Second); hc.churnN.Load() > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			hc.note("churn not re-created: %d of its records unanswered for 30s", hc.churnN.Load())
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(hc.adm).DeleteTopics(ctx, churnTopic); err != nil {
		hc.note("delete churn: %v", err)
		return
	}
	hc.mu.Lock()
	hc.inc++
	inc := hc.inc
	hc.mu.Unlock()
	hc.h.SetInc(churnTopic, inc)
	two := "2"
	for {
		resp, err := kadm.NewClient(hc.adm).CreateTopic(ctx, 2, 3, map[string]*string{"min.insync.replicas": &two}, churnTopic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			hc.note("churn deleted and created again: incarnation %d", inc)
			return
		}
		if ctx.Err() != nil {
			// Producing to it fails until a later recreate creates it.
			hc.note("churn deleted; creating incarnation %d: %v", inc, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (hc *harnessCluster) tierRun(id int32) error {
	cl := http.Client{Timeout: 30 * time.Second}
	req, err := http.NewRequest(http.MethodPost, "http://"+hc.adminAddr(id)+"/v1/tiering/run", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var sum struct {
		Errors []json.RawMessage `json:"errors"`
	}
	if json.Unmarshal(body, &sum) == nil && len(sum.Errors) > 0 {
		return fmt.Errorf("errors: %s", sum.Errors)
	}
	return nil
}

func (hc *harnessCluster) view(id int32) (clusterAnswer, error) {
	var a clusterAnswer
	cl := http.Client{Timeout: 5 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "http://"+hc.adminAddr(id)+"/v1/cluster", nil)
	if err != nil {
		return a, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := cl.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return a, fmt.Errorf("GET /v1/cluster: %s", resp.Status)
	}
	return a, json.NewDecoder(resp.Body).Decode(&a)
}

// resolve names the node a target hits now.
func (hc *harnessCluster) resolve(tg harness.Target) int32 {
	if tg.Node > 0 {
		return tg.Node
	}
	if leaders, _, err := hc.partitionsOf(tg.Topic); err == nil {
		if l, ok := leaders[tg.Partition%int32(max(1, len(leaders)))]; ok && l > 0 {
			return l
		}
	}
	return tg.Partition%int32(hc.n) + 1
}

func (hc *harnessCluster) kill(id int32) { hc.procs[id].Kill() }

func (hc *harnessCluster) restart(id int32) {
	if started(func() { hc.procs[id].Restart() }) {
		hc.published(id)
		return
	}
	hc.note("node %d did not start again (the test has failed); it stays down", id)
}

// started runs start, which fails the test (and ends its goroutine) when
// a node does not come up, on a goroutine of its own: the run goes on
// with the node down, and the checker still judges the history.
func started(start func()) bool {
	done := make(chan bool)
	go func() {
		ok := false
		defer func() { done <- ok }()
		start()
		ok = true
	}()
	return <-done
}

// restartWith starts node id again on its folder with more settings (or
// none: its own again).
func (hc *harnessCluster) restartWith(id int32, more ...string) {
	dir := hc.procs[id].Dir()
	hc.procs[id].Kill()
	if started(func() {
		hc.procs[id] = testsvc.StartProcess(hc.t, strataBin, dir, append(slices.Clone(hc.sets[id]), more...)...)
	}) {
		hc.published(id)
		return
	}
	hc.note("node %d did not start again with %v (the test has failed); it stays down", id, more)
}

func (hc *harnessCluster) wipe(id int32) {
	dir := hc.procs[id].Dir()
	if err := os.RemoveAll(dir); err != nil {
		hc.t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		hc.t.Fatal(err)
	}
}

func (hc *harnessCluster) all() []int32 {
	var ids []int32
	for id := int32(1); id <= int32(hc.n); id++ {
		ids = append(ids, id)
	}
	return ids
}

// fault plays one step of the schedule and heals it.
func (hc *harnessCluster) fault(st harness.Step) {
	var ids []int32
	for _, tg := range st.Targets {
		ids = append(ids, hc.resolve(tg))
	}
	hc.note("fault %s: nodes %v", st, ids)
	switch st.Fault {
	case harness.Kill1, harness.Kill2:
		for _, id := range ids {
			hc.kill(id)
		}
		time.Sleep(st.Hold)
		for _, id := range ids {
			hc.restart(id)
		}
	case harness.KillAll:
		for _, id := range hc.all() {
			hc.kill(id)
		}
		time.Sleep(st.Hold)
		for _, id := range hc.all() {
			hc.restart(id)
		}
	case harness.Wipe:
		hc.kill(ids[0])
		hc.wipe(ids[0])
		time.Sleep(st.Hold)
		hc.restart(ids[0])
	case harness.KillAllWipe:
		for _, id := range hc.all() {
			hc.kill(id)
		}
		hc.wipe(ids[0])
		time.Sleep(st.Hold)
		// The replaced disk's node comes back first, alone for a while.
		hc.restart(ids[0])
		time.Sleep(sessionTTL + time.Second)
		for _, id := range hc.all() {
			if id != ids[0] {
				hc.restart(id)
			}
		}
	case harness.Truncate:
		// Stopped cleanly first: the disk loses bytes, not a crash (a
		// crash is kill1's).
		file := hc.newestSealed(ids[0])
		hc.procs[ids[0]].Stop()
		if file != "" {
			if fi, err := os.Stat(file); err == nil {
				size := fi.Size() - 4096
				if size < fi.Size()/2 {
					size = fi.Size() / 2
				}
				if err := os.Truncate(file, size); err != nil {
					hc.t.Fatal(err)
				}
				hc.note("truncated %s from %d to %d bytes", filepath.Base(filepath.Dir(file))+"/"+filepath.Base(file), fi.Size(), size)
			}
		} else {
			hc.note("node %d holds no sealed segment: killed only", ids[0])
		}
		time.Sleep(st.Hold)
		hc.restart(ids[0])
	case harness.Pause:
		hc.procs[ids[0]].Signal(syscall.SIGSTOP)
		time.Sleep(st.Hold)
		hc.procs[ids[0]].Signal(syscall.SIGCONT)
	case harness.Partition, harness.OneWay:
		id := ids[0]
		for _, d := range st.Dirs {
			switch d {
			case "peers-in":
				hc.kproxy[id].hold(toTarget)
			case "peers-out":
				hc.kproxy[id].hold(fromTarget)
			case "etcd-in":
				hc.eproxy[id].hold(fromTarget)
			case "etcd-out":
				hc.eproxy[id].hold(toTarget)
			}
		}
		time.Sleep(st.Hold)
		hc.kproxy[id].heal()
		hc.eproxy[id].heal()
	case harness.EtcdPause:
		hc.etcd.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(st.Hold)
		hc.etcd.cmd.Process.Signal(syscall.SIGCONT)
	case harness.EtcdKill:
		hc.etcd.stop(syscall.SIGKILL)
		time.Sleep(st.Hold)
		hc.etcd.restart()
	case harness.EtcdQuota:
		hc.fillEtcd(st.Hold)
	case harness.Throttle:
		hc.throttle(ids[0], st)
	case harness.DeleteKill:
		p := st.Targets[0].Partition % hc.mainParts()
		leader := hc.resolve(harness.Target{Topic: mainTopic, Partition: p})
		hc.deleteRecords(p, 0.5)
		hc.kill(leader)
		hc.note("killed node %d, leader of main-%d, right after DeleteRecords", leader, p)
		time.Sleep(st.Hold)
		hc.restart(leader)
	}
	hc.note("fault %s healed", st.Fault)
}

// throttle makes both followers of a main partition slow copiers
// (cluster.follower_throttled_rate), sends the partition a large batch,
// kills its leader while they copy it (or not), then lets them copy at
// full speed again.
func (hc *harnessCluster) throttle(hint int32, st harness.Step) {
	p := hint % hc.mainParts()
	leader := hc.resolve(harness.Target{Topic: mainTopic, Partition: p})
	var followers []int32
	for _, id := range hc.all() {
		if id != leader {
			followers = append(followers, id)
		}
	}
	for _, id := range followers {
		hc.restartWith(id, "cluster.follower_throttled_rate=128KiB")
	}
	hc.note("nodes %v follow main-%d (led by %d) at 128 KiB/s", followers, p, leader)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ok, err := hc.produceBatch(hc.large, p, 2000, true, "T")
		hc.note("throttle: 2000 records acks=all to main-%d: %d acknowledged, %v", p, ok, err)
	}()
	time.Sleep(st.Hold / 2)
	if st.KillLeader {
		hc.kill(leader)
		hc.note("throttle: killed node %d, leader of main-%d", leader, p)
	}
	time.Sleep(st.Hold / 2)
	<-done
	if st.KillLeader {
		hc.restart(leader)
	}
	for _, id := range followers {
		hc.restartWith(id)
	}
}

// fillEtcd plays another writer that fills etcd to 15/16 of its quota
// (strata's own writes may then take it past: etcd raises its NOSPACE
// alarm), holds it there, and frees it as docs/cluster.md tells an
// operator: what filled it deleted, then compact, defrag, disarm.
func (hc *harnessCluster) fillEtcd(hold time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	junk := strings.Repeat("j", 256<<10)
	n, why := 0, "15/16 of the quota"
	for ; ; n++ {
		st, err := hc.ecli.Status(ctx, hc.etcd.client)
		if err != nil {
			why = err.Error()
			break
		}
		if st.DbSize >= etcdQuota/16*15 {
			break
		}
		if _, err := hc.ecli.Put(ctx, fmt.Sprintf("/harness-junk/%d", n), junk); err != nil {
			why = err.Error() // database space exceeded, once strata's writes came first
			break
		}
	}
	hc.note("etcd filled with %d values of 256 KiB: %s", n, why)
	time.Sleep(hold)
	if _, err := hc.ecli.Delete(ctx, "/harness-junk/", clientv3.WithPrefix()); err != nil {
		hc.note("etcd-quota: deleting the filler: %v", err)
	}
	st, err := hc.ecli.Status(ctx, hc.etcd.client)
	if err == nil {
		_, err = hc.ecli.Compact(ctx, st.Header.Revision)
	}
	if err == nil {
		_, err = hc.ecli.Defragment(ctx, hc.etcd.client)
	}
	if err == nil {
		_, err = hc.ecli.AlarmDisarm(ctx, &clientv3.AlarmMember{})
	}
	if err != nil {
		hc.note("etcd-quota: freeing etcd: %v", err)
	}
}

// newestSealed is the file of node id's newest sealed segment of any main
// partition, or "".
func (hc *harnessCluster) newestSealed(id int32) string {
	a, err := hc.view(id)
	if err != nil {
		return ""
	}
	file, newest := "", time.Time{}
	for _, p := range a.Partitions {
		if p.Topic != mainTopic {
			continue
		}
		for _, s := range p.Segments {
			if s.State != "sealed" {
				continue
			}
			f := filepath.Join(hc.procs[id].Dir(), fmt.Sprintf("%s-%d", p.Topic, p.Partition), fmt.Sprintf("%d.msg", s.No))
			if fi, err := os.Stat(f); err == nil && fi.ModTime().After(newest) {
				file, newest = f, fi.ModTime()
			}
		}
	}
	return file
}

// healAll leaves every node running, etcd running and nothing cut.
func (hc *harnessCluster) healAll() {
	for _, id := range hc.all() {
		hc.kproxy[id].heal()
		hc.eproxy[id].heal()
		hc.procs[id].Signal(syscall.SIGCONT)
	}
	hc.etcd.cmd.Process.Signal(syscall.SIGCONT)
}

// finish waits for the cluster to settle and records what the checker
// judges: the tiering bound's segments, the final reads, every replica's
// copy, the group's committed offset.
func (hc *harnessCluster) finish() {
	hc.waitInSync(mainTopic, 90*time.Second)
	// A re-create refused (CreateTopics needs three live nodes) leaves
	// the churn topic deleted: nothing of it to read then.
	_, _, cerr := hc.partitionsOf(churnTopic)
	churnLives := !errors.Is(cerr, kerr.UnknownTopicOrPartition)
	if churnLives {
		hc.waitInSync(churnTopic, 60*time.Second)
	} else {
		hc.note("the churn topic is deleted at the end: %v", cerr)
	}
	hc.mu.Lock()
	parts, inc := hc.parts, hc.inc
	hc.mu.Unlock()
	live := func(topic string) int {
		if topic == mainTopic {
			return 0
		}
		return inc
	}

	// Tiering: every node runs its job until nothing sealed is left only
	// local, or the bound is over.
	deadline := time.Now().Add(tierBound)
	var segs []harness.Segment
	down := map[int32]bool{}
	for {
		for _, id := range hc.all() {
			if down[id] {
				continue
			}
			if err := hc.tierRun(id); err != nil {
				hc.note("tiering run on node %d: %v", id, err)
			}
		}
		segs = segs[:0]
		left := 0
		for _, id := range hc.all() {
			a, err := hc.view(id)
			if err != nil {
				if !down[id] {
					hc.t.Errorf("node %d does not answer after the run: %v", id, err)
				}
				down[id] = true
				continue
			}
			for _, p := range a.Partitions {
				if p.Topic != mainTopic && p.Topic != churnTopic {
					continue
				}
				for _, s := range p.Segments {
					segs = append(segs, harness.Segment{Node: id, Part: harness.Part{Topic: p.Topic, Inc: live(p.Topic), Partition: p.Partition},
						No: s.No, State: s.State, Start: s.Start, End: s.End, Checksum: s.Checksum})
					if s.State == "sealed" {
						left++
					}
				}
			}
		}
		if left == 0 || time.Now().After(deadline) {
			hc.note("tiering: %d sealed segments left local after the bound", left)
			break
		}
		time.Sleep(3 * time.Second)
	}
	hc.h.Segments = segs

	// Final reads, through any node, from the log start to the end.
	var all []harness.Part
	for p := int32(0); p < parts; p++ {
		all = append(all, harness.Part{Topic: mainTopic, Partition: p})
	}
	for p := int32(0); churnLives && p < 2; p++ {
		all = append(all, harness.Part{Topic: churnTopic, Inc: inc, Partition: p})
	}
	starts := map[harness.Part]int64{}
	for _, part := range all {
		if _, err := hc.fetch(part, true, time.Minute); err != nil {
			hc.t.Errorf("final read of %s: %v", part, err)
		}
	}
	hc.h.EachFinalRead(func(r harness.Read) { starts[r.Part] = max(0, r.LogStart) })

	// Every replica's own copy, once their high watermarks agree (or 30s).
	end := time.Now().Add(45 * time.Second) // for every partition's copies to agree
	for _, part := range all {
		var copies []harness.Copy
		var errs []string
		for ; ; time.Sleep(500 * time.Millisecond) {
			copies, errs = copies[:0], errs[:0]
			hws := map[int64]bool{}
			for _, id := range hc.all() {
				if down[id] {
					continue
				}
				cp, err := hc.copyOf(id, part, starts[part])
				if err != nil {
					errs = append(errs, err.Error())
					continue
				}
				copies = append(copies, cp)
				hws[cp.HW] = true
			}
			if (len(copies) == hc.n-len(down) && len(hws) == 1) || time.Now().After(end) {
				break
			}
		}
		if len(errs) > 0 {
			hc.note("copies of %s: %s", part, strings.Join(errs, "; "))
		}
		for _, cp := range copies {
			hc.h.AddCopy(cp)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(hc.adm).FetchOffsets(ctx, hGroup)
	if err == nil {
		err = offs.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		hc.t.Errorf("the group's committed offsets: %v", err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		hc.h.SetCommitted(hGroup, harness.Part{Topic: o.Topic, Partition: o.Partition}, o.At)
	})
	hc.finalLogins()
}

// copyOf reads node id's own copy of part from offset `from` up to that
// node's high watermark: a Fetch from a replica id (another node's, with
// that node's peer proof) is answered from the receiving node's log,
// whoever leads.
func (hc *harnessCluster) copyOf(id int32, part harness.Part, from int64) (harness.Copy, error) {
	secret, err := hc.peerSecret()
	if err != nil {
		return harness.Copy{}, err
	}
	hc.mu.Lock()
	addr := hc.kafka[id]
	hc.mu.Unlock()
	cp := harness.Copy{Node: id, Part: part}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), rootSASL())
	if err != nil {
		return cp, err
	}
	defer cl.Close()
	as := id%int32(hc.n) + 1
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.ReplicaState.ID = as, as
		req.MaxBytes, req.MaxWaitMillis = 8<<20, 0
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = part.Topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = part.Partition, from, 8<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		peer.Prove(req, secret, as, id, time.Now())
		resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
		if err != nil {
			return cp, fmt.Errorf("node %d: %w", id, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return cp, fmt.Errorf("node %d answered a fetch of %s with %d topics", id, part, len(resp.Topics))
		}
		rpart := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(rpart.ErrorCode); err != nil {
			return cp, fmt.Errorf("node %d's copy at %d: %w", id, from, err)
		}
		cp.HW = rpart.HighWatermark
		got, err := decodeBatches(rpart.RecordBatches, part.Partition)
		if err != nil {
			return cp, fmt.Errorf("node %d's copy: %w", id, err)
		}
		for _, r := range got {
			if r.offset >= from && r.offset < cp.HW {
				cp.Records = append(cp.Records, harness.Rec{Offset: r.offset, Value: r.value})
			}
		}
		if len(got) == 0 || from >= cp.HW {
			return cp, nil
		}
		if from = got[len(got)-1].offset + 1; from >= cp.HW {
			return cp, nil
		}
	}
}

// peerSecret is the secret the nodes prove their replica requests with,
// read from etcd as a node reads it.
func (hc *harnessCluster) peerSecret() ([]byte, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{hc.etcd.client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return stratacluster.PeerSecret(ctx, cli, hc.pfx)
}
