// Command strata runs the strata service and its operator tools.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/api/admin"
	"strata/api/kafka"
	"strata/cluster"
	"strata/peer"
	"strata/replica"
	"strata/tiering"
)

const usage = `strata: a segment-log store that tiers sealed segments to Parquet in object storage.

Usage:
  strata serve [--config FILE] [--data-dir DIR] [--kafka-addr HOST:PORT] [--admin-addr HOST:PORT] [--set key=value ...]
  strata config [--config FILE] [--set key=value ...]   print the effective configuration
  strata catalog ls|rebuild [--config FILE]              list the catalog / rebuild it from the bucket (service stopped)
  strata catalog ddl --topic T --location URI            print a Hive CREATE EXTERNAL TABLE for a topic's objects
  strata tier run [--admin-addr HOST:PORT]               run one tiering pass in the running service
  strata topic describe T [--admin-addr HOST:PORT]       a topic's configs (with sources), partitions and bytes per tier
  strata topic alter T --set key=value [--delete key]    change a topic's configs (docs/config.md, "Topic configs")
  strata bench [--brokers HOST:PORT] [--records N] [--size BYTES] [--partitions N]   load a running service
  strata segment dump FILE|DIR                           print every record of a segment file, a shared file, or a shared shard's folder
  strata segment verify DIR                              check a shard folder's segments (or a shared shard's chunks) offline
  strata segment repair --shard S [--config FILE]        cut a shard's damaged log at the damage (service stopped)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:], os.Stdout)
	case "config":
		err = printConfig(os.Args[2:], os.Stdout)
	case "segment":
		err = segmentCmd(os.Args[2:], os.Stdout)
	case "catalog":
		err = catalogCmd(os.Args[2:], os.Stdout)
	case "tier":
		err = tierCmd(os.Args[2:], os.Stdout)
	case "topic":
		err = topicCmd(os.Args[2:], os.Stdout)
	case "bench":
		err = benchCmd(os.Args[2:], os.Stdout)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "strata: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "strata:", err)
		os.Exit(1)
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// configFlags parses the flags every command shares and loads the config.
func configFlags(name string, args []string) (*Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	file := fs.String("config", "", "YAML config file, read on top of the embedded default")
	dataDir := fs.String("data-dir", "", "overrides data_dir")
	adminAddr := fs.String("admin-addr", "", "overrides admin_addr")
	kafkaAddr := fs.String("kafka-addr", "", "overrides kafka_addr")
	var sets multiFlag
	fs.Var(&sets, "set", "path.to.key=value; repeatable; overrides the file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	if *dataDir != "" {
		sets = append([]string{"data_dir=" + *dataDir}, sets...)
	}
	if *adminAddr != "" {
		sets = append([]string{"admin_addr=" + *adminAddr}, sets...)
	}
	if *kafkaAddr != "" {
		sets = append([]string{"kafka_addr=" + *kafkaAddr}, sets...)
	}
	return LoadConfig(*file, sets)
}

func printConfig(args []string, out io.Writer) error {
	cfg, err := configFlags("config", args)
	if err != nil {
		return err
	}
	cfg.Cold.S3.SecretKey = redact(cfg.Cold.S3.SecretKey)
	cfg.AdminToken = redact(cfg.AdminToken)
	for i := range cfg.Kafka.SASL.Users {
		cfg.Kafka.SASL.Users[i].Password = redact(cfg.Kafka.SASL.Users[i].Password)
	}
	return writeYAML(out, cfg)
}

func redact(s string) string {
	if s == "" {
		return ""
	}
	return "REDACTED"
}

func newLogger(c LogConfig, out io.Writer) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(out, opts))
	}
	return slog.New(slog.NewTextHandler(out, opts))
}

// serve runs until SIGINT or SIGTERM.
func serve(args []string, logOut io.Writer) error {
	cfg, err := configFlags("serve", args)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, logOut)
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(ctx, cfg, log, nil)
}

// Addrs are where a running service listens.
type Addrs struct{ Admin, Kafka string }

// run serves until ctx ends; ready, if set, learns the listening addresses.
func run(ctx context.Context, cfg *Config, log *slog.Logger, ready func(Addrs)) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data_dir %q: %w", cfg.DataDir, err)
	}
	cold, err := openColdTier(cfg.Cold, reg)
	if err != nil {
		return fmt.Errorf("cold tier (%s): %w", cfg.Cold.Backend, err)
	}
	defer cold.Close()
	checkCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = cold.Check(checkCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("cold tier (%s): %w", cfg.Cold.Backend, err)
	}
	log.Info("cold tier ready", "backend", cold.Kind())

	md, err := openMeta(ctx, cfg, reg, log)
	if err != nil {
		return err
	}
	defer md.Close() // after storage: the engine's last events reach the catalog
	cat := md.cat
	topics := &topicView{broker: topicDefaults(cfg)}
	if !cfg.Cluster.Enabled() {
		if topics.local, err = kafka.NewCatalogTopics(cat); err != nil {
			return err
		}
	}
	// A single node's folder from before the engine kept its manifest has
	// its segments in its own catalog; a cluster node's catalog is in etcd
	// and never predates the manifest.
	adopt := !cfg.Cluster.Enabled() && !adopted(cfg.DataDir)
	rolled := &rolls{shards: make(chan string, 1024)} // in a cluster: shards the engine rolled
	store, err := openStorage(cfg, cold, cat, topics, rolled, log)
	if err != nil {
		return fmt.Errorf("storage in %s: %w", cfg.DataDir, err)
	}
	defer func() {
		if err := store.Close(); err != nil {
			log.Error("closing storage", "err", err)
		}
	}()
	// What runs beside the servers stops before storage closes, also when
	// a server fails and ctx is still live.
	bg, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	if adopt {
		if err := adoptCatalog(cat, store.SegmentEngine(), log); err != nil {
			return err
		}
		if err := markAdopted(cfg.DataDir); err != nil {
			return err
		}
	}
	reg.MustRegister(newEngineCollector(store.SegmentEngine()))
	shards, _ := store.Shards(ctx)
	log.Info("storage ready", "shards", len(shards), "default_engine", cfg.Engine.Default, "fsync", cfg.Engine.Fsync)
	job := newTiering(cfg, store.SegmentEngine(), cat, cold, topics, reg, log)
	defer job.Close() // before storage closes: a run in progress finishes first
	if !cfg.Tiering.Enabled {
		// Without tiering the whole log is local; with it, retention spans
		// every tier and the tiering job applies it (docs/tiering.md).
		go store.SegmentEngine().RetainLoopBy(bg, topics.retention, time.Duration(cfg.Retention.Interval))
	}

	sec, err := openSecurity(ctx, cfg, md.etcd, log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin_addr %s: %w", cfg.AdminAddr, err)
	}
	kln, err := net.Listen("tcp", cfg.KafkaAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("kafka_addr %s: %w", cfg.KafkaAddr, err)
	}
	var view kafka.Cluster     // nil: this node alone
	var member *cluster.Member // nil: this node alone
	var peers *peer.Client     // nil: this node alone
	var peerSecret []byte
	if cfg.Cluster.Enabled() {
		var opts []kgo.Opt
		if opts, err = peerOpts(cfg); err != nil {
			ln.Close()
			kln.Close()
			return err
		}
		if peerSecret, err = cluster.PeerSecret(ctx, md.etcd, cfg.Cluster.EtcdPrefix); err != nil {
			ln.Close()
			kln.Close()
			return err
		}
		if member, view, err = joinCluster(ctx, cfg, md, cold, topics.broker, kln.Addr().String(), ln.Addr().String(), damagedCopies(ctx, store.SegmentEngine()), reg, log); err != nil {
			ln.Close()
			kln.Close()
			return err
		}
		topics.member.Store(member)
		peers = peer.NewClient(peer.ClientConfig{Self: view.Self(), Opts: opts, Secret: peerSecret,
			Addr: func(node int32) (string, bool) { return kafka.BrokerAddr(view, node) }})
		defer peers.Close() // after ksrv.Shutdown too, on every way out
		defer func() {
			// A tiering run finishes first, while its claims (under this
			// node's lease) still hold; then the lease is revoked, and
			// others see this node go at once.
			job.Close()
			member.Close()
		}()
		go member.KeepShards(bg, store, log.With("component", "cluster"))
		go handOver(bg, member, store.SegmentEngine(), rolled.shards, log.With("component", "cluster"))
		go reportLoad(bg, member, store.SegmentEngine(), 15*time.Second, log.With("component", "cluster"))
		go reportDamage(bg, member, store.SegmentEngine(), time.Second, log.With("component", "cluster"))
	}
	var claims tiering.Claims // nil: this node alone tiers its segments
	var copies *clusterReplicas
	if member != nil {
		claims = member
		if copies, err = newClusterReplicas(cfg.DataDir, store.SegmentEngine(), member, peers, reg, log.With("component", "tiering")); err != nil {
			ln.Close()
			kln.Close()
			return err
		}
		job.Replicas = copies
	}
	if err := startTiering(ctx, cfg, job, claims, log); err != nil {
		ln.Close()
		kln.Close()
		return err
	}
	var topicStore kafka.TopicStore // a cluster keeps them in etcd, through its view
	if topics.local != nil {
		topicStore = topics.local
	}
	logDir, err := filepath.Abs(cfg.DataDir) // Kafka names its log dirs by absolute path
	if err != nil {
		logDir = cfg.DataDir
	}
	var repl *replica.Node       // nil: this node alone
	var peerFetches *peer.Server // nil: this node alone
	var ksrv *kafka.Server
	if member != nil {
		repl = replica.NewNode(replica.NodeConfig{Self: int32(cfg.Node.ID), Store: store,
			Meta:       replicaMeta{m: member, self: int32(cfg.Node.ID), broker: topics.broker, warned: &sync.Map{}},
			LagTimeMax: time.Duration(cfg.Cluster.ReplicaLagTimeMax), FetchRate: int64(cfg.Cluster.FollowerThrottledRate),
			Log: log.With("component", "replica"), Registerer: reg,
			Wake: func(shard string) { ksrv.WakeShard(shard) }, Lead: func(shard string) { ksrv.ForgetProducers(shard) },
			BatchEnd: kafka.EndsBatch})
		peerFetches = &peer.Server{Store: store, Leader: repl, Log: log.With("component", "peer")}
	}
	ksrv = kafka.New(store, kafka.Config{
		AutoCreateTopics: cfg.Kafka.AutoCreateTopics, DefaultPartitions: cfg.Kafka.DefaultPartitions, DefaultReplicationFactor: cfg.Kafka.DefaultReplicationFactor,
		MaxRequestBytes:        int32(min(int64(cfg.Kafka.MaxRequestBytes), 1<<30)),
		MaxControlRequestBytes: int32(min(int64(cfg.Kafka.MaxControlRequestBytes), 1<<30)),
		MaxInflightBytes:       int64(cfg.Kafka.MaxInflightRequestBytes), MaxInflatedBytes: int(cfg.Kafka.MaxInflatedRequestBytes),
		MaxMessageBytes: int32(cfg.Kafka.MaxMessageBytes), TopicDefaults: topics.broker, Topics: topicStore,
		MaxPartitions: cfg.Kafka.MaxPartitions, MaxPartitionsPerTopic: int32(cfg.Kafka.MaxPartitionsPerTopic), OffsetMetadataMaxBytes: int(min(int64(cfg.Kafka.OffsetMetadataMaxBytes), 1<<20)),
		MaxConnections: cfg.Kafka.MaxConnections, MaxConnectionsPerIP: cfg.Kafka.MaxConnectionsPerIP,
		FrameTimeout: time.Duration(cfg.Kafka.FrameTimeout), MaxReadAheadBytes: int64(cfg.Kafka.FetchReadAheadBytes),
		FetchMaxBytes: int32(min(int64(cfg.Kafka.FetchMaxBytes), 1<<30)), MaxInflightFetchBytes: int64(cfg.Kafka.MaxInflightFetchBytes),
		LogDir: logDir,
		Logger: log.With("component", "kafka"), Metrics: kafka.NewMetrics(reg), Offsets: md.offsets, Cluster: view, Peers: peers, PeerFetches: peerFetches, PeerUser: cfg.Cluster.PeerUser, PeerSecret: peerSecret,
		GroupInitialWait: time.Duration(cfg.Kafka.GroupInitialRebalanceDelay),
		Auth:             sec.auth, Replication: repl,
	})
	if repl != nil {
		rolled.replication.Store(repl)
		go repl.Run(bg, peers)
	}
	var scrub *scrubber
	if e := store.SegmentEngine(); e != nil && cfg.Engine.ScrubSchedule != "off" {
		var refill func(string) bool
		if repl != nil {
			refill = repl.Refill
		}
		scrub = newScrubber(e, refill, reg, log.With("component", "scrub"))
		if err := scheduleScrub(bg, scrub, cfg.Engine.ScrubSchedule); err != nil {
			return err
		}
	}
	adminCfg := admin.Config{Store: store, Engine: store.SegmentEngine(), Catalog: cat, Cluster: member, Job: job,
		Topics: ksrv, Token: cfg.AdminToken, Authenticated: sec.auth != nil, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})}
	if scrub != nil {
		adminCfg.Scrub = scrub
	}
	if adminCfg.Locked() {
		log.Warn("kafka.sasl is on and admin_token is not set: the admin API serves only /healthz, /readyz and /metrics; set admin_token to read records, run tiering and change configs over it")
	}
	api := admin.Handler(ctx, adminCfg)
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(sec.adminListener(ln)) }()

	go func() { served <- ksrv.Serve(sec.kafkaListener(kln, log.With("component", "kafka"))) }()
	log.Info("strata serving", "kafka_addr", kln.Addr().String(), "admin_addr", ln.Addr().String(), "data_dir", cfg.DataDir)
	if ready != nil {
		ready(Addrs{Admin: ln.Addr().String(), Kafka: kln.Addr().String()})
	}

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ksrv.Shutdown(shutCtx) // finish in-flight requests before storage closes
	peers.Close()          // then this node's own requests to the others
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}
