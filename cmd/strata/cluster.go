package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"strata/api/kafka"
	"strata/catalog"
	"strata/catalog/etcdcat"
	"strata/catalog/offsets"
	"strata/cluster"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/icetable"
	"strata/metadata"
	"strata/partition"
	"strata/tiering"
	"strata/tiering/objstore"
	"strata/topicconfig"
)

// meta is where a node keeps its metadata: Pebble in the data folder on a
// single node; etcd in a cluster (docs/cluster.md).
type meta struct {
	etcd    *clientv3.Client // nil on a single node
	cat     catalog.Catalog
	offsets kafka.OffsetStore
	closers []func() error
}

func (m *meta) Close() {
	for i := len(m.closers) - 1; i >= 0; i-- {
		m.closers[i]()
	}
}

func openMeta(ctx context.Context, cfg *Config, reg prometheus.Registerer, log *slog.Logger) (*meta, error) {
	m := &meta{}
	if !cfg.Cluster.Enabled() {
		cat, err := openCatalog(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		m.cat = cat
		m.closers = append(m.closers, cat.Close)
		committed, err := offsets.Open(filepath.Join(cfg.DataDir, "groups"))
		if err != nil {
			m.Close()
			return nil, err
		}
		m.offsets = committed
		m.closers = append(m.closers, committed.Close)
		return m, nil
	}
	if err := bindFolder(cfg); err != nil {
		return nil, err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Cluster.EtcdEndpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(etcdReconnect)}})
	if err != nil {
		return nil, fmt.Errorf("cluster.etcd_endpoints %v: %w", cfg.Cluster.EtcdEndpoints, err)
	}
	m.etcd = c
	m.closers = append(m.closers, c.Close)
	// Each node's shards are its own until replication lets several nodes
	// hold one: its catalog is its own namespace in the cluster's etcd.
	cat, err := etcdcat.Open(ctx, etcdcat.Config{Client: c, Prefix: nodePrefix(cfg), Metrics: etcdcat.NewMetrics(reg),
		Logger: log.With("component", "catalog")})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("catalog in etcd (%v): %w", cfg.Cluster.EtcdEndpoints, err)
	}
	m.cat = cat
	m.closers = append(m.closers, cat.Close)
	committed := offsets.OpenEtcd(c, cfg.Cluster.EtcdPrefix)
	committed.LimitWrites(offsets.CommitWriteRate(int64(cfg.Cluster.EtcdQuotaBytes), time.Duration(cfg.Cluster.EtcdCompactionRetention)))
	if n, err := committed.MigrateLegacy(ctx); err != nil {
		m.Close()
		return nil, err
	} else if n > 0 {
		log.Info("committed offsets moved to one etcd key per group-partition", "groups", n)
	}
	m.offsets = committed
	return m, nil
}

// etcdReconnect caps gRPC's wait between attempts to reach an etcd that is
// down at a second. Its default cap is two minutes: after a long etcd
// outage a node would stay out of the cluster (leading nothing) for up to
// that long after etcd is back, since nothing the client asks makes gRPC
// try sooner.
var etcdReconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 5 * time.Second,
}

func nodePrefix(cfg *Config) string {
	return cfg.Cluster.EtcdPrefix + "/node/" + strconv.Itoa(cfg.Node.ID)
}

// The Kafka front end finds these on its metadata by assertion; a
// cluster's must have them: split logs read through the leader,
// CreateTopics' wait woken by the view's changes.
var (
	_ kafka.SplitLog   = (*cluster.Member)(nil)
	_ metadata.Changes = (*cluster.Member)(nil)
)

// joinCluster registers this node, listening for Kafka at kafkaAddr; the
// member is the metadata both front ends answer from. Its handoffs fence
// partitions through gates, which the append path holds.
func joinCluster(ctx context.Context, cfg *Config, m *meta, cold objstore.Bucket, tables *icetable.Tables, broker topicconfig.Broker, kafkaAddr, adminAddr string, damaged []cluster.TopicPartition, gates *partition.Gates, reg prometheus.Registerer, log *slog.Logger) (*cluster.Member, error) {
	if cfg.Node.AdvertisedKafkaAddr != "" {
		kafkaAddr = cfg.Node.AdvertisedKafkaAddr
	}
	id := int32(cfg.Node.ID)
	dir, err := folderID(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data folder %s: its identity: %w", cfg.DataDir, err)
	}
	jc := cluster.Config{Client: m.etcd, Prefix: cfg.Cluster.EtcdPrefix,
		Self: cluster.Node{ID: id, KafkaAddr: kafkaAddr, AdminAddr: adminAddr, Dir: dir, Damaged: damaged}, SessionTTL: time.Duration(cfg.Cluster.SessionTTL),
		Gates: gates, Logger: log.With("component", "cluster"), Registerer: reg, TopicDefaults: broker, ReplicaGrace: time.Duration(cfg.Tiering.ReplicaGrace),
		MaxPartitions: cfg.Kafka.MaxPartitions, EtcdCompactionRetention: time.Duration(cfg.Cluster.EtcdCompactionRetention),
		EtcdQuotaBytes: int64(cfg.Cluster.EtcdQuotaBytes), EtcdCheckInterval: time.Duration(cfg.Cluster.EtcdCheckInterval),
		ClearTopic: func(ctx context.Context, topic string, partitions int32) error {
			// The bucket is shared: a deleted topic's objects are every
			// node's, so the controller clears them, once; the table
			// forgets them first, so no snapshot a reader loads names one
			// gone.
			if tables != nil {
				if err := tables.ForgetTopic(ctx, topic, partitions); err != nil {
					return err
				}
			}
			forget := tiering.ForgetShard(cold, cfg.Tiering.Prefix, log.With("component", "tiering"))
			for p := int32(0); p < partitions; p++ {
				if err := forget(ctx, store.ShardName(topic, p)); err != nil {
					return err
				}
			}
			return nil
		}}
	// A node restarted within a session TTL of its crash finds its old
	// registration still alive: wait for the lease to expire.
	deadline := time.Now().Add(2*time.Duration(cfg.Cluster.SessionTTL) + 5*time.Second)
	var fullSince time.Time
	for {
		member, err := cluster.Join(ctx, jc)
		if err == nil {
			return member, nil
		}
		switch {
		case errors.Is(err, rpctypes.ErrNoSpace):
			// etcd's NOSPACE alarm: no lease until an operator frees it.
			// The node waits, as it would for etcd to come back, rather
			// than exit and leave its partitions' copies out for longer.
			if fullSince.IsZero() || time.Since(fullSince) > 30*time.Second {
				fullSince = time.Now()
				log.Error("cluster: etcd is full (its NOSPACE alarm is raised) and refuses this node's lease; waiting until it takes writes: "+
					"etcdctl compact <current revision>, etcdctl defrag, etcdctl alarm disarm (docs/cluster.md, \"When etcd is full\")", "node", id)
			}
		case !errors.Is(err, cluster.ErrNodeIDTaken) || time.Now().After(deadline):
			return nil, fmt.Errorf("joining the cluster as node %d: %w", id, err)
		default:
			log.Warn("node id still registered, by this node's previous run or another node; waiting for its lease to expire", "node", id, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// nodeFile, in a cluster node's data folder, names the node and cluster it
// belongs to: its shards are that node's, its catalog that node's entries
// in etcd, so the folder started under another node.id (swapped configs)
// would serve empty logs over data it cannot see.
const nodeFile = "NODE"

func bindFolder(cfg *Config) error {
	want := fmt.Sprintf("node.id=%d cluster.etcd_prefix=%s\n", cfg.Node.ID, cfg.Cluster.EtcdPrefix)
	path := filepath.Join(cfg.DataDir, nodeFile)
	got, err := os.ReadFile(path)
	switch {
	case err == nil && string(got) == want:
		return nil
	case err == nil:
		return fmt.Errorf("data folder %s belongs to %s; this node is started as %s (a data folder is one node's)",
			cfg.DataDir, strings.TrimSpace(string(got)), strings.TrimSpace(want))
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "catalog")); err == nil {
		// A single node's folder (its catalog is local): joining a
		// cluster would leave its shards unseen.
		return fmt.Errorf("data folder %s holds a single node's data; a cluster node starts on an empty folder", cfg.DataDir)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(want); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// dirFile, in a cluster node's data folder, holds the folder's identity:
// random, made with the folder, registered with the node (cluster.Node.Dir).
// A node back on a new folder (a replaced disk, a wiped folder) registers a
// new one, and the controller takes it out of the ISRs its old folder was
// in before it can lead them (docs/replication.md, "A replica that lost its
// log"), as Kafka's directory id does.
const dirFile = "DIRECTORY_ID"

// folderID is the identity of the data folder at dataDir, made on its
// first start. A folder from before identities gets one too: its ISRs
// recorded none, so it is taken at its word.
func folderID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, dirFile)
	got, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(got))
		if len(id) != 32 {
			return "", fmt.Errorf("%s holds %q, not a directory id", path, id)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	// Written whole or not at all: a torn file would refuse the next start.
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(id + "\n"); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	d, err := os.Open(dataDir)
	if err != nil {
		return "", err
	}
	defer d.Close()
	return id, d.Sync()
}

// damagedCopies are the partitions whose local copy the engine found
// damaged (at start, or by a scrub) and that are not refilled yet.
func damagedCopies(ctx context.Context, e *segment.Engine) []cluster.TopicPartition {
	if e == nil {
		return nil
	}
	shards, err := e.Shards(ctx)
	if err != nil {
		return nil
	}
	var out []cluster.TopicPartition
	for _, sh := range shards {
		if tp, ok := store.ParseShard(sh); ok && e.Damage(sh) != nil {
			out = append(out, cluster.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
		}
	}
	return out
}

// reportDamage keeps the node's registration's damaged copies
// (cluster.Node.Damaged) in step with the engine's, every interval: the
// controller counts the node out of those partitions' ISRs until each is
// refilled (docs/replication.md, "A damaged copy").
func reportDamage(ctx context.Context, m *cluster.Member, e *segment.Engine, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := m.ReportDamaged(ctx, damagedCopies(ctx, e)); err != nil && ctx.Err() == nil {
			log.Warn("reporting damaged copies", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// handOver hands partitions this node leads to the node the controller
// chose for their next segment, each at its roll (docs/cluster.md, "A
// partition moves at a roll").
func handOver(ctx context.Context, m *cluster.Member, e *segment.Engine, rolled <-chan string, log *slog.Logger) {
	for {
		var shard string
		select {
		case <-ctx.Done():
			return
		case shard = <-rolled:
		}
		tp, ok := store.ParseShard(shard)
		if !ok {
			continue
		}
		err := m.HandOff(ctx, tp.Topic, tp.Partition, func(ctx context.Context) (int64, error) { return sealActive(ctx, e, shard) })
		if err != nil && ctx.Err() == nil {
			log.Error("cluster: handing a partition over at its roll", "shard", shard, "err", err)
		}
	}
}

// sealActive seals a shard's active segment, if it holds anything, and
// returns its log end: a fenced partition's last offset plus one.
func sealActive(ctx context.Context, e *segment.Engine, shard string) (int64, error) {
	end, err := e.LogEnd(ctx, shard)
	if err != nil {
		return 0, err
	}
	n, err := e.ActiveBytes(shard)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		if err := e.RollAt(ctx, shard, end); err != nil {
			return 0, err
		}
	}
	return int64(end), nil
}

// reportLoad tells the cluster, every interval, the bytes of this node's
// local segments, for placement to weigh (etcd is written only when the
// figure moved by a tenth).
func reportLoad(ctx context.Context, m *cluster.Member, e *segment.Engine, interval time.Duration, log *slog.Logger) {
	for {
		if n, err := localBytes(ctx, e); err != nil {
			log.Warn("cluster: measuring this node's local bytes", "err", err)
		} else if err := m.ReportLoad(ctx, n); err != nil && ctx.Err() == nil {
			log.Warn("cluster: reporting this node's load", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

func localBytes(ctx context.Context, e *segment.Engine) (int64, error) {
	shards, err := e.Shards(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, sh := range shards {
		b, err := e.LocalBytes(sh)
		if err != nil {
			continue // deleted meanwhile
		}
		n += b
	}
	return n, nil
}
