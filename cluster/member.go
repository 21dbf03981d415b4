package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"strata/metadata"
	"strata/partition"
)

// Member is one node in the cluster: registered under a lease while it is
// live, campaigning for controller, and keeping a view of the cluster.
type Member struct {
	cfg     Config
	cli     *clientv3.Client
	keys    keys
	log     *slog.Logger
	ttl     int // seconds
	metrics *metrics

	bg     context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once

	mu      sync.Mutex
	view    view
	changed chan struct{}
	live    bool
	session *concurrency.Session    // the current one; nil between sessions
	term    term                    // set while this node is controller
	fenced  map[TopicPartition]bool // being handed over: this node leads them no more
	damaged []TopicPartition        // registered with this node (Node.Damaged)
	// made is the topic incarnation each local shard was made for, as
	// KeepShards last found it (-1: a shard with no record, kept).
	made map[string]int64
	// pids hands out producer ids from blocks reserved in etcd.
	pids *metadata.ProducerIDs
}

// term is a controller's term: the election key and its creation revision.
type term struct {
	key string
	rev int64
}

// Join registers cfg.Self under a new lease, and then, in the background,
// campaigns for controller (running placement while elected), watches the
// cluster into the view, and registers again whenever the lease is lost.
// It fails with ErrNodeIDTaken while another live node has Self.ID.
func Join(ctx context.Context, cfg Config) (*Member, error) {
	if cfg.Client == nil {
		return nil, errors.New("cluster: Config.Client is nil")
	}
	if cfg.Self.ID < 0 || cfg.Self.KafkaAddr == "" {
		return nil, fmt.Errorf("cluster: Self needs an id >= 0 and a Kafka address, got %+v", cfg.Self)
	}
	cfg.Prefix = normalizePrefix(cfg.Prefix)
	if cfg.ReplicaGrace <= 0 {
		cfg.ReplicaGrace = time.Minute
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 10 * time.Second
	}
	if cfg.EtcdQuotaBytes <= 0 {
		cfg.EtcdQuotaBytes = 2 << 30
	}
	if cfg.EtcdCheckInterval <= 0 {
		cfg.EtcdCheckInterval = 30 * time.Second
	}
	if cfg.Gates == nil {
		cfg.Gates = partition.NewGates()
	}
	log := cmp.Or(cfg.Logger, slog.Default()).With("node", cfg.Self.ID)
	m := &Member{
		cfg:     cfg,
		cli:     cfg.Client,
		keys:    keys{cfg.Prefix},
		log:     log,
		ttl:     max(1, int((cfg.SessionTTL+time.Second-1)/time.Second)),
		metrics: newMetrics(cfg.Registerer),
		view:    newView(),
		changed: make(chan struct{}),
		fenced:  map[TopicPartition]bool{},
		damaged: slices.Clone(cfg.Self.Damaged),
	}
	m.pids = metadata.NewProducerIDs(producerIDBlocks{cli: cfg.Client, key: m.keys.producerIDs(), timeout: cfg.SessionTTL}, 0)
	if _, err := m.list(ctx); err != nil {
		return nil, fmt.Errorf("cluster: reading the cluster from etcd: %w", err)
	}
	s, rev, err := m.register(ctx)
	if err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	m.bg, m.cancel = bg, cancel
	m.setSession(s)
	m.wg.Add(3)
	go m.keepView(bg)
	go m.run(bg, s, rev)
	go m.keepEtcdHealthy(bg)
	// Join returns with this node in its own view.
	if err := m.waitRange(ctx, rangeNodes, rev); err != nil {
		m.Close()
		return nil, err
	}
	log.Info("cluster: joined", "kafka_addr", cfg.Self.KafkaAddr, "lease", fmt.Sprintf("%x", s.Lease()), "session_ttl", cfg.SessionTTL)
	return m, nil
}

// register opens a session and writes this node's key under its lease,
// only if no live node holds the id.
func (m *Member) register(ctx context.Context) (*concurrency.Session, int64, error) {
	// The session outlives ctx: its keepalives run until Close or expiry.
	grant, cancel := context.WithTimeout(ctx, time.Duration(m.ttl)*time.Second)
	defer cancel()
	lease, err := m.cli.Grant(grant, int64(m.ttl))
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: granting a lease: %w", full(err))
	}
	s, err := concurrency.NewSession(m.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(m.ttl))
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: opening a session: %w", err)
	}
	val, _ := json.Marshal(m.selfNow())
	key := m.keys.node(m.cfg.Self.ID)
	resp, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(s.Lease()))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err == nil && !resp.Succeeded {
		err = ErrNodeIDTaken
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			var other Node
			_ = json.Unmarshal(kvs[0].Value, &other)
			err = fmt.Errorf("%w: node %d is registered by a live node (kafka %s, lease %x); it is dead once its lease expires, within %ds of its last contact with etcd",
				ErrNodeIDTaken, m.cfg.Self.ID, other.KafkaAddr, kvs[0].Lease, m.ttl)
		}
	}
	if err != nil {
		s.Close()
		return nil, 0, fmt.Errorf("cluster: registering node %d: %w", m.cfg.Self.ID, full(err))
	}
	return s, resp.Header.Revision, nil
}

// run lives as long as the Member: it serves each session until its lease
// is lost, then registers again.
func (m *Member) run(ctx context.Context, s *concurrency.Session, rev int64) {
	defer m.wg.Done()
	for {
		m.serve(ctx, s, rev)
		if ctx.Err() != nil {
			m.endSession(s)
			return
		}
		// Logged before the state changes, so whoever sees the change can
		// also see why.
		m.log.Warn("cluster: lease lost; this node leads nothing until it registers again", "lease", fmt.Sprintf("%x", s.Lease()))
		m.setSession(nil)
		m.metrics.sessionsLost.Inc()
		stale := m.dropLease(ctx, s)
		if s, rev = m.reregister(ctx, stale); s == nil {
			return
		}
		m.log.Info("cluster: registered again", "lease", fmt.Sprintf("%x", s.Lease()))
		m.setSession(s)
	}
}

// serve campaigns for controller and, while elected, places partitions,
// until the session ends or ctx does. The session ends when its keepalives
// stop (the lease expired, or etcd was out of reach for the TTL), or as
// soon as the view shows this node's key gone from its lease (revoked, or
// expired while the keepalives were slow to tell), registered at rev.
func (m *Member) serve(ctx context.Context, s *concurrency.Session, rev int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer cancel()
		for {
			m.mu.Lock()
			changed := m.changed
			gone := m.view.revs[rangeNodes] >= rev && m.view.nodeLeases[m.cfg.Self.ID] != int64(s.Lease())
			m.mu.Unlock()
			if gone {
				m.setSession(nil) // Live is false from now, before the term winds down
				return
			}
			select {
			case <-s.Done():
				m.setSession(nil)
				return
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	for ctx.Err() == nil {
		e := concurrency.NewElection(s, m.keys.controller())
		if err := e.Campaign(ctx, strconv.Itoa(int(m.cfg.Self.ID))); err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return // the lease is gone before the keepalives or the view could tell
			}
			if ctx.Err() == nil {
				m.log.Warn("cluster: campaign for controller failed", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		t := term{key: e.Key(), rev: e.Rev()}
		m.setTerm(t)
		m.metrics.elections.Inc()
		m.log.Info("cluster: elected controller", "term", t.rev)
		err := m.control(ctx, t)
		m.setTerm(term{})
		if ctx.Err() != nil {
			return // the session's end (or Close) ends the term
		}
		// The session lives but the election key is gone: stand again.
		m.log.Warn("cluster: controller term ended", "term", t.rev, "err", err)
		resign, cancelResign := context.WithTimeout(ctx, time.Duration(m.ttl)*time.Second)
		_ = e.Resign(resign)
		cancelResign()
	}
}

// reregister registers this node with a new session, retrying until it
// works or ctx ends (nil). A stale lease (not 0) is the lost session's,
// which etcd may still hold: it is revoked first, or its key would refuse
// the new registration until it expires.
func (m *Member) reregister(ctx context.Context, stale clientv3.LeaseID) (*concurrency.Session, int64) {
	wait := 200 * time.Millisecond
	for ctx.Err() == nil {
		if stale != 0 && m.revoke(ctx, stale) {
			stale = 0
		}
		s, rev, err := m.register(ctx)
		if err == nil {
			return s, rev
		}
		if ctx.Err() == nil {
			m.log.Warn("cluster: registering again failed; retrying", "err", err, "in", wait)
		}
		sleep(ctx, wait)
		// While etcd is down each attempt already waits out its timeouts;
		// a short pause gets the node back soon after etcd is.
		wait = min(2*wait, time.Second)
	}
	return nil, 0
}

// endSession is Close's end of a session: revoking the lease deletes the
// node's key and its election key at once (resigning, if it was
// controller), so the others need not wait a TTL.
func (m *Member) endSession(s *concurrency.Session) {
	m.setSession(nil)
	if err := s.Close(); err != nil {
		m.log.Warn("cluster: revoking the lease", "err", err)
	}
}

// dropLease stops a lost session's keepalives and revokes its lease in case
// etcd still holds it (the client gave up first), so the node's old key does
// not stand in the way of its new one. It returns the lease if the revoke
// did not reach etcd (etcd is down or restarting: a restarted etcd gives
// every lease a full TTL again), for reregister to revoke.
func (m *Member) dropLease(ctx context.Context, s *concurrency.Session) clientv3.LeaseID {
	s.Orphan()
	if m.revoke(ctx, s.Lease()) {
		return 0
	}
	return s.Lease()
}

// revoke reports whether etcd holds lease id no more.
func (m *Member) revoke(ctx context.Context, id clientv3.LeaseID) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := m.cli.Revoke(ctx, id)
	return err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound)
}

func (m *Member) setSession(s *concurrency.Session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.session = s
	m.live = s != nil
	m.metrics.live.Set(b2f(m.live))
	m.notifyLocked()
}

func (m *Member) setTerm(t term) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.term = t
	m.metrics.controller.Set(b2f(t.rev != 0))
}

// Close resigns, revokes the lease and stops watching. The etcd client
// stays open: it is the caller's.
func (m *Member) Close() error {
	m.closed.Do(func() {
		m.cancel()
		m.wg.Wait()
		m.log.Info("cluster: left")
	})
	return nil
}

// Node is this node's registration.
func (m *Member) Node() Node { return m.cfg.Self }

// Nodes lists the live nodes, by id.
func (m *Member) Nodes() []Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Collect(maps.Values(m.view.nodes))
	slices.SortFunc(out, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Controller is the controller's node id, -1 when none is known.
func (m *Member) Controller() int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view.controller()
}

// TopicRecords are the topics by name, as etcd records them.
func (m *Member) TopicRecords() map[string]Topic {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Topic, len(m.view.topics))
	for name, t := range m.view.topics {
		t.Topic.Incarnation = t.createRev
		out[name] = t.Topic
	}
	return out
}

// Placement is partition p of topic's record: where it is served, its
// ISR and spans; false while it is not placed (or the topic does not
// exist).
func (m *Member) Placement(topic string, p int32) (Partition, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.view.partitions[TopicPartition{topic, p}]
	return rec.Partition.clone(), ok
}

// Changed is closed at the view's next change (nodes, controller, topics,
// partitions, or this node's liveness); take a new one after each.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Live is false while this node's lease is lost: it must lead nothing
// until it has registered again, since the controller may have given its
// partitions to others.
func (m *Member) Live() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live
}

// Leads reports whether this node may serve partition p of topic as its
// leader now: it is live, the partition's record names it, and it is not
// handing it over. With its lease lost it leads nothing, whatever the
// records said.
func (m *Member) Leads(topic string, p int32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	tp := TopicPartition{topic, p}
	rec, ok := m.view.partitions[tp]
	return m.live && ok && rec.Leader == m.cfg.Self.ID && !m.fenced[tp] && !m.lostLogLocked(rec.Partition)
}

// LostLog reports whether p's record knows this node by another data
// folder than the one it runs on, or this node's copy of p is damaged: it
// lacks some of what made it a replica in sync, so it must not lead p even
// while the record still names it, before the controller has replaced it
// (placement.go).
func (m *Member) LostLog(p Partition) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lostLogLocked(p)
}

func (m *Member) lostLogLocked(p Partition) bool {
	if len(p.Replicas) < 2 {
		return false
	}
	want, known := p.Dirs[m.cfg.Self.ID]
	return known && want != "" && want != m.cfg.Self.Dir || slices.Contains(m.damaged, TopicPartition{p.Topic, p.Partition})
}

// selfNow is this node as it registers now.
func (m *Member) selfNow() Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	self := m.cfg.Self
	self.Damaged = slices.Clone(m.damaged)
	return self
}

// ReportDamaged registers the partitions whose local copy this node found
// damaged and has not refilled (Node.Damaged), replacing what it reported
// before: the controller counts it out of their ISRs and elects it for
// none until it has refilled and its leader has added it back. The node's
// key is rewritten under its current lease; between sessions the next
// registration carries it.
func (m *Member) ReportDamaged(ctx context.Context, tps []TopicPartition) error {
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	m.mu.Lock()
	same := slices.Equal(m.damaged, tps)
	m.damaged = slices.Clone(tps)
	m.mu.Unlock()
	lease := m.lease()
	if same || lease == 0 {
		return nil
	}
	val, _ := json.Marshal(m.selfNow())
	key := m.keys.node(m.cfg.Self.ID)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", lease)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).Commit()
	if err != nil {
		m.mu.Lock()
		m.damaged = nil // not registered: the next report writes again
		m.mu.Unlock()
		return fmt.Errorf("cluster: reporting damaged copies: %w", err)
	}
	if resp.Succeeded {
		m.log.Info("cluster: damaged local copies registered", "partitions", tps)
	}
	return nil
}

// CreateTopic records a topic with its configs (nil: none), if none of
// that name exists; the controller places its partitions next. The
// replication factor may not exceed the live nodes.
func (m *Member) CreateTopic(ctx context.Context, name string, partitions int32, rf int16, configs map[string]string) error {
	switch {
	case !validTopic(name):
		return fmt.Errorf("%w: %q", metadata.ErrInvalidTopic, name)
	case partitions < 1:
		return fmt.Errorf("%w: %d", metadata.ErrInvalidPartitions, partitions)
	case rf < 1:
		return &metadata.InvalidReplicationError{Factor: rf, Why: "below 1"}
	case int(rf) > len(m.Nodes()):
		return &metadata.InvalidReplicationError{Factor: rf, Why: fmt.Sprintf("%d live brokers", len(m.Nodes()))}
	}
	t := Topic{Name: name, Partitions: partitions, ReplicationFactor: rf, Created: time.Now().UTC(), Configs: configs}
	val, _ := json.Marshal(t)
	key := m.keys.topic(name)
	for range 16 {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(m.keys.deletion(name)), "=", 0)}
		bound, err := m.topicsBound(ctx, name, int(partitions))
		if err != nil {
			return err
		}
		resp, err := m.cli.Txn(ctx).
			If(append(cmps, bound...)...).
			Then(clientv3.OpPut(key, string(val))).
			Else(clientv3.OpGet(m.keys.deletion(name)), clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("cluster: creating topic %s: %w", name, full(err))
		}
		if resp.Succeeded {
			m.log.Info("cluster: topic created", "topic", name, "partitions", partitions, "replication_factor", rf)
			return nil
		}
		if len(resp.Responses[0].GetResponseRange().Kvs) > 0 {
			return fmt.Errorf("%w: %s: its objects are being removed from the bucket; try again shortly", metadata.ErrTopicDeleting, name)
		}
		if len(resp.Responses[1].GetResponseRange().Kvs) > 0 {
			return fmt.Errorf("%w: %s", metadata.ErrTopicExists, name)
		}
		// Another topic changed since the count: count again.
	}
	return fmt.Errorf("cluster: topics kept changing while topic %s was created", name)
}

// topicsBound checks, against the cluster's topic records, that more
// partitions keep the cluster within MaxPartitions and that a new topic's
// name (if not "") is one Kafka takes beside them (metadata.CheckTopicName),
// and returns the compare that holds both until the write: no topic record
// changed since they were read.
func (m *Member) topicsBound(ctx context.Context, name string, more int) ([]clientv3.Cmp, error) {
	if m.cfg.MaxPartitions <= 0 && name == "" {
		return nil, nil
	}
	resp, err := m.cli.Get(ctx, m.keys.topics(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("cluster: counting the cluster's partitions: %w", err)
	}
	has := 0
	var names []string
	for _, kv := range resp.Kvs {
		var t Topic
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return nil, fmt.Errorf("cluster: topic record %s: %w", kv.Key, err)
		}
		has += int(t.Partitions)
		names = append(names, t.Name)
	}
	if name != "" {
		if err := metadata.CheckTopicName(name, names); err != nil {
			return nil, err
		}
	}
	if m.cfg.MaxPartitions > 0 && has+more > m.cfg.MaxPartitions {
		return nil, &metadata.PartitionLimitError{Max: m.cfg.MaxPartitions, Has: has, More: more}
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(m.keys.topics()), "<", resp.Header.Revision+1).WithPrefix()}, nil
}

// CreatePartitions grows a topic to count partitions: the topic record
// gets the new count with a compare-and-swap on the revision it was read
// at (a concurrent change, or a delete and create, makes it read again),
// and the controller places the new partitions as it places a new topic's
// (Place places any topic's missing partitions). Existing partitions are
// not touched.
func (m *Member) CreatePartitions(ctx context.Context, name string, count int32) error {
	if !validTopic(name) {
		return fmt.Errorf("%w: %s", metadata.ErrUnknownTopic, name)
	}
	key := m.keys.topic(name)
	for range 16 {
		resp, err := m.cli.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("cluster: reading topic %s: %w", name, err)
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("%w: %s", metadata.ErrUnknownTopic, name)
		}
		kv := resp.Kvs[0]
		var t Topic
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return fmt.Errorf("cluster: topic %s: %w", name, err)
		}
		if count <= t.Partitions {
			return &metadata.InvalidPartitionsError{Topic: name, Has: t.Partitions, Asked: count}
		}
		from := t.Partitions
		t.Partitions = count
		val, _ := json.Marshal(t)
		bound, err := m.topicsBound(ctx, "", int(count-from))
		if err != nil {
			return err
		}
		txn, err := m.cli.Txn(ctx).
			If(append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)}, bound...)...).
			Then(clientv3.OpPut(key, string(val))).
			Commit()
		if err != nil {
			return fmt.Errorf("cluster: growing topic %s: %w", name, full(err))
		}
		if txn.Succeeded {
			m.log.Info("cluster: partitions created", "topic", name, "from", from, "to", count)
			return nil
		}
	}
	return fmt.Errorf("cluster: topic %s kept changing while its partitions were added", name)
}

// Topic is one topic as the view has it.
func (m *Member) Topic(name string) (Topic, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.view.topics[name]
	t.Topic.Incarnation = t.createRev
	return t.Topic, ok
}

// AlterTopicConfigs changes a topic's configs: change gets the current ones
// (never to be modified) and returns the new. The record is rewritten only
// if it is still the one read (a compare-and-swap on its mod revision);
// when another writer came first, it is read again and change applied
// again. An error from change is returned as it is.
func (m *Member) AlterTopicConfigs(ctx context.Context, name string, change func(map[string]string) (map[string]string, error)) error {
	if !validTopic(name) {
		return fmt.Errorf("%w: %s", metadata.ErrUnknownTopic, name)
	}
	key := m.keys.topic(name)
	for range 16 {
		resp, err := m.cli.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("cluster: reading topic %s: %w", name, err)
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("%w: %s", metadata.ErrUnknownTopic, name)
		}
		var t Topic
		if err := json.Unmarshal(resp.Kvs[0].Value, &t); err != nil {
			return fmt.Errorf("cluster: topic %s: %w", name, err)
		}
		configs, err := change(t.Configs)
		if err != nil {
			return err
		}
		t.Configs = configs
		val, _ := json.Marshal(t)
		txn, err := m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(key, string(val))).
			Commit()
		if err != nil {
			return fmt.Errorf("cluster: altering topic %s: %w", name, err)
		}
		if txn.Succeeded {
			m.log.Info("cluster: topic configs altered", "topic", name, "configs", configs)
			return nil
		}
	}
	return fmt.Errorf("cluster: topic %s kept changing while its configs were altered", name)
}

// DeleteTopic removes a topic and its partitions' records in one
// transaction, which also marks the name as being deleted: the controller
// clears what the topic left in the bucket (Config.ClearTopic), and until
// then the name cannot be created again, so no object of the old topic is
// ever read as the new one's.
func (m *Member) DeleteTopic(ctx context.Context, name string) error {
	if !validTopic(name) {
		return fmt.Errorf("%w: %s", metadata.ErrUnknownTopic, name)
	}
	key := m.keys.topic(name)
	for {
		got, err := m.cli.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("cluster: deleting topic %s: %w", name, err)
		}
		if len(got.Kvs) == 0 {
			return fmt.Errorf("%w: %s", metadata.ErrUnknownTopic, name)
		}
		var t Topic
		if err := json.Unmarshal(got.Kvs[0].Value, &t); err != nil {
			return fmt.Errorf("cluster: deleting topic %s: its record: %w", name, err)
		}
		mark, _ := json.Marshal(deletion{Partitions: t.Partitions, Incarnation: got.Kvs[0].CreateRevision, Deleted: time.Now().UTC()})
		resp, err := m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", got.Kvs[0].ModRevision)).
			Then(clientv3.OpDelete(key), clientv3.OpDelete(m.keys.topicPartitions(name), clientv3.WithPrefix()),
				clientv3.OpDelete(m.keys.topicCandidates(name), clientv3.WithPrefix()),
				clientv3.OpDelete(m.keys.topicSeals(name), clientv3.WithPrefix()),
				clientv3.OpPut(m.keys.deletion(name), string(mark))).
			Commit()
		if err != nil {
			return fmt.Errorf("cluster: deleting topic %s: %w", name, err)
		}
		if resp.Succeeded {
			m.log.Info("cluster: topic deleted", "topic", name)
			return nil
		}
		// Changed between the read and the write (its partitions grew):
		// read it again.
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// lease is the current session's lease, 0 between sessions: what claims
// are held under (claims.go).
func (m *Member) lease() clientv3.LeaseID {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session == nil {
		return 0
	}
	return m.session.Lease()
}

// currentTerm is this node's controller term, zero when it is not
// controller.
func (m *Member) currentTerm() term {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.term
}
