package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"strata/internal/testsvc"
)

// commitOffsets sends one OffsetCommit of partitions 0..n-1 of topic, each
// with metadata bytes of metadata, and returns each partition's code.
func commitOffsets(t *testing.T, cl *kgo.Client, group, topic string, n int32, offset int64, metadata int) []int16 {
	t.Helper()
	md := strings.Repeat("m", metadata)
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	rt := kmsg.OffsetCommitRequestTopic{Topic: topic}
	for p := range n {
		rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitRequestTopicPartition{Partition: p, Offset: offset, Metadata: &md})
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("OffsetCommit: %v", err)
	}
	var codes []int16
	for _, p := range resp.Topics[0].Partitions {
		codes = append(codes, p.ErrorCode)
	}
	return codes
}

func etcdClientTo(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A consumer cannot fill etcd, and ordinary use does not: commits of
// metadata over offset.metadata.max.bytes or for partitions that do not
// exist are refused as Kafka refuses them, and a workload of commits
// whose history is several times etcd's quota (128 MiB here) is stored,
// each commit writing only its partitions' keys and the controller
// compacting etcd's history behind it; the metrics show etcd's size
// within its quota.
func TestCommitsDoNotFillEtcd(t *testing.T) {
	const quota = 128 << 20
	e := startEtcdWith(t, fmt.Sprintf("--quota-backend-bytes=%d", quota))
	c := &cluster{t: t, etcd: e.client, pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"cluster.etcd_compaction_retention=1s", "cluster.etcd_check_interval=200ms", fmt.Sprintf("cluster.etcd_quota_bytes=%d", quota)}}
	c.add(1)
	cl := c.client(1)
	createTopic(t, cl, "t", 100)
	c.leaders(1, "t", allLed) // the node knows the topic: commits to it are not refused as unknown

	if codes := commitOffsets(t, cl, "g", "t", 1, 0, 4097); codes[0] != kerr.OffsetMetadataTooLarge.Code {
		t.Fatalf("commit with 4097 bytes of metadata: %v; want OFFSET_METADATA_TOO_LARGE", kerr.ErrorForCode(codes[0]))
	}
	if codes := commitOffsets(t, cl, "g", "never", 1, 0, 10); codes[0] != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("commit to a topic that does not exist: %v; want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(codes[0]))
	}

	// 500 commits of 100 partitions with 4000 bytes of metadata each:
	// 200 MB written, one and a half times the quota.
	for i := range 500 {
		for p, code := range commitOffsets(t, cl, "g", "t", 100, int64(i), 4000) {
			if code != 0 {
				t.Fatalf("commit %d, partition %d: %v (etcd size %.0f of %d)", i, p, kerr.ErrorForCode(code), c.metric(1, "strata_etcd_db_size_bytes"), quota)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup("t", 99); !ok || o.At != 499 || len(o.Metadata) != 4000 {
		t.Fatalf("t/99 committed at %d with %d bytes of metadata; want 499 and 4000", o.At, len(o.Metadata))
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.metric(1, "strata_etcd_compactions_total") == 0 || c.metric(1, "strata_etcd_db_size_bytes") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no compaction or size in the metrics")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// What is in use after compaction is what the commits keep (the last
	// of each partition); the file's size also holds the pages compaction
	// freed, which etcd reuses but returns only at a defragmentation, and
	// how many there are depends on how fast the commits came between two
	// compactions (on a quiet machine, half the quota's worth).
	size, inUse, q := c.metric(1, "strata_etcd_db_size_bytes"), c.metric(1, "strata_etcd_db_size_in_use_bytes"), c.metric(1, "strata_etcd_quota_bytes")
	if q != quota || inUse == 0 || inUse >= quota/2 || size >= quota*3/4 {
		t.Fatalf("etcd after the commits: %.0f bytes in use, %.0f in its file, against quota %.0f; want under half of %d in use, the file under three quarters", inUse, size, q, quota)
	}
}

// When etcd is full (its NOSPACE alarm raised, here by another writer),
// CreateTopics and OffsetCommit answer KAFKA_STORAGE_ERROR, CreateTopics
// with a message saying etcd is full, not UNKNOWN_SERVER_ERROR; the
// metric shows the alarm; a node restarted meanwhile waits for its lease.
// Once an operator frees space as docs/cluster.md says (compact, defrag,
// alarm disarm), the node serves and both work again.
func TestFullEtcdRefusedClearly(t *testing.T) {
	const quota = 16 << 20
	e := startEtcdWith(t, fmt.Sprintf("--quota-backend-bytes=%d", quota))
	c := &cluster{t: t, etcd: e.client, pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"cluster.etcd_check_interval=200ms", fmt.Sprintf("cluster.etcd_quota_bytes=%d", quota)}}
	c.add(1)
	cl := c.client(1)
	createTopic(t, cl, "t", 1)
	c.leaders(1, "t", allLed)
	cli := etcdClientTo(t, e.client)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	junk := strings.Repeat("j", 512<<10)
	for i := 0; ; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/junk/%d", i), junk); err != nil {
			if !strings.Contains(err.Error(), "database space exceeded") {
				t.Fatalf("filling etcd: %v", err)
			}
			break
		}
	}
	adm := kadm.NewClient(cl)
	resp, _ := adm.CreateTopic(ctx, 1, 1, nil, "after") // its error is resp.Err
	if resp.Err != kerr.KafkaStorageError || !strings.Contains(resp.ErrMessage, "etcd") {
		t.Fatalf("CreateTopics while etcd is full: %v %q; want KAFKA_STORAGE_ERROR saying etcd is full", resp.Err, resp.ErrMessage)
	}
	if codes := commitOffsets(t, cl, "g", "t", 1, 5, 10); codes[0] != kerr.KafkaStorageError.Code {
		t.Fatalf("OffsetCommit while etcd is full: %v; want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(codes[0]))
	}
	waitMetric(t, c, "strata_etcd_nospace_alarm", 1)

	// A node restarted while etcd is full reads the cluster's peer secret
	// and waits for its lease, saying why, instead of exiting; it joins
	// once etcd takes writes again.
	c.nodes[1].Kill()
	restarted, serving := make(chan struct{}), false
	go func() {
		defer close(restarted) // also when Restart fails the test: the node exited
		c.nodes[1].Restart()
		serving = true
	}()
	select {
	case <-restarted:
		if serving {
			t.Fatal("node 1 served while etcd was full: it could not have had a lease")
		}
		t.Fatal("node 1 did not start while etcd was full; it should wait for etcd")
	case <-time.After(5 * time.Second):
	}

	// The recovery docs/cluster.md gives: what filled it deleted, then
	// compact, defrag, disarm.
	if _, err := cli.Delete(ctx, "/junk/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	st, err := cli.Status(ctx, e.client)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, st.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, e.client); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-restarted:
	case <-time.After(time.Minute):
		t.Fatal("node 1, restarted while etcd was full, did not serve within a minute of etcd's recovery")
	}
	cl = c.client(1)
	adm = kadm.NewClient(cl)
	waitMetric(t, c, "strata_etcd_nospace_alarm", 0)
	if resp, err := adm.CreateTopic(ctx, 1, 1, nil, "after"); err != nil || resp.Err != nil {
		t.Fatalf("CreateTopics once etcd has space again: %v %v", err, resp.Err)
	}
	if codes := commitOffsets(t, cl, "g", "t", 1, 5, 10); codes[0] != 0 {
		t.Fatalf("OffsetCommit once etcd has space again: %v", kerr.ErrorForCode(codes[0]))
	}
}

func waitMetric(t *testing.T, c *cluster, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.metric(1, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %.0f; want %.0f", name, c.metric(1, name), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
