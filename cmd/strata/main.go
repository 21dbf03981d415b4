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
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/api/admin"
	"strata/api/kafka"
	"strata/catalog"
	"strata/cluster"
	"strata/engine"
	"strata/icetable"
	"strata/metadata"
	"strata/partition"
	"strata/peer"
	"strata/replica"
	"strata/tiering"
	"strata/tiering/objstore"
	"strata/topicconfig"
)

const usage = `strata: a segment-log store that tiers sealed segments to Parquet in object storage.

Usage:
  strata serve [--config FILE] [--data-dir DIR] [--kafka-addr HOST:PORT] [--admin-addr HOST:PORT] [--schema-registry-addr HOST:PORT] [--set key=value ...]
  strata config [--config FILE] [--set key=value ...]   print the effective configuration
  strata catalog ls|rebuild [--config FILE]              list the catalog / rebuild it from the bucket (service stopped)
  strata catalog ddl --topic T --location URI            print a Hive CREATE EXTERNAL TABLE for a topic's objects
  strata tier run [--admin-addr HOST:PORT]               run one tiering pass in the running service
  strata topic describe T [--admin-addr HOST:PORT]       a topic's configs (with sources), partitions and bytes per tier
  strata topic alter T --set key=value [--delete key]    change a topic's configs (docs/config.md, "Topic configs")
  strata table describe T [--admin-addr HOST:PORT]       a topic's Iceberg table: snapshot, offsets and lag per partition, files
  strata table retype T [--admin-addr HOST:PORT]         rewrite T's cold objects with the typed columns its configs ask for
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
	case "table":
		err = tableCmd(os.Args[2:], os.Stdout)
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
	registryAddr := fs.String("schema-registry-addr", "", "overrides schema_registry.addr")
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
	if *registryAddr != "" {
		sets = append([]string{"schema_registry.addr=" + *registryAddr}, sets...)
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
	cfg.Iceberg.Catalog = icetable.RedactCatalogURI(cfg.Iceberg.Catalog)
	if u, err := url.Parse(cfg.SchemaRegistry.URL); err == nil && u.User != nil {
		cfg.SchemaRegistry.URL = u.Redacted()
	}
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
type Addrs struct{ Admin, Kafka, SchemaRegistry string }

// run serves until ctx ends; ready, if set, learns the listening addresses.
// It builds the service in dependency order: the cold tier and the
// metadata stores, storage, the tiering job, the listeners, the metadata
// both front ends answer from (this node's, or the cluster's it joins),
// replication, the Kafka front end, then the admin API. Three bindings
// stay late, each a cycle: the engine reads topic configs before the node
// joins (joining reports the engine's damaged copies: topics.member); its
// rolls reach replication, which needs storage (rolled.replication); and
// replication wakes the append path's long polls and resets its producer
// state, while the append path takes replication's acks (the Wake and Lead
// closures over parts).
func run(ctx context.Context, cfg *Config, log *slog.Logger, ready func(Addrs)) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data_dir %q: %w", cfg.DataDir, err)
	}
	cold, err := openCheckedColdTier(ctx, cfg, reg, log)
	if err != nil {
		return err
	}
	defer cold.Close()
	md, err := openMeta(ctx, cfg, reg, log)
	if err != nil {
		return err
	}
	defer md.Close() // after storage: the engine's last events reach the catalog
	topics, err := newTopicView(cfg, md.cat)
	if err != nil {
		return err
	}
	rolled := &rolls{shards: make(chan string, 1024)} // in a cluster: shards the engine rolled
	// One Tables for the listener, the tiering job, the admin API and the
	// REST catalog, so every commit shows in its metrics and table lag.
	tables, err := icebergTables(ctx, cfg, cold, log)
	if err != nil {
		return err
	}
	if tables != nil {
		defer tables.Close()
		tables.Metrics = icetable.NewMetrics(reg)
		topics.tables = tables
	}
	store, err := openServedStorage(ctx, cfg, cold, tables, md.cat, topics, rolled, reg, log)
	if err != nil {
		return err
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
	job := newTiering(cfg, store.SegmentEngine(), md.cat, cold, tables, topics, reg, log)
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
	// Closed by the servers' shutdowns too; closing twice is harmless.
	ln, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin_addr %s: %w", cfg.AdminAddr, err)
	}
	defer ln.Close()
	kln, err := net.Listen("tcp", cfg.KafkaAddr)
	if err != nil {
		return fmt.Errorf("kafka_addr %s: %w", cfg.KafkaAddr, err)
	}
	defer kln.Close()
	schemas, err := openSchemaRegistry(ctx, cfg, sec, md.etcd, reg, log)
	if err != nil {
		return err
	}
	defer schemas.close()
	var external *externalRegistry
	switch {
	case cfg.SchemaRegistry.URL != "":
		if external, err = openExternalRegistry(cfg.SchemaRegistry.URL); err != nil {
			return err
		}
		topics.schemas.Store(&schemaSource{external})
		log.Info("the typed columns and produce validation ask the schema registry named", "url", external.url)
	case schemas != nil:
		topics.schemas.Store(&schemaSource{typedSchemas{schemas.reg}})
	}

	// One gate per partition, which appends, replication's changes of
	// leadership and handoffs take (partition.Gates).
	gates := partition.NewGates()
	// The metadata both front ends answer from and change topics through.
	var meta metadata.Cluster
	var member *cluster.Member // nil: this node alone
	var peers *peer.Client     // nil: this node alone
	var peerSecret []byte
	if !cfg.Cluster.Enabled() {
		self, _ := metadata.BrokerAt(0, kln.Addr().String())
		single := metadata.NewSingle(store, topics.local, func() metadata.Broker { return self })
		// Producer ids from a counter in the node's catalog, so a restart
		// never hands one out again.
		pids, ok := md.cat.(metadata.ProducerIDBlocks)
		if !ok {
			return fmt.Errorf("the catalog %T cannot reserve producer ids", md.cat)
		}
		single.SetProducerIDBlocks(pids)
		meta = single
	} else {
		var opts []kgo.Opt
		if opts, err = peerOpts(cfg); err != nil {
			return err
		}
		if peerSecret, err = cluster.PeerSecret(ctx, md.etcd, cfg.Cluster.EtcdPrefix); err != nil {
			return err
		}
		if member, err = joinCluster(ctx, cfg, md, cold, tables, topics.broker, kln.Addr().String(), ln.Addr().String(), damagedCopies(ctx, store.SegmentEngine()), gates, reg, log); err != nil {
			return err
		}
		meta = member
		topics.member.Store(member)
		if tables != nil { // before tiering starts, the tables' only committer
			tables.Lock = member.LockTable
		}
		peers = peer.NewClient(peer.ClientConfig{Self: member.Self(), Opts: opts, Secret: peerSecret,
			Addr: func(node int32) (string, bool) { return metadata.BrokerAddr(member, node) }})
		defer peers.Close() // after ksrv.Shutdown too, on every way out
		defer func() {
			// A tiering run finishes first, while its claims (under this
			// node's lease) still hold; then the lease is revoked, and
			// others see this node go at once.
			job.Close()
			member.Close()
		}()
		runMember(bg, member, store, rolled, log.With("component", "cluster"))
	}
	var claims tiering.Claims // nil: this node alone tiers its segments
	if member != nil {
		claims = member
		if job.Replicas, err = newClusterReplicas(cfg.DataDir, store.SegmentEngine(), member, peers, reg, log.With("component", "tiering")); err != nil {
			return err
		}
	}
	if err := startTiering(ctx, cfg, job, claims, log); err != nil {
		return err
	}

	var repl *replica.Node       // nil: this node alone
	var peerFetches *peer.Server // nil: this node alone
	var parts *partition.Manager // nil: the Kafka server's own, with no replication
	if member != nil {
		// Replication tells the append path of its changes, and the append
		// path appends through replication: each refers to the other.
		repl = replica.NewNode(replica.NodeConfig{Self: int32(cfg.Node.ID), Store: store, Meta: member.ReplicaMeta(), Gates: gates,
			LagTimeMax: time.Duration(cfg.Cluster.ReplicaLagTimeMax), FetchRate: int64(cfg.Cluster.FollowerThrottledRate),
			Log: log.With("component", "replica"), Registerer: reg,
			Wake: func(shard string) { parts.Wake(shard) }, Lead: func(shard string) { parts.ForgetProducers(shard) },
			BatchEnd: partition.EndsBatch})
		parts = partition.New(store, partition.Config{Meta: member, Replication: repl, Gates: gates, Log: log.With("component", "partition")})
		peerFetches = &peer.Server{Store: store, Leader: repl, Log: log.With("component", "peer")}
	}
	kcfg := kafkaConfig(cfg, topics.broker, log)
	kcfg.Metrics, kcfg.Offsets, kcfg.Cluster, kcfg.Auth, kcfg.Partitions = kafka.NewMetrics(reg), md.offsets, meta, sec.auth, parts
	kcfg.Peers, kcfg.PeerFetches, kcfg.PeerUser, kcfg.PeerSecret = peers, peerFetches, cfg.Cluster.PeerUser, peerSecret
	switch {
	case external != nil:
		kcfg.Schemas = external
	case schemas != nil:
		kcfg.Schemas = schemas.reg
	}
	ksrv := kafka.New(store, kcfg)
	if repl != nil {
		rolled.replication.Store(repl)
		go repl.Run(bg, peers)
	}
	adminCfg := admin.Config{Store: store, Engine: store.SegmentEngine(), Catalog: md.cat, Cluster: member, Job: job,
		Topics: meta, TopicDefaults: topics.broker, Token: cfg.AdminToken, Authenticated: sec.auth != nil, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})}
	if tables != nil {
		adminCfg.Routes = tableAPI{tables: tables, store: store, meta: meta}.routes
		reg.MustRegister(newTableLag(tables, store))
	}
	var report scrubReport
	adminCfg.Iceberg = icebergCatalog(cfg, tables, meta, reg, log)
	if e := store.SegmentEngine(); e != nil && cfg.Engine.ScrubSchedule != "off" {
		var refill func(string) bool
		if repl != nil {
			refill = repl.Refill
		}
		report.local = newScrubber(e, refill, reg, log.With("component", "scrub"))
		if err := scheduleScrub(bg, report.local, cfg.Engine.ScrubSchedule); err != nil {
			return err
		}
	}
	if store.SegmentEngine() != nil && cfg.Tiering.ScrubSchedule != "off" {
		report.cold = newColdScrubber(newColdScrub(cfg, job, member), reg, log.With("component", "scrub"))
		if _, err := scheduleRuns(bg, cfg.Tiering.ScrubSchedule, "tiering.scrub_schedule", func(ctx context.Context) error {
			_, err := report.cold.run(ctx)
			return err
		}, report.cold.log); err != nil {
			return err
		}
		adminCfg.ColdScrub = report.cold.run
	}
	if report.local != nil || report.cold != nil {
		adminCfg.Scrub = report
	}
	if adminCfg.Locked() {
		log.Warn("kafka.sasl is on and admin_token is not set: the admin API serves only /healthz, /readyz and /metrics; set admin_token to read records, run tiering and change configs over it")
	}
	return serveUntil(ctx, admin.Handler(ctx, adminCfg), ksrv, peers, schemas, sec, ln, kln, cfg, log, ready)
}

// openCheckedColdTier opens the cold tier and checks that it answers.
func openCheckedColdTier(ctx context.Context, cfg *Config, reg prometheus.Registerer, log *slog.Logger) (objstore.Bucket, error) {
	cold, err := openColdTier(cfg.Cold, reg)
	if err != nil {
		return nil, fmt.Errorf("cold tier (%s): %w", cfg.Cold.Backend, err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = cold.Check(checkCtx)
	cancel()
	if err != nil {
		cold.Close()
		return nil, fmt.Errorf("cold tier (%s): %w", cfg.Cold.Backend, err)
	}
	log.Info("cold tier ready", "backend", cold.Kind())
	return cold, nil
}

// openServedStorage opens storage and, on a single node's folder from
// before the engine kept its manifest, adopts the segments its catalog
// lists (a cluster node's catalog is in etcd and never predates the
// manifest).
func openServedStorage(ctx context.Context, cfg *Config, cold objstore.Bucket, tables *icetable.Tables, cat catalog.Catalog, topics *topicView, rolled *rolls, reg prometheus.Registerer, log *slog.Logger) (*engine.Adapter, error) {
	adopt := !cfg.Cluster.Enabled() && !adopted(cfg.DataDir)
	store, err := openStorage(cfg, cold, tables, cat, topics, rolled, log)
	if err != nil {
		return nil, fmt.Errorf("storage in %s: %w", cfg.DataDir, err)
	}
	if adopt {
		err := adoptCatalog(cat, store.SegmentEngine(), log)
		if err == nil {
			err = markAdopted(cfg.DataDir)
		}
		if err != nil {
			store.Close()
			return nil, err
		}
	}
	reg.MustRegister(newEngineCollector(store.SegmentEngine()))
	shards, _ := store.Shards(ctx)
	log.Info("storage ready", "shards", len(shards), "default_engine", cfg.Engine.Default, "fsync", cfg.Engine.Fsync)
	return store, nil
}

// runMember runs a cluster node's loops beside its servers until ctx ends:
// its shards kept in step with the placement, handoffs at rolls, its load
// and damaged copies reported.
func runMember(ctx context.Context, m *cluster.Member, store *engine.Adapter, rolled *rolls, log *slog.Logger) {
	go m.KeepShards(ctx, store, log)
	go handOver(ctx, m, store.SegmentEngine(), rolled.shards, log)
	go reportLoad(ctx, m, store.SegmentEngine(), 15*time.Second, log)
	go reportDamage(ctx, m, store.SegmentEngine(), time.Second, log)
}

// serveUntil serves the admin API, the Kafka front end and the schema
// registry (when on) until ctx ends or one fails, then shuts them down,
// in-flight requests first, then this node's own requests to the others
// (peers).
func serveUntil(ctx context.Context, api http.Handler, ksrv *kafka.Server, peers *peer.Client, schemas *schemaRegistry, sec *security, ln, kln net.Listener, cfg *Config, log *slog.Logger, ready func(Addrs)) error {
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 3)
	go func() { served <- srv.Serve(sec.adminListener(ln)) }()
	go func() { served <- ksrv.Serve(sec.kafkaListener(kln, log.With("component", "kafka"))) }()
	if schemas != nil {
		go func() { served <- schemas.srv.Serve(schemas.ln) }()
	}
	log.Info("strata serving", "kafka_addr", kln.Addr().String(), "admin_addr", ln.Addr().String(), "schema_registry_addr", schemas.addr(), "data_dir", cfg.DataDir)
	if ready != nil {
		ready(Addrs{Admin: ln.Addr().String(), Kafka: kln.Addr().String(), SchemaRegistry: schemas.addr()})
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
	if schemas != nil {
		if err := schemas.srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// kafkaConfig is the Kafka front end's settings from strata's config file;
// run wires in what it is built from.
func kafkaConfig(cfg *Config, topicDefaults topicconfig.Broker, log *slog.Logger) kafka.Config {
	logDir, err := filepath.Abs(cfg.DataDir) // Kafka names its log dirs by absolute path
	if err != nil {
		logDir = cfg.DataDir
	}
	return kafka.Config{
		AutoCreateTopics: cfg.Kafka.AutoCreateTopics, DefaultPartitions: cfg.Kafka.DefaultPartitions, DefaultReplicationFactor: cfg.Kafka.DefaultReplicationFactor,
		MaxRequestBytes:        int32(min(int64(cfg.Kafka.MaxRequestBytes), 1<<30)),
		MaxControlRequestBytes: int32(min(int64(cfg.Kafka.MaxControlRequestBytes), 1<<30)),
		MaxInflightBytes:       int64(cfg.Kafka.MaxInflightRequestBytes), MaxInflatedBytes: int(cfg.Kafka.MaxInflatedRequestBytes),
		MaxMessageBytes: int32(cfg.Kafka.MaxMessageBytes), TopicDefaults: topicDefaults,
		MaxPartitions: cfg.Kafka.MaxPartitions, MaxPartitionsPerTopic: int32(cfg.Kafka.MaxPartitionsPerTopic), OffsetMetadataMaxBytes: int(min(int64(cfg.Kafka.OffsetMetadataMaxBytes), 1<<20)),
		MaxConnections: cfg.Kafka.MaxConnections, MaxConnectionsPerIP: cfg.Kafka.MaxConnectionsPerIP,
		FrameTimeout: time.Duration(cfg.Kafka.FrameTimeout), MaxReadAheadBytes: int64(cfg.Kafka.FetchReadAheadBytes),
		FetchMaxBytes: int32(min(int64(cfg.Kafka.FetchMaxBytes), 1<<30)), MaxInflightFetchBytes: int64(cfg.Kafka.MaxInflightFetchBytes),
		LogDir:           logDir,
		Logger:           log.With("component", "kafka"),
		GroupInitialWait: time.Duration(cfg.Kafka.GroupInitialRebalanceDelay),
	}
}
