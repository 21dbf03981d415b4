package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsLocalAndLoopback(t *testing.T) {
	cfg, err := LoadConfig("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cold.Backend != "local" || !strings.HasPrefix(cfg.AdminAddr, "127.0.0.1:") {
		t.Fatalf("default: cold backend %q, admin on %q; want local and 127.0.0.1", cfg.Cold.Backend, cfg.AdminAddr)
	}
}

func TestExampleConfigs(t *testing.T) {
	t.Setenv("STRATA_S3_ENDPOINT", "127.0.0.1:9000")
	t.Setenv("STRATA_S3_BUCKET", "strata")
	t.Setenv("STRATA_HDFS_NAMENODE", "127.0.0.1:8020")
	for file, backend := range map[string]string{"dev.yaml": "local", "minio.yaml": "s3", "hdfs.yaml": "hdfs", "cluster.yaml": "local"} {
		cfg, err := LoadConfig(filepath.Join("..", "..", "configs", file), nil)
		if err != nil {
			t.Errorf("configs/%s: %v", file, err)
			continue
		}
		if cfg.Cold.Backend != backend {
			t.Errorf("configs/%s: cold backend %q, want %q", file, cfg.Cold.Backend, backend)
		}
	}
	cfg, _ := LoadConfig(filepath.Join("..", "..", "configs", "minio.yaml"), nil)
	if cfg.Cold.S3.Endpoint != "127.0.0.1:9000" || cfg.Cold.S3.PartSize != 16<<20 {
		t.Errorf("minio.yaml: endpoint %q part size %d", cfg.Cold.S3.Endpoint, cfg.Cold.S3.PartSize)
	}
}

func TestOverrides(t *testing.T) {
	cfg, err := LoadConfig("", []string{"cold.retry.timeout=5s", "cold.retry.attempts=2", "data_dir=/tmp/x"})
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(cfg.Cold.Retry.Timeout) != 5*time.Second || cfg.Cold.Retry.Attempts != 2 || cfg.DataDir != "/tmp/x" {
		t.Fatalf("--set not applied: %+v", cfg)
	}
}

// The cluster's endpoints take a list or one comma-separated value.
func TestClusterEndpoints(t *testing.T) {
	for _, set := range []string{"cluster.etcd_endpoints=a:1,b:2", "cluster.etcd_endpoints=[a:1, b:2]"} {
		cfg, err := LoadConfig("", []string{set, "node.id=3"})
		if err != nil || !cfg.Cluster.Enabled() || len(cfg.Cluster.EtcdEndpoints) != 2 || cfg.Cluster.EtcdEndpoints[1] != "b:2" {
			t.Errorf("--set %s: %+v, %v", set, cfg.Cluster, err)
		}
	}
	if cfg, _ := LoadConfig("", nil); cfg.Cluster.Enabled() {
		t.Error("the embedded default is a cluster node; make run must be one node")
	}
}

func TestInvalidConfigNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"cold.bogus=1"}, "cold.bogus: unknown key"},
		{[]string{"nonsense=1"}, "nonsense: unknown key"},
		{[]string{"cold.retry.timeout=abc"}, `cold.retry.timeout: "abc" is not a duration`},
		{[]string{"cold.retry.attempts=many"}, `cold.retry.attempts: "many" is not a whole number`},
		{[]string{"cold.backend=tape"}, `cold.backend: "tape": want local, s3 or hdfs`},
		{[]string{"admin_addr=localhost"}, "admin_addr"},
		{[]string{"log.format=xml"}, "log.format"},
		{[]string{"cold.backend=s3", "cold.s3.endpoint=http://x:9000", "cold.s3.bucket=b"}, "cold.s3.endpoint"},
		{[]string{"cold.backend=s3", "cold.s3.endpoint=x:9000"}, "cold.s3.bucket: empty"},
		{[]string{"cold.backend=s3", "cold.s3.endpoint=x:9000", "cold.s3.bucket=b", "cold.s3.part_size=1MiB"}, "cold.s3.part_size"},
		{[]string{"cold.backend=hdfs", "cold.hdfs.namenodes=[a:1]", "cold.hdfs.root=rel"}, "cold.hdfs.root"},
		{[]string{"cold.local=x"}, `cold.local: "x" is not a section`},
		{[]string{"noequals"}, "want path.to.key=value"},
		{[]string{"cluster.etcd_endpoints=127.0.0.1:2379"}, "node.id: 0: a cluster's nodes need a unique positive id"},
		{[]string{"cluster.etcd_endpoints=localhost", "node.id=1"}, "cluster.etcd_endpoints"},
		{[]string{"cluster.etcd_endpoints=127.0.0.1:2379", "node.id=1", "cluster.etcd_prefix=strata"}, "cluster.etcd_prefix"},
		{[]string{"cluster.etcd_endpoints=127.0.0.1:2379", "node.id=1", "cluster.session_ttl=100ms"}, "cluster.session_ttl"},
		{[]string{"cluster.etcd_endpoints=127.0.0.1:2379", "node.id=1", "kafka.fetch_read_ahead_bytes=64MiB"}, "single node only"},
		{[]string{"kafka.fetch_read_ahead_bytes=-1"}, "kafka.fetch_read_ahead_bytes"},
		{[]string{"kafka.default_replication_factor=0"}, "kafka.default_replication_factor"},
		{[]string{"tiering.replica_grace=0s"}, "tiering.replica_grace: 0s: want a duration above 0"},
	} {
		_, err := LoadConfig("", tc.sets)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %q: err %v, want it to contain %q", tc.sets, err, tc.want)
		}
	}
}

func TestMissingEnvIsNamed(t *testing.T) {
	os.Unsetenv("STRATA_HDFS_NAMENODE")
	_, err := LoadConfig(filepath.Join("..", "..", "configs", "hdfs.yaml"), nil)
	if err == nil || !strings.Contains(err.Error(), "STRATA_HDFS_NAMENODE") {
		t.Fatalf("hdfs.yaml without STRATA_HDFS_NAMENODE: %v", err)
	}
}

// `strata config` prints what a config file takes ("10m", "1GiB"), and
// what it prints loads back to the same configuration; the local cold
// tier follows --data-dir.
func TestPrintedConfigLoadsBack(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	if err := printConfig([]string{"--data-dir", dir}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"max_age: 10m\n", "max_bytes: 1GiB\n", "frame_timeout: 30s\n", "dir: " + dir + "/cold\n"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("strata config does not print %q:\n%s", want, out.String())
		}
	}
	file := filepath.Join(dir, "printed.yaml")
	if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := LoadConfig(file, nil)
	if err != nil {
		t.Fatalf("the printed config does not load: %v", err)
	}
	var reprinted strings.Builder
	writeYAML(&reprinted, again)
	if reprinted.String() != out.String() {
		t.Fatalf("the printed config loads as\n%s\nwant\n%s", reprinted.String(), out.String())
	}
}

// A cluster node's data folder is one node's: started under another id or
// cluster, or holding a single node's data, it is refused with a message
// that says whose it is.
func TestClusterFolderIsOneNodes(t *testing.T) {
	dir := t.TempDir()
	cfg, err := LoadConfig("", []string{"data_dir=" + dir, "cluster.etcd_endpoints=127.0.0.1:2379", "node.id=1"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := bindFolder(cfg); err != nil {
			t.Fatalf("start %d of node 1 on its folder: %v", i+1, err)
		}
	}
	cfg.Node.ID = 2
	if err := bindFolder(cfg); err == nil || !strings.Contains(err.Error(), "belongs to node.id=1") {
		t.Fatalf("node 2 on node 1's folder: %v", err)
	}
	single := t.TempDir()
	if err := os.Mkdir(filepath.Join(single, "catalog"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = single
	if err := bindFolder(cfg); err == nil || !strings.Contains(err.Error(), "single node's data") {
		t.Fatalf("a cluster node on a single node's folder: %v", err)
	}
}

// A cluster node's catalog is in etcd: the offline catalog commands refuse
// it, rather than making a local catalog that would bar its folder from the
// cluster.
func TestCatalogCommandsRefuseAClusterNode(t *testing.T) {
	dir := t.TempDir()
	for _, cmd := range []string{"ls", "rebuild"} {
		var out strings.Builder
		err := catalogCmd([]string{cmd, "--set", "data_dir=" + dir, "--set", "cluster.etcd_endpoints=127.0.0.1:2379", "--set", "node.id=1"}, &out)
		if err == nil || !strings.Contains(err.Error(), "etcd") {
			t.Errorf("strata catalog %s on a cluster node: %v, want a refusal naming etcd", cmd, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "catalog")); err == nil {
			t.Errorf("strata catalog %s made a local catalog in a cluster node's folder", cmd)
		}
	}
}

// A data folder's identity is made once, with the folder, and read back at
// every start; a new folder (a replaced disk) gets another.
func TestFolderIdentity(t *testing.T) {
	dir := t.TempDir()
	first, err := folderID(dir)
	if err != nil || len(first) != 32 {
		t.Fatalf("a new folder's identity: %q, %v", first, err)
	}
	again, err := folderID(dir)
	if err != nil || again != first {
		t.Fatalf("the folder's identity read back: %q, %v; want %q", again, err, first)
	}
	other, err := folderID(t.TempDir())
	if err != nil || other == first {
		t.Fatalf("another folder's identity: %q, %v; want one other than %q", other, err, first)
	}
	if err := os.WriteFile(filepath.Join(dir, dirFile), []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := folderID(dir); err == nil {
		t.Fatal("a damaged identity file was taken")
	}
}

// schema_registry.url is checked with the rest of the config, and its
// error never shows the password.
func TestSchemaRegistryURLChecked(t *testing.T) {
	for raw, want := range map[string]string{
		"ftp://u:secret@h:1":       `scheme "ftp"`,
		"https://u:secret@h:99999": `port "99999"`,
		"http://:8081":             "no host",
	} {
		_, err := LoadConfig("", []string{"schema_registry.url=" + raw})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("schema_registry.url=%s: %v; want an error naming %s, without the password", raw, err, want)
		}
	}
	if _, err := LoadConfig("", []string{"schema_registry.url=http://u:p@registry:8081"}); err != nil {
		t.Errorf("a good URL: %v", err)
	}
}
