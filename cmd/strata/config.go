package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"strata/configs"
)

// Config is strata's whole configuration; docs/config.md describes each key.
type Config struct {
	DataDir   string `yaml:"data_dir"`
	AdminAddr string `yaml:"admin_addr"`
	// AdminToken, when set, is the bearer token every admin endpoint but
	// the health checks requires.
	AdminToken string          `yaml:"admin_token"`
	KafkaAddr  string          `yaml:"kafka_addr"`
	Kafka      KafkaConfig     `yaml:"kafka"`
	Log        LogConfig       `yaml:"log"`
	Engine     EngineConfig    `yaml:"engine"`
	Segment    SegmentConfig   `yaml:"segment"`
	Retention  RetentionConfig `yaml:"retention"`
	Tiering    TieringConfig   `yaml:"tiering"`
	Cold       Cold            `yaml:"cold"`
	Iceberg    IcebergConfig   `yaml:"iceberg"`
	Cluster    ClusterConfig   `yaml:"cluster"`
	Node       NodeConfig      `yaml:"node"`
	// SchemaRegistry is the built-in Schema Registry (schemaregistry.go).
	SchemaRegistry SchemaRegistryConfig `yaml:"schema_registry"`

	// AdminTLS, when set, serves the admin API over HTTPS only (security.go).
	AdminTLS TLSConfig `yaml:"admin_tls"`
}

// ClusterConfig makes this node one of a cluster whose metadata lives in
// etcd (docs/cluster.md); with no endpoints, strata is a single node.
type ClusterConfig struct {
	EtcdEndpoints Strings  `yaml:"etcd_endpoints"`
	EtcdPrefix    string   `yaml:"etcd_prefix"`
	SessionTTL    Duration `yaml:"session_ttl"`
	// ReplicaLagTimeMax is Kafka's replica.lag.time.max.ms: a follower not
	// caught up for this long leaves the ISR.
	ReplicaLagTimeMax Duration `yaml:"replica_lag_time_max"`
	// FollowerThrottledRate bounds the bytes per second this node copies as
	// a follower (Kafka's follower.replication.throttled.rate); 0: none.
	FollowerThrottledRate Bytes `yaml:"follower_throttled_rate"`
	// PeerUser is the kafka.sasl user a node signs in as when it reads
	// another node's part of a partition's log; it needs consume on every
	// topic. Required when kafka.sasl is on.
	PeerUser string `yaml:"peer_user"`
	// PeerCAFile is the CA that signed the nodes' kafka.tls certificates,
	// for a node to check another's; default kafka.tls.client_ca_file, or
	// the system's roots.
	PeerCAFile string `yaml:"peer_ca_file"`

	// EtcdCompactionRetention: the controller compacts etcd's history to
	// the revision of this long ago (docs/cluster.md); 0: strata does not.
	EtcdCompactionRetention Duration `yaml:"etcd_compaction_retention"`
	// EtcdQuotaBytes is etcd's --quota-backend-bytes, for the metric.
	EtcdQuotaBytes Bytes `yaml:"etcd_quota_bytes"`
	// EtcdCheckInterval is how often etcd's size is read and its history
	// compacted.
	EtcdCheckInterval Duration `yaml:"etcd_check_interval"`
}

// Enabled says whether this node is one of a cluster.
func (c ClusterConfig) Enabled() bool { return len(c.EtcdEndpoints) > 0 }

// NodeConfig names this node in a cluster.
type NodeConfig struct {
	ID int `yaml:"id"`
	// AdvertisedKafkaAddr is where clients reach this node's Kafka
	// listener (kafka_addr when empty).
	AdvertisedKafkaAddr string `yaml:"advertised_kafka_addr"`
}

// Strings is a list that also takes one comma-separated value, so
// `--set cluster.etcd_endpoints=a:2379,b:2379` works.
type Strings []string

func (l *Strings) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = nil
		for _, v := range strings.Split(n.Value, ",") {
			if v = strings.TrimSpace(v); v != "" {
				*l = append(*l, v)
			}
		}
		return nil
	}
	var v []string
	if err := n.Decode(&v); err != nil {
		return err
	}
	*l = v
	return nil
}

// TieringConfig drives the move of sealed segments to the cold tier.
type TieringConfig struct {
	Enabled         bool     `yaml:"enabled"`
	Schedule        string   `yaml:"schedule"`
	MinSealedAge    Duration `yaml:"min_sealed_age"`
	LocalRetention  Duration `yaml:"local_retention"`
	RemoteRetention Duration `yaml:"remote_retention"`
	LocalBytes      Bytes    `yaml:"local_bytes"`
	Prefix          string   `yaml:"prefix"`
	Concurrency     int      `yaml:"concurrency"`
	Bandwidth       Bytes    `yaml:"bandwidth"`
	OrphanGrace     Duration `yaml:"orphan_grace"`
	RetiredGrace    Duration `yaml:"retired_grace"`
	// MergeMinAge: a cold object is merged (strata.cold.target_bytes)
	// once it was tiered this long ago.
	MergeMinAge Duration `yaml:"merge_min_age"`
	// MergeMinObjects: a run of small cold objects merges once it holds
	// this many, or half the target.
	MergeMinObjects int `yaml:"merge_min_objects"`
	// ReplicaGrace: how long after a replicated segment's seal its
	// preferred replica tiers it alone (docs/replication.md).
	ReplicaGrace  Duration `yaml:"replica_grace"`
	Codec         string   `yaml:"codec"`
	RowGroupBytes Bytes    `yaml:"row_group_bytes"`
	PageBytes     Bytes    `yaml:"page_bytes"`
	CacheBytes    Bytes    `yaml:"cache_bytes"`
	// The cold scrub reads the objects of this node's shards back and
	// checks them against their manifests (docs/tiering.md, "The cold
	// scrub"): when, at what byte rate, and how many bytes per run (0: no
	// bound; a run that stops there is resumed by the next).
	ScrubSchedule  string `yaml:"scrub_schedule"`
	ScrubBandwidth Bytes  `yaml:"scrub_bandwidth"`
	ScrubBytes     Bytes  `yaml:"scrub_bytes"`
}

// IcebergConfig makes each tiering run commit what it tiered to the
// topics' Iceberg tables (docs/iceberg.md).
type IcebergConfig struct {
	Enabled bool `yaml:"enabled"`
	// Location is the URI readers open the bucket's root by; empty: the
	// cold tier's own (cold.local.dir made absolute, s3://{bucket}/{prefix},
	// hdfs://{namenode}{root}).
	Location string `yaml:"location"`
	// Catalog is where the tables' pointers are: "" the bucket's
	// version-hint.text, "hadoop" the bucket's too but as Iceberg's Hadoop
	// tables name it (v{N}.metadata.json), or an Iceberg SQL catalog's URI (sqlite:PATH,
	// postgres://...; icetable.Tables.OpenCatalog) whose rows are named
	// CatalogName.
	Catalog     string `yaml:"catalog"`
	CatalogName string `yaml:"catalog_name"`
	// SnapshotMaxAge and SnapshotMinKeep are the tables' snapshot expiry
	// policy: older snapshots expire, but the last SnapshotMinKeep stay.
	SnapshotMaxAge  Duration `yaml:"snapshot_max_age"`
	SnapshotMinKeep int      `yaml:"snapshot_min_keep"`
	// MaintenanceInterval: a table's expiry and sweep follow its commits at
	// most this often (icetable.Tables.MaintainEvery).
	MaintenanceInterval Duration `yaml:"maintenance_interval"`
	// FileDeleteDelay: the objects retention and DeleteRecords take from a
	// table leave the bucket this long after (0: at once;
	// icetable.Tables.FileDeleteDelay).
	FileDeleteDelay Duration `yaml:"file_delete_delay"`
	// REST is the Iceberg REST catalog on the admin listener (icerest.go).
	REST IcebergREST `yaml:"rest"`
}

// IcebergREST configures the Iceberg REST catalog served under
// http://{admin_addr}/iceberg while iceberg.enabled is on.
type IcebergREST struct {
	// Namespace holds a table per topic.
	Namespace string `yaml:"namespace"`
	// VendCredentials hands readers the cold tier's S3 keys in each
	// LoadTable answer; off, readers bring their own.
	VendCredentials bool `yaml:"vend_credentials"`
	// S3Endpoint is the endpoint readers reach the bucket by, when not
	// cold.s3.endpoint (a proxy, another network).
	S3Endpoint string `yaml:"s3_endpoint"`
}

// KafkaConfig tunes the Kafka front end.
type KafkaConfig struct {
	AutoCreateTopics  bool  `yaml:"auto_create_topics"`
	DefaultPartitions int32 `yaml:"default_partitions"`
	// DefaultReplicationFactor is a new topic's when its request leaves it
	// to the broker, and an auto-created topic's.
	DefaultReplicationFactor int16 `yaml:"default_replication_factor"`
	MaxRequestBytes          Bytes `yaml:"max_request_bytes"`
	// GroupInitialRebalanceDelay: a new group's first rebalance waits this
	// long for more members (Kafka's group.initial.rebalance.delay.ms).
	GroupInitialRebalanceDelay Duration `yaml:"group_initial_rebalance_delay"`
	// Resource bounds: docs/config.md says what each protects.
	MaxControlRequestBytes  Bytes    `yaml:"max_control_request_bytes"`
	MaxInflightRequestBytes Bytes    `yaml:"max_inflight_request_bytes"`
	MaxInflatedRequestBytes Bytes    `yaml:"max_inflated_request_bytes"`
	MaxMessageBytes         Bytes    `yaml:"max_message_bytes"`
	MaxPartitions           int      `yaml:"max_partitions"`
	MaxPartitionsPerTopic   int      `yaml:"max_partitions_per_topic"`
	MaxConnections          int      `yaml:"max_connections"`
	MaxConnectionsPerIP     int      `yaml:"max_connections_per_ip"`
	FrameTimeout            Duration `yaml:"frame_timeout"`
	// FetchReadAheadBytes bounds the fetch answers framed ahead for
	// consumers catching up (docs/kafka.md); 0, the default, is off.
	FetchReadAheadBytes Bytes `yaml:"fetch_read_ahead_bytes"`
	// FetchMaxBytes caps what a consumer's Fetch may ask for (Kafka's
	// fetch.max.bytes); MaxInflightFetchBytes bounds the fetch answers
	// built or being written, all connections together.
	FetchMaxBytes         Bytes `yaml:"fetch_max_bytes"`
	MaxInflightFetchBytes Bytes `yaml:"max_inflight_fetch_bytes"`

	// OffsetMetadataMaxBytes is Kafka's offset.metadata.max.bytes.
	OffsetMetadataMaxBytes Bytes `yaml:"offset_metadata_max_bytes"`

	// SASL and TLS: authentication, permissions, certificates (security.go).
	SASL SASLConfig `yaml:"sasl"`
	TLS  TLSConfig  `yaml:"tls"`
}

// EngineConfig picks storage engines and how they write.
type EngineConfig struct {
	Default          string   `yaml:"default"` // segment, memory or pebble
	Fsync            string   `yaml:"fsync"`   // batch, interval or none
	FsyncInterval    Duration `yaml:"fsync_interval"`
	IOWorkers        int      `yaml:"io_workers"`
	IndexInterval    int      `yaml:"index_interval"`
	IndexMemory      Bytes    `yaml:"index_memory_bytes"`
	MemoryMaxRecords int      `yaml:"memory_max_records"`
	// ScrubSchedule is when the scrubber checks local sealed segments
	// against their checksums (a cron spec; "off": never).
	ScrubSchedule string `yaml:"scrub_schedule"`
}

// SegmentConfig is the segment engine's roll and seal policy.
type SegmentConfig struct {
	MaxBytes          Bytes    `yaml:"max_bytes"`
	RollCheckInterval int64    `yaml:"roll_check_interval"`
	MaxAge            Duration `yaml:"max_age"`
}

// RetentionConfig bounds local disk per shard.
type RetentionConfig struct {
	MaxAge   Duration `yaml:"max_age"`
	MaxBytes Bytes    `yaml:"max_bytes"`
	Interval Duration `yaml:"interval"`
}

type LogConfig struct {
	Format string `yaml:"format"` // text or json
	Level  string `yaml:"level"`  // debug, info, warn, error
}

// Cold is the cold tier: where sealed segments go as Parquet.
type Cold struct {
	Backend string      `yaml:"backend"` // local, s3 or hdfs
	Local   ColdLocal   `yaml:"local"`
	S3      ColdS3      `yaml:"s3"`
	HDFS    ColdHDFS    `yaml:"hdfs"`
	Retry   ColdRetries `yaml:"retry"`
}

type ColdLocal struct {
	Dir string `yaml:"dir"`
}

type ColdS3 struct {
	Endpoint   string `yaml:"endpoint"`
	Region     string `yaml:"region"`
	Bucket     string `yaml:"bucket"`
	Prefix     string `yaml:"prefix"`
	AccessKey  string `yaml:"access_key"`
	SecretKey  string `yaml:"secret_key"`
	TLS        bool   `yaml:"tls"`
	Addressing string `yaml:"addressing"`
	PartSize   Bytes  `yaml:"part_size"`
}

type ColdHDFS struct {
	NameNodes []string `yaml:"namenodes"`
	Root      string   `yaml:"root"`
	User      string   `yaml:"user"`
}

type ColdRetries struct {
	Attempts      int      `yaml:"attempts"`
	Timeout       Duration `yaml:"timeout"`
	UploadTimeout Duration `yaml:"upload_timeout"`
}

// Duration reads "30s", "5m", "0s".
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("%q is not a duration (like 30s or 5m)", n.Value)
	}
	if v < 0 {
		return fmt.Errorf("%q is negative", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML prints a duration as the config file takes it ("10m", not
// nanoseconds).
func (d Duration) MarshalYAML() (any, error) {
	out := time.Duration(d).String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out, nil
}

// Bytes reads "16MiB", "1GiB", "4096".
type Bytes int64

func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseBytes(n.Value)
	if err != nil {
		return err
	}
	*b = Bytes(v)
	return nil
}

// MarshalYAML prints a size in the largest unit that divides it.
func (b Bytes) MarshalYAML() (any, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.mult == 0 {
			return fmt.Sprintf("%d%s", int64(b)/u.mult, u.suffix), nil
		}
	}
	return int64(b), nil
}

func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
			if err != nil || v < 0 {
				break
			}
			return v * u.mult, nil
		}
	}
	return 0, fmt.Errorf("%q is not a size (like 4096, 64KiB, 16MiB or 1GiB)", s)
}

// LoadConfig reads the embedded default, then the file (if any), then each
// --set override, expanding ${VAR} from the environment. Unknown keys and
// bad values are errors that name the key.
func LoadConfig(file string, sets []string) (*Config, error) {
	tree := map[string]any{}
	if err := mergeYAML(tree, configs.Default, "the embedded default"); err != nil {
		return nil, err
	}
	if file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := mergeYAML(tree, raw, file); err != nil {
			return nil, err
		}
	}
	for _, s := range sets {
		key, val, ok := strings.Cut(s, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("config: --set %q: want path.to.key=value", s)
		}
		var v any
		if err := yaml.Unmarshal([]byte(val), &v); err != nil {
			v = val
		}
		if err := setPath(tree, strings.Split(key, "."), v); err != nil {
			return nil, fmt.Errorf("config: --set %s: %w", key, err)
		}
	}
	var missing []string
	expandEnv(tree, &missing)
	if err := checkTree(tree, reflect.TypeOf(Config{}), ""); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	merged, err := yaml.Marshal(tree)
	if err != nil {
		return nil, err
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(merged))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if cfg.Cold.Local.Dir == "" {
		// With the hot data, so --data-dir moves both and two nodes never
		// share a cold folder by accident.
		cfg.Cold.Local.Dir = filepath.Join(cfg.DataDir, "cold")
	}
	if err := cfg.validate(); err != nil {
		if len(missing) > 0 {
			sort.Strings(missing)
			return nil, fmt.Errorf("config: %w (unset environment variables: %s)", err, strings.Join(missing, ", "))
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	return &cfg, nil
}

func mergeYAML(dst map[string]any, raw []byte, where string) error {
	var src map[string]any
	if err := yaml.Unmarshal(raw, &src); err != nil {
		return fmt.Errorf("config %s: %w", where, err)
	}
	merge(dst, src)
	return nil
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

func setPath(tree map[string]any, path []string, v any) error {
	for i, k := range path[:len(path)-1] {
		next, ok := tree[k].(map[string]any)
		if !ok {
			if _, exists := tree[k]; exists {
				return fmt.Errorf("%s is not a section", strings.Join(path[:i+1], "."))
			}
			next = map[string]any{}
			tree[k] = next
		}
		tree = next
	}
	tree[path[len(path)-1]] = v
	return nil
}

// expandEnv replaces ${VAR} in string values, noting variables that are unset.
func expandEnv(v any, missing *[]string) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = expandEnv(e, missing)
		}
	case []any:
		for i, e := range t {
			t[i] = expandEnv(e, missing)
		}
	case string:
		return os.Expand(t, func(name string) string {
			val, ok := os.LookupEnv(name)
			if !ok {
				*missing = append(*missing, name)
			}
			return val
		})
	}
	return v
}

// checkTree walks the raw settings against the Config struct so that an
// unknown key or a bad value is reported by its full dotted name.
func checkTree(tree map[string]any, t reflect.Type, path string) error {
	fields := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		fields[strings.Split(f.Tag.Get("yaml"), ",")[0]] = f
	}
	keys := make([]string, 0, len(tree))
	for k := range tree {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := path + k
		f, ok := fields[k]
		if why, replaced := replacedKeys[name]; !ok && replaced {
			return fmt.Errorf("%s: %s", name, why)
		}
		if !ok {
			return fmt.Errorf("%s: unknown key", name)
		}
		if sub, isMap := tree[k].(map[string]any); isMap && f.Type.Kind() == reflect.Struct {
			if err := checkTree(sub, f.Type, name+"."); err != nil {
				return err
			}
			continue
		}
		raw, err := yaml.Marshal(tree[k])
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := yaml.Unmarshal(raw, reflect.New(f.Type).Interface()); err != nil {
			var te *yaml.TypeError
			if errors.As(err, &te) {
				return fmt.Errorf("%s: %q is not %s", name, fmt.Sprint(tree[k]), kindWords[f.Type.Kind()])
			}
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// replacedKeys are per-topic settings of older config files that topic
// configs replaced (docs/config.md, "Topic configs"): a file that still has
// one is refused with the new way.
var replacedKeys = map[string]string{
	"kafka.topic_max_message_bytes": "replaced by the topic config max.message.bytes: `strata topic alter T --set max.message.bytes=N` " +
		"(or kafka-configs --alter --entity-type topics); kafka.max_message_bytes stays the broker's default",
	"segment.topic_max_bytes": "replaced by the topic config segment.bytes: `strata topic alter T --set segment.bytes=N`; " +
		"segment.max_bytes stays the broker's default",
	"engine.topics": "replaced by the topic config strata.engine, given when the topic is created " +
		"(kafka-topics --create --config strata.engine=memory); engine.default stays the broker's default",
}

func (c *Config) validate() error {
	if c.DataDir == "" {
		return errors.New("data_dir: empty")
	}
	if err := checkAddr("admin_addr", c.AdminAddr); err != nil {
		return err
	}
	if err := c.Iceberg.REST.validate(); err != nil {
		return err
	}
	if cat := c.Iceberg.Catalog; cat != "" && cat != "hadoop" {
		if strings.HasPrefix(cat, "sqlite:") && c.Cluster.Enabled() {
			return errors.New("iceberg.catalog sqlite: is one node's file; a cluster's nodes share a postgres:// catalog")
		}
		if c.Iceberg.CatalogName == "" {
			return errors.New("iceberg.catalog_name: empty (the SQL catalog's catalog_name)")
		}
	}
	if err := checkAddr("kafka_addr", c.KafkaAddr); err != nil {
		return err
	}
	if c.SchemaRegistry.Addr != "" {
		if err := checkAddr("schema_registry.addr", c.SchemaRegistry.Addr); err != nil {
			return err
		}
	}
	if c.SchemaRegistry.URL != "" {
		if _, err := registryURL(c.SchemaRegistry.URL); err != nil {
			return err
		}
	}
	if c.Cluster.Enabled() {
		if c.Node.ID < 1 || c.Node.ID > 1<<31-1 {
			return fmt.Errorf("node.id: %d: a cluster's nodes need a unique positive id", c.Node.ID)
		}
		for _, ep := range c.Cluster.EtcdEndpoints {
			if err := checkAddr("cluster.etcd_endpoints", strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")); err != nil {
				return err
			}
		}
		if !strings.HasPrefix(c.Cluster.EtcdPrefix, "/") {
			return fmt.Errorf("cluster.etcd_prefix: %q: want a key prefix starting with /", c.Cluster.EtcdPrefix)
		}
		if c.Cluster.SessionTTL < Duration(time.Second) {
			return fmt.Errorf("cluster.session_ttl: %s: want at least 1s", time.Duration(c.Cluster.SessionTTL))
		}
		if c.Cluster.EtcdCompactionRetention < 0 || c.Cluster.EtcdQuotaBytes <= 0 || c.Cluster.EtcdCheckInterval < Duration(100*time.Millisecond) {
			return fmt.Errorf("cluster.etcd_compaction_retention %s, etcd_quota_bytes %d, etcd_check_interval %s: want 0 (off) or more, more than 0, at least 100ms",
				time.Duration(c.Cluster.EtcdCompactionRetention), c.Cluster.EtcdQuotaBytes, time.Duration(c.Cluster.EtcdCheckInterval))
		}
		if c.Cluster.ReplicaLagTimeMax < Duration(100*time.Millisecond) {
			return fmt.Errorf("cluster.replica_lag_time_max: %s: want at least 100ms", time.Duration(c.Cluster.ReplicaLagTimeMax))
		}
		if c.Node.AdvertisedKafkaAddr != "" {
			if err := checkAddr("node.advertised_kafka_addr", c.Node.AdvertisedKafkaAddr); err != nil {
				return err
			}
		}
	}
	if c.Kafka.DefaultReplicationFactor < 1 {
		return fmt.Errorf("kafka.default_replication_factor: %d: want 1 or more", c.Kafka.DefaultReplicationFactor)
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	if c.Kafka.DefaultPartitions < 1 {
		return fmt.Errorf("kafka.default_partitions: %d: want 1 or more", c.Kafka.DefaultPartitions)
	}
	for key, v := range map[string]int64{
		"kafka.max_control_request_bytes": int64(c.Kafka.MaxControlRequestBytes), "kafka.max_inflight_request_bytes": int64(c.Kafka.MaxInflightRequestBytes),
		"kafka.max_inflated_request_bytes": int64(c.Kafka.MaxInflatedRequestBytes), "kafka.max_message_bytes": int64(c.Kafka.MaxMessageBytes),
		"kafka.max_partitions": int64(c.Kafka.MaxPartitions), "kafka.max_connections": int64(c.Kafka.MaxConnections),
		"kafka.max_connections_per_ip": int64(c.Kafka.MaxConnectionsPerIP), "kafka.frame_timeout": int64(c.Kafka.FrameTimeout),
		"kafka.fetch_max_bytes": int64(c.Kafka.FetchMaxBytes), "kafka.max_inflight_fetch_bytes": int64(c.Kafka.MaxInflightFetchBytes),
		"kafka.offset_metadata_max_bytes": int64(c.Kafka.OffsetMetadataMaxBytes),
	} {
		if v <= 0 {
			return fmt.Errorf("%s: %d: want more than 0", key, v)
		}
	}
	if c.Kafka.FetchReadAheadBytes < 0 {
		return fmt.Errorf("kafka.fetch_read_ahead_bytes: %d: want 0 (off) or more", c.Kafka.FetchReadAheadBytes)
	}
	if c.Kafka.FetchReadAheadBytes > 0 && c.Cluster.Enabled() {
		// A read-ahead is dropped when this node deletes a topic; in a
		// cluster another node may delete it, and a topic re-created at
		// once could be answered with the old one's records.
		return fmt.Errorf("kafka.fetch_read_ahead_bytes: %d: the fetch read-ahead works on a single node only; set it to 0 with cluster.etcd_endpoints", c.Kafka.FetchReadAheadBytes)
	}
	if p := c.Kafka.MaxPartitionsPerTopic; p < 1 || p > 100_000 {
		return fmt.Errorf("kafka.max_partitions_per_topic: %d: want 1 to 100000 (a partition's folder name must fit 255 bytes)", p)
	}
	if c.Kafka.MaxMessageBytes > 1<<30 {
		return fmt.Errorf("kafka.max_message_bytes: %d: want at most 1GiB", c.Kafka.MaxMessageBytes)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return fmt.Errorf("log.format: %q: want text or json", c.Log.Format)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q: want debug, info, warn or error", c.Log.Level)
	}
	switch c.Engine.Default {
	case "segment", "memory", "pebble":
	default:
		return fmt.Errorf("engine.default: %q: want segment, memory or pebble", c.Engine.Default)
	}
	switch c.Engine.Fsync {
	case "batch", "interval", "none":
	default:
		return fmt.Errorf("engine.fsync: %q: want batch, interval or none", c.Engine.Fsync)
	}
	if c.Engine.IOWorkers < 1 || c.Engine.IOWorkers > 1024 {
		return fmt.Errorf("engine.io_workers: %d: want 1 to 1024", c.Engine.IOWorkers)
	}
	if c.Engine.IndexInterval < 1 {
		return fmt.Errorf("engine.index_interval: %d: want 1 or more", c.Engine.IndexInterval)
	}
	if c.Engine.IndexMemory < 1 {
		return fmt.Errorf("engine.index_memory_bytes: %d bytes: want 1 or more", c.Engine.IndexMemory)
	}
	if c.Segment.MaxBytes < 4096 {
		return fmt.Errorf("segment.max_bytes: %d bytes: want at least 4KiB", c.Segment.MaxBytes)
	}
	if c.Segment.RollCheckInterval < 1 {
		return fmt.Errorf("segment.roll_check_interval: %d: want 1 or more", c.Segment.RollCheckInterval)
	}
	if err := validateSchedule(c.Engine.ScrubSchedule); c.Engine.ScrubSchedule != "off" && err != nil {
		return fmt.Errorf("engine.scrub_schedule: %q: %v (or \"off\")", c.Engine.ScrubSchedule, err)
	}
	if err := validateSchedule(c.Tiering.ScrubSchedule); c.Tiering.ScrubSchedule != "off" && err != nil {
		return fmt.Errorf("tiering.scrub_schedule: %q: %v (or \"off\")", c.Tiering.ScrubSchedule, err)
	}
	if err := validateSchedule(c.Tiering.Schedule); c.Tiering.Enabled && err != nil {
		return fmt.Errorf("tiering.schedule: %q: %v", c.Tiering.Schedule, err)
	}
	switch c.Tiering.Codec {
	case "zstd", "snappy", "gzip", "none":
	default:
		return fmt.Errorf("tiering.codec: %q: want zstd, snappy, gzip or none", c.Tiering.Codec)
	}
	if c.Tiering.ReplicaGrace <= 0 {
		return fmt.Errorf("tiering.replica_grace: %s: want a duration above 0", time.Duration(c.Tiering.ReplicaGrace))
	}
	if c.Tiering.Concurrency < 1 {
		return fmt.Errorf("tiering.concurrency: %d: want 1 or more", c.Tiering.Concurrency)
	}
	if c.Tiering.RowGroupBytes < 4096 || c.Tiering.PageBytes < 1024 {
		return fmt.Errorf("tiering.row_group_bytes (%d) and tiering.page_bytes (%d): want at least 4KiB and 1KiB", c.Tiering.RowGroupBytes, c.Tiering.PageBytes)
	}
	switch c.Cold.Backend {
	case "local":
		if c.Cold.Local.Dir == "" {
			return errors.New("cold.local.dir: empty")
		}
	case "s3":
		s := c.Cold.S3
		if s.Endpoint == "" {
			return errors.New("cold.s3.endpoint: empty")
		}
		if strings.Contains(s.Endpoint, "://") {
			return fmt.Errorf("cold.s3.endpoint: %q: want host:port without a scheme (tls: true for https)", s.Endpoint)
		}
		if s.Bucket == "" {
			return errors.New("cold.s3.bucket: empty")
		}
		if s.PartSize != 0 && s.PartSize < 5<<20 {
			return fmt.Errorf("cold.s3.part_size: %d bytes: S3 needs at least 5MiB", s.PartSize)
		}
		switch s.Addressing {
		case "", "path", "virtual", "auto":
		default:
			return fmt.Errorf("cold.s3.addressing: %q: want path, virtual or auto", s.Addressing)
		}
	case "hdfs":
		if len(c.Cold.HDFS.NameNodes) == 0 || c.Cold.HDFS.NameNodes[0] == "" {
			return errors.New("cold.hdfs.namenodes: empty")
		}
		if !strings.HasPrefix(c.Cold.HDFS.Root, "/") {
			return fmt.Errorf("cold.hdfs.root: %q: want an absolute HDFS path", c.Cold.HDFS.Root)
		}
	default:
		return fmt.Errorf("cold.backend: %q: want local, s3 or hdfs", c.Cold.Backend)
	}
	if c.Cold.Retry.Attempts < 0 {
		return fmt.Errorf("cold.retry.attempts: %d: want 1 or more (0 for the default)", c.Cold.Retry.Attempts)
	}
	return nil
}

func checkAddr(key, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %q: want host:port", key, addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s: %q: port %q is not a number from 0 to 65535", key, addr, port)
	}
	return nil
}

var kindWords = map[reflect.Kind]string{
	reflect.Int: "a whole number", reflect.Int64: "a whole number", reflect.Bool: "true or false",
	reflect.String: "a string", reflect.Slice: "a list", reflect.Struct: "a section",
}
