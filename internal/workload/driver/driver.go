// Package driver runs the randomized workload of package workload against a
// real `strata serve` process: it starts the binary on a data folder with a
// local-folder cold tier and aggressive tiering, drives it with franz-go
// from several workers, kills and restarts it, and after every restart and
// at the end reads every partition back and has the model judge it.
package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/internal/workload"
)

// Config is one run of the workload.
type Config struct {
	Bin     string        // the strata binary
	Dir     string        // working folder: data/, server.log, history.log
	Seed    uint64        // seeds every worker's generator
	Budget  time.Duration // how long workers start new operations
	Workers int           // concurrent workers (1: the op sequence is a function of the seed)
	Weights workload.Weights
	Log     *slog.Logger
	// KeepGoing records violations and runs on (a crash still ends the
	// run), to find more than the first bug in one run.
	KeepGoing bool
}

// Retention is the service's retention age in the workload: records with
// timestamps older than this may be removed, locally and remotely.
const Retention = time.Hour

// serverSets are the service's settings: tiny segments sealed fast, tiered
// every second with no local retention (so reads go cold), small Parquet
// row groups (so cold point reads hit several), retention by age, no
// auto-creation (so the model knows every topic's life).
func serverSets(dataDir string) []string {
	return []string{
		"cold.local.dir=" + filepath.Join(dataDir, "cold"),
		"kafka.auto_create_topics=false",
		"segment.max_bytes=16KiB", // with the check every 10 offsets: segments often end at the same offsets across incarnations
		"segment.roll_check_interval=10",
		"segment.max_age=2s",
		"tiering.schedule=@every 1s",
		"tiering.min_sealed_age=0s",
		"tiering.local_retention=0s",
		"tiering.remote_retention=" + Retention.String(),
		"tiering.orphan_grace=10s",
		"tiering.row_group_bytes=16KiB",
		"tiering.page_bytes=4KiB",
		"retention.max_age=" + Retention.String(),
		"retention.interval=1s",
		// Each run commits the topics' Iceberg tables too: a crash inside a
		// commit, a table forgotten with its topic, retention's delete
		// commits (two start-and-deletion bugs were found so).
		"iceberg.enabled=true",
		"iceberg.maintenance_interval=2s",
	}
}

// Result is what a run found.
type Result struct {
	Violations []workload.Violation
	Ops        map[workload.Kind]int
	Restarts   int
	Checks     int
	Stats      string
	Context    string   // history and log lines around the first violations
	Notes      []string // odd things that are not violations (slow stops, failed tiering runs)
}

// instance is one run of the service and the clients talking to it.
type instance struct {
	srv    *server
	ctx    context.Context // canceled when the service is killed or stopped
	cancel context.CancelFunc
	cl     *kgo.Client // admin and fetch requests: no retries, so an outcome is never guessed
	adm    *kadm.Client
}

type run struct {
	cfg     Config
	m       *workload.Model
	dataDir string
	logPath string
	ctx     context.Context
	fail    context.CancelFunc

	world sync.RWMutex // operations hold it shared; kill and restart hold it alone
	inst  *instance
	gen   int

	names map[string]*sync.Mutex // one create or delete per name at a time

	mu         sync.Mutex
	violations []workload.Violation
	// deleting: when each name was first answered "marked for deletion";
	// a name held so past deletionBound is a finding: its deletion is stuck.
	deleting map[string]time.Time
	seen     map[string]bool // violations already recorded
	kinds    map[string]bool // kinds whose history is in context
	context  []string
	notes    []string
	ops      map[workload.Kind]int
	restarts int
	checks   int
}

// Run runs the workload and returns what it found; an error means the
// workload could not run (the binary did not start), not a finding.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.Weights == nil {
		cfg.Weights = workload.DefaultWeights
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r := &run{cfg: cfg, m: workload.NewModel(Retention), dataDir: filepath.Join(cfg.Dir, "data"),
		logPath: filepath.Join(cfg.Dir, "server.log"), names: map[string]*sync.Mutex{}, deleting: map[string]time.Time{}, ops: map[workload.Kind]int{}, kinds: map[string]bool{}}
	for _, n := range workload.Names {
		r.names[n] = &sync.Mutex{}
	}
	r.ctx, r.fail = context.WithCancel(ctx)
	defer r.fail()
	if err := r.start(); err != nil {
		return nil, err
	}
	defer func() {
		if r.inst != nil {
			r.inst.cancel()
			r.inst.cl.Close()
			r.inst.srv.kill()
		}
	}()

	deadline := time.Now().Add(cfg.Budget)
	var wg sync.WaitGroup
	for w := 1; w <= cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(w, deadline)
		}()
	}
	wg.Wait()

	// The end: everything acknowledged is readable, before and after a
	// graceful restart, and the service stops cleanly.
	if r.ctx.Err() == nil {
		r.world.Lock()
		r.settle(0)
		r.fullCheck(0, "at the end")
		if r.ctx.Err() == nil {
			r.restart(0, false, "final graceful restart")
		}
		if r.ctx.Err() == nil {
			if err := r.inst.srv.stop(time.Minute); err != nil {
				r.violate(0, "", workload.Violation{Kind: workload.KindCrash, Partition: -1, Offset: -1,
					Detail: fmt.Sprintf("strata serve did not stop cleanly at the end: %v\n%s", err, tail(r.logPath, 30))})
			}
			r.inst.cancel()
			r.inst.cl.Close()
			r.inst = nil
		}
		r.world.Unlock()
	}
	r.writeHistory()
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Result{Violations: r.violations, Ops: r.ops, Restarts: r.restarts, Checks: r.checks,
		Stats: r.m.Stats(), Context: strings.Join(r.context, "\n"), Notes: r.notes}, nil
}

// start runs the service on the data folder and connects the admin client.
func (r *run) start() error {
	r.gen++
	srv, err := startServer(r.cfg.Bin, r.dataDir, r.logPath, r.gen, serverSets(r.dataDir))
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(srv.kafka), kgo.RequestRetries(0), kgo.RetryTimeout(0),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.RequestTimeoutOverhead(20*time.Second))
	if err != nil {
		srv.kill()
		return err
	}
	ctx, cancel := context.WithCancel(r.ctx)
	inst := &instance{srv: srv, ctx: ctx, cancel: cancel, cl: cl, adm: kadm.NewClient(cl)}
	r.inst = inst
	// A crash fails the run at once, with the log's tail.
	go func() {
		<-srv.done
		if !srv.expectExit.Load() {
			r.violate(0, "", workload.Violation{Kind: workload.KindCrash, Partition: -1, Offset: -1,
				Detail: fmt.Sprintf("strata serve (start %d) exited on its own: %v\n--- tail of its log:\n%s", srv.generation, srv.exitErr, tail(r.logPath, 60))})
		}
	}()
	return nil
}

// violate records violations and stops the run (unless KeepGoing); the
// history of the topics involved in the first violation of each kind goes
// into the result.
func (r *run) violate(worker int, why string, vs ...workload.Violation) {
	if len(vs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	crash := false
	for _, v := range vs {
		crash = crash || v.Kind == workload.KindCrash
		if r.seen[v.String()] {
			continue // the same finding read again
		}
		r.seen[v.String()] = true
		r.violations = append(r.violations, v)
		r.m.Logf(worker, v.Topic, "VIOLATION %s", v)
		if r.kinds[v.Kind] || v.Topic == "" {
			continue
		}
		r.kinds[v.Kind] = true
		r.context = append(r.context, fmt.Sprintf("--- history of topic %s up to the first %s violation (%s), last 60 events:", v.Topic, v.Kind, why))
		r.context = append(r.context, r.m.History(v.Topic, 60)...)
	}
	if crash || !r.cfg.KeepGoing {
		r.fail()
	}
}

// note records something odd that is not a violation.
func (r *run) note(w int, text string) {
	r.m.Logf(w, "", "NOTE %s", text)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, text)
}

func (r *run) worker(w int, deadline time.Time) {
	gen := workload.NewGen(r.cfg.Seed, w, r.cfg.Weights)
	for r.ctx.Err() == nil && time.Now().Before(deadline) {
		op := gen.Next(r.m.View(workload.Names), time.Now().UnixMilli())
		r.mu.Lock()
		r.ops[op.Kind]++
		r.mu.Unlock()
		switch op.Kind {
		case workload.Kill, workload.Restart:
			r.world.RLock()
			inst := r.inst
			r.world.RUnlock()
			r.restartFrom(w, inst, op.Kind == workload.Kill)
			continue
		}
		r.world.RLock()
		inst := r.inst
		switch op.Kind {
		case workload.Create, workload.Delete:
			r.lifecycle(w, inst, op)
		case workload.Produce:
			r.produce(w, inst, op)
		case workload.Fetch:
			r.fetch(w, inst, op)
		case workload.DeleteRecords:
			r.deleteRecords(w, inst, op)
		case workload.Tier:
			r.tier(w, inst)
		}
		r.world.RUnlock()
	}
}

// restartFrom kills (or stops) the instance while other workers' operations
// are in flight, then restarts the service on the same data and checks it.
func (r *run) restartFrom(w int, inst *instance, kill bool) {
	how := "SIGTERM"
	if kill {
		how = "SIGKILL"
	}
	r.m.Logf(w, "", "%s strata serve (start %d), with operations in flight", how, inst.srv.generation)
	if kill {
		inst.srv.kill()
		inst.cancel() // operations in flight give up now: their outcome is unknown
	} else {
		// In-flight requests are answered before it stops; then the
		// operations still waiting give up.
		inst.srv.signal(syscall.SIGTERM)
		go func() {
			select {
			case <-inst.srv.done:
			case <-time.After(time.Minute):
			}
			inst.cancel()
		}()
	}
	r.world.Lock()
	defer r.world.Unlock()
	if r.inst != inst || r.ctx.Err() != nil {
		return // another worker restarted it already, or the run failed
	}
	r.restart(w, kill, how)
}

// restart (under the world lock) ends the current instance if it still
// runs, starts the service again, settles uncertain topics and checks
// everything.
func (r *run) restart(w int, kill bool, why string) {
	inst := r.inst
	stopStart := time.Now()
	if kill {
		inst.srv.kill()
	} else if err := inst.srv.stop(time.Minute); err != nil {
		r.violate(w, "", workload.Violation{Kind: workload.KindCrash, Partition: -1, Offset: -1,
			Detail: fmt.Sprintf("strata serve did not stop cleanly on SIGTERM: %v\n--- tail of its log:\n%s", err, tail(r.logPath, 60))})
		return
	}
	if took := time.Since(stopStart); !kill && took > 10*time.Second {
		r.note(w, fmt.Sprintf("graceful stop of start %d took %s (SIGTERM to exit)", inst.srv.generation, took.Round(time.Millisecond)))
	}
	inst.cancel()
	inst.cl.Close()
	r.mu.Lock()
	r.restarts++
	r.mu.Unlock()
	if err := r.start(); err != nil {
		r.violate(w, "", workload.Violation{Kind: workload.KindCrash, Partition: -1, Offset: -1,
			Detail: fmt.Sprintf("strata serve did not start again on its data after %s: %v", why, err)})
		return
	}
	r.m.Logf(w, "", "strata serve started again (start %d) after %s", r.gen, why)
	r.settle(w)
	r.fullCheck(w, "after "+why)
}

// deletionBound is how long a deleted topic's name may stay taken: its
// removal is retried every 10s (engine), so past this it is stuck.
const deletionBound = time.Minute

// createOutcome is a CreateTopics answer's outcome: TOPIC_ALREADY_EXISTS
// saying the name's earlier topic is marked for deletion (as Kafka answers
// while a deleted topic's data is removed; here its objects and Iceberg
// table) made nothing.
func createOutcome(err error) workload.Outcome {
	if errors.Is(err, kerr.TopicAlreadyExists) && strings.Contains(err.Error(), "marked for deletion") {
		return workload.Refused
	}
	return outcome(err)
}

// outcome classifies an error of an admin request: a Kafka error code is an
// answer, anything else (timeout, lost connection) leaves it unknown.
func outcome(err error) workload.Outcome {
	var ke *kerr.Error
	switch {
	case err == nil:
		return workload.OK
	case errors.Is(err, kerr.TopicAlreadyExists):
		return workload.Exists
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return workload.NotFound
	case errors.Is(err, kerr.UnknownServerError):
		return workload.Unknown // it may have done part of the work
	case errors.As(err, &ke):
		return workload.Refused
	}
	return workload.Unknown
}

func (r *run) lifecycle(w int, inst *instance, op workload.Op) {
	mu := r.names[op.Topic]
	mu.Lock()
	defer mu.Unlock()
	ctx, cancel := context.WithTimeout(inst.ctx, 30*time.Second)
	defer cancel()
	l := r.m.BeginLifecycle(op.Topic)
	var err error
	var vs []workload.Violation
	if op.Kind == workload.Create {
		var resp kadm.CreateTopicResponse
		resp, err = inst.adm.CreateTopic(ctx, op.Partitions, 1, topicConfigs(op.Topic), op.Topic)
		if err == nil {
			err = resp.Err
		}
		if errors.Is(err, kerr.TopicAlreadyExists) && strings.Contains(resp.ErrMessage, "marked for deletion") {
			err = fmt.Errorf("%w: %s", err, resp.ErrMessage)
		}
		vs = r.m.EndCreate(l, op.Partitions, createOutcome(err))
		r.mu.Lock()
		if createOutcome(err) != workload.Refused || !errors.Is(err, kerr.TopicAlreadyExists) {
			delete(r.deleting, op.Topic)
		} else if since, ok := r.deleting[op.Topic]; !ok {
			r.deleting[op.Topic] = time.Now()
		} else if held := time.Since(since); held > deletionBound {
			vs = append(vs, workload.Violation{Kind: workload.KindTopic, Topic: op.Topic, Partition: -1, Offset: -1,
				Detail: fmt.Sprintf("the topic has been marked for deletion for %s: its deletion is stuck", held.Round(time.Second))})
		}
		r.mu.Unlock()
	} else {
		var resp kadm.DeleteTopicResponse
		resp, err = inst.adm.DeleteTopic(ctx, op.Topic)
		if err == nil {
			err = resp.Err
		}
		vs = r.m.EndDelete(l, outcome(err))
	}
	o := outcome(err)
	if op.Kind == workload.Create {
		o = createOutcome(err)
	}
	r.m.Logf(w, op.Topic, "%s -> %s%s", op, o, errText(err))
	r.violate(w, op.String(), vs...)
	if o == workload.Unknown {
		r.settleName(w, inst, op.Topic)
	}
}

// topicConfigs puts every other name of workload.Names in the shared
// files, so the workload reaches both file models (docs/engine.md).
func topicConfigs(name string) map[string]*string {
	if slices.Index(workload.Names, name)%2 == 0 {
		return nil
	}
	shared := "shared"
	return map[string]*string{"strata.file.model": &shared}
}

// settle deletes every topic whose create or delete had an unknown outcome,
// until the service gives a clear answer: that puts each name back in a
// state the model knows.
func (r *run) settle(w int) {
	for _, name := range r.m.Unsettled() {
		mu := r.names[name]
		mu.Lock()
		r.settleName(w, r.inst, name)
		mu.Unlock()
	}
}

// settleName (with the name's lock held) deletes an uncertain topic.
func (r *run) settleName(w int, inst *instance, name string) {
	for try := 0; try < 5 && inst.ctx.Err() == nil; try++ {
		if r.m.Live(name) != nil {
			return
		}
		unsettled := false
		for _, n := range r.m.Unsettled() {
			unsettled = unsettled || n == name
		}
		if !unsettled {
			return
		}
		ctx, cancel := context.WithTimeout(inst.ctx, 30*time.Second)
		l := r.m.BeginLifecycle(name)
		resp, err := inst.adm.DeleteTopic(ctx, name)
		cancel()
		if err == nil {
			err = resp.Err
		}
		vs := r.m.EndDelete(l, outcome(err))
		r.m.Logf(w, name, "settle: delete %s -> %s%s", name, outcome(err), errText(err))
		r.violate(w, "settling "+name, vs...)
		if outcome(err) != workload.Unknown {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func codecOf(c workload.Codec) kgo.CompressionCodec {
	return [...]kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(),
		kgo.Lz4Compression(), kgo.ZstdCompression()}[c]
}

// produce sends the op's records with a client of its own (its codec, and
// idempotent or not), so every produce starts from fresh metadata.
func (r *run) produce(w int, inst *instance, op workload.Op) {
	p := r.m.BeginProduce(op.Topic, op.Records)
	if p == nil {
		r.m.Logf(w, op.Topic, "%s -> skipped: no live incarnation", op)
		return
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(inst.srv.kafka),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codecOf(op.Codec)),
		kgo.ProducerBatchMaxBytes(96 << 20), // the broker, not the client, must refuse over-limit records
		kgo.ProducerLinger(0),
		// No RecordDeliveryTimeout: franz-go measures it from the record's
		// timestamp, so records two days old would fail before being sent.
		// The op's context (30s) bounds it instead.
		kgo.ProduceRequestTimeout(20 * time.Second),
		kgo.UnknownTopicRetries(1),
	}
	if !op.Idempotent {
		// acks=all with no retries: at most once, so a duplicate is the
		// service's doing.
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.RecordRetries(0), kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	results := make([]workload.Result, len(op.Records))
	for i := range results {
		results[i] = workload.Result{Offset: -1, Outcome: workload.Unknown}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		r.m.EndProduce(p, results)
		r.m.Logf(w, op.Topic, "%s -> client: %v", op, err)
		return
	}
	recs := make([]*kgo.Record, len(op.Records))
	for i, pr := range op.Records {
		kr := &kgo.Record{Topic: op.Topic, Partition: pr.Partition, Key: pr.Rec.Key, Value: pr.Rec.Value,
			Timestamp: time.UnixMilli(pr.Rec.Timestamp)}
		for _, h := range pr.Rec.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		recs[i] = kr
	}
	// An idempotent producer does not give up on a request it is unsure
	// of, even past its context; closing the client fails what is left.
	// That happens when the service is killed or after 30s.
	ctx, cancel := context.WithTimeout(inst.ctx, 30*time.Second)
	var closeOnce sync.Once
	closeClient := func() { closeOnce.Do(cl.Close) }
	stopAfter := context.AfterFunc(ctx, closeClient)
	res := cl.ProduceSync(ctx, recs...)
	stopAfter()
	cancel()
	closeClient()
	index := make(map[*kgo.Record]int, len(recs))
	for i, kr := range recs {
		index[kr] = i
	}
	acked, errs := 0, map[string]int{}
	var offs []string
	for _, pr := range res { // in the order answers came, not the records'
		i := index[pr.Record]
		if pr.Err == nil {
			results[i] = workload.Result{Offset: pr.Record.Offset, Outcome: workload.OK}
			acked++
			offs = append(offs, fmt.Sprintf("%d@%d", pr.Record.Partition, pr.Record.Offset))
		} else {
			results[i].Err = pr.Err.Error()
			errs[pr.Err.Error()]++
		}
	}
	vs := r.m.EndProduce(p, results)
	r.m.Logf(w, op.Topic, "%s -> acked %d/%d (inc #%d) at %s%s", op, acked, len(recs), p.Inc, compactOffsets(offs), errSummary(errs))
	r.violate(w, op.String(), vs...)
}

func compactOffsets(offs []string) string {
	if len(offs) <= 4 {
		return "[" + strings.Join(offs, " ") + "]"
	}
	return fmt.Sprintf("[%s %s .. %s]", offs[0], offs[1], offs[len(offs)-1])
}

func errSummary(errs map[string]int) string {
	if len(errs) == 0 {
		return ""
	}
	var parts []string
	for e, n := range errs {
		parts = append(parts, fmt.Sprintf("%d x %s", n, e))
	}
	sort.Strings(parts)
	return "; errors: " + strings.Join(parts, "; ")
}

// fetchOnce sends one Fetch for a partition from offset and decodes it.
func fetchOnce(ctx context.Context, cl *kgo.Client, topic string, partition int32, from int64, maxBytes int32) (kgo.FetchPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = maxBytes
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, from, maxBytes
	rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return kgo.FetchPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kgo.FetchPartition{}, fmt.Errorf("fetch answered %d topics for one", len(resp.Topics))
	}
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: from, Topic: topic, Partition: partition},
		&resp.Topics[0].Partitions[0], kgo.DefaultDecompressor(), nil)
	return fp, nil
}

func toGot(recs []*kgo.Record) []workload.Got {
	out := make([]workload.Got, 0, len(recs))
	for _, kr := range recs {
		g := workload.Got{Offset: kr.Offset, Rec: workload.Rec{Key: kr.Key, Value: kr.Value, Timestamp: kr.Timestamp.UnixMilli()}}
		for _, h := range kr.Headers {
			g.Rec.Headers = append(g.Rec.Headers, workload.Header{Key: h.Key, Value: h.Value})
		}
		out = append(out, g)
	}
	return out
}

// fetch reads a range while other operations run and checks what it got.
func (r *run) fetch(w int, inst *instance, op workload.Op) {
	inc := r.m.Live(op.Topic)
	if inc == nil {
		return
	}
	changes, busy := r.m.Changes(op.Topic)
	since := r.m.Tick()
	ctx, cancel := context.WithTimeout(inst.ctx, 30*time.Second)
	fp, err := fetchOnce(ctx, inst.cl, op.Topic, op.Partition, op.Offset, op.MaxBytes)
	cancel()
	if err == nil {
		err = fp.Err
	}
	r.m.Logf(w, op.Topic, "%s -> %d records, low %d high %d%s", op, len(fp.Records), fp.LogStartOffset, fp.HighWatermark, errText(err))
	after, busyAfter := r.m.Changes(op.Topic)
	if busy || busyAfter || after != changes {
		return // raced a create or delete: which incarnation answered is unknown
	}
	switch {
	case errors.Is(err, kerr.OffsetOutOfRange):
		// The watermarks still say what must be there.
	case err != nil:
		return // reads are judged by the full checks; a failed one is logged
	}
	obs := workload.Observation{Topic: op.Topic, Partition: op.Partition, Inc: inc.ID, From: op.Offset,
		Records: toGot(fp.Records), Low: fp.LogStartOffset, High: fp.HighWatermark, Since: since, Now: time.Now().UnixMilli()}
	if err != nil {
		obs.Records = nil
	}
	r.violate(w, op.String(), r.m.Check(obs)...)
}

func (r *run) deleteRecords(w int, inst *instance, op workload.Op) {
	d := r.m.BeginDeleteRecords(op.Topic, op.Partition, op.Offset)
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(inst.ctx, 30*time.Second)
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: op.Topic, Partition: op.Partition, At: op.Offset})
	resp, err := inst.adm.DeleteRecords(ctx, offs)
	cancel()
	low := int64(-1)
	if err == nil {
		if rr, ok := resp.Lookup(op.Topic, op.Partition); ok {
			err, low = rr.Err, rr.LowWatermark
		} else {
			err = errors.New("no answer for the partition")
		}
	}
	o := outcome(err)
	if errors.Is(err, kerr.OffsetOutOfRange) {
		o = workload.Refused
	}
	r.m.Logf(w, op.Topic, "%s -> %s low %d%s", op, o, low, errText(err))
	r.violate(w, op.String(), r.m.EndDeleteRecords(d, o, low)...)
}

// tier runs one tiering pass through the admin API.
func (r *run) tier(w int, inst *instance) {
	ctx, cancel := context.WithTimeout(inst.ctx, 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+inst.srv.admin+"/v1/tiering/run", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.m.Logf(w, "", "tier -> %v", err)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	r.m.Logf(w, "", "tier -> %s", resp.Status)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		r.note(w, fmt.Sprintf("POST /v1/tiering/run: %s %s", resp.Status, strings.TrimSpace(string(body))))
	}
}

// fullCheck (under the world lock) reads every partition of every topic the
// service lists or the model holds, from the low to the high watermark, and
// has the model judge it all at once.
func (r *run) fullCheck(w int, why string) {
	inst := r.inst
	if r.ctx.Err() != nil || inst == nil {
		return
	}
	r.mu.Lock()
	r.checks++
	r.mu.Unlock()
	since := r.m.Tick()
	ctx, cancel := context.WithTimeout(inst.ctx, 2*time.Minute)
	defer cancel()
	listed, err := inst.adm.ListTopics(ctx)
	if err != nil {
		r.violate(w, why, workload.Violation{Kind: workload.KindReadError, Partition: -1, Offset: -1,
			Detail: fmt.Sprintf("listing topics %s: %v", why, err)})
		return
	}
	expected := r.m.Expected(workload.Names)
	var vs []workload.Violation
	var obs []workload.Observation
	for name := range listed {
		if _, ok := expected[name]; !ok {
			vs = append(vs, workload.Violation{Kind: workload.KindTopic, Topic: name, Partition: -1, Offset: -1,
				Detail: "listed by the service, but the workload never made it"})
		}
	}
	records := 0
	for _, name := range workload.Names {
		inc := expected[name]
		det, isListed := listed[name]
		incID, partitions := 0, int32(0)
		if inc != nil {
			incID, partitions = inc.ID, inc.Partitions
		}
		switch {
		case inc == nil && !isListed:
			continue
		case inc == nil:
			vs = append(vs, workload.Violation{Kind: workload.KindTopic, Topic: name, Partition: -1, Offset: -1,
				Detail: fmt.Sprintf("listed with %d partitions %s, but its deletion was acknowledged", len(det.Partitions), why)})
		case !isListed:
			vs = append(vs, workload.Violation{Kind: workload.KindTopic, Topic: name, Partition: -1, Offset: -1,
				Detail: fmt.Sprintf("incarnation #%d (%d partitions) is not listed %s", inc.ID, inc.Partitions, why)})
		case int32(len(det.Partitions)) != inc.Partitions:
			vs = append(vs, workload.Violation{Kind: workload.KindTopic, Topic: name, Partition: -1, Offset: -1,
				Detail: fmt.Sprintf("incarnation #%d was created with %d partitions, the service lists %d %s", inc.ID, inc.Partitions, len(det.Partitions), why)})
		}
		n := max(partitions, int32(len(det.Partitions)))
		for p := int32(0); p < n; p++ {
			o, err := readAll(ctx, inst.cl, name, p)
			if err != nil {
				if p < partitions {
					vs = append(vs, workload.Violation{Kind: workload.KindReadError, Topic: name, Partition: p, Offset: o.From,
						Detail: fmt.Sprintf("reading it %s: %v", why, err)})
				}
				continue
			}
			o.Inc, o.Since, o.Now = incID, since, time.Now().UnixMilli()
			records += len(o.Records)
			obs = append(obs, o)
		}
	}
	vs = append(vs, r.m.Check(obs...)...)
	r.m.Logf(w, "", "full check %s: %d partitions, %d records read, %d violations; %s", why, len(obs), records, len(vs), r.m.Stats())
	r.cfg.Log.Info("workload full check", "why", why, "partitions", len(obs), "records", records, "violations", len(vs))
	r.violate(w, "full check "+why, vs...)
}

// readAll reads a partition from its low to its high watermark. When the
// low watermark moves during the read (retention), it starts over there.
func readAll(ctx context.Context, cl *kgo.Client, topic string, partition int32) (workload.Observation, error) {
	o := workload.Observation{Topic: topic, Partition: partition, Low: -1, High: -1, Complete: true}
	from := int64(0)
	for tries := 0; tries < 10_000; tries++ {
		fp, err := fetchOnce(ctx, cl, topic, partition, from, 1<<20)
		if err == nil {
			err = fp.Err
		}
		if o.High < 0 && (err == nil || errors.Is(err, kerr.OffsetOutOfRange)) {
			o.High = fp.HighWatermark
		}
		switch {
		case errors.Is(err, kerr.OffsetOutOfRange) && fp.LogStartOffset > from:
			// Below the low watermark: start there, dropping what was read.
			from = fp.LogStartOffset
			o.From, o.Low, o.Records = from, from, nil
			continue
		case errors.Is(err, kerr.OffsetOutOfRange) && from >= o.High:
			if o.Low < 0 {
				o.Low, o.From = fp.LogStartOffset, fp.LogStartOffset
			}
			return o, nil
		case err != nil:
			o.From = from
			return o, err
		}
		if o.Low < 0 {
			o.Low, o.From = fp.LogStartOffset, from
		}
		if len(fp.Records) == 0 {
			if from >= o.High {
				return o, nil
			}
			return o, fmt.Errorf("fetch from %d returned no records below the high watermark %d", from, o.High)
		}
		o.Records = append(o.Records, toGot(fp.Records)...)
		from = fp.Records[len(fp.Records)-1].Offset + 1
		if from >= o.High {
			return o, nil
		}
	}
	return o, fmt.Errorf("no end after 10000 fetches")
}

// writeHistory saves the whole operation history next to the server log.
func (r *run) writeHistory() {
	lines := r.m.History("", 1<<30)
	os.WriteFile(filepath.Join(r.cfg.Dir, "history.log"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
