package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/internal/testsvc"
)

// With TLS and SASL on the Kafka listeners, a node reads another node's
// part of a partition's log over the same listener, checking the other's
// certificate against cluster.peer_ca_file and signing in as
// cluster.peer_user: a partition moved at a roll reads back whole through
// its new leader.
func TestSecureNodesReadEachOthersParts(t *testing.T) {
	dir := t.TempDir()
	ca := testsvc.NewCA(t, dir)
	cert, key := filepath.Join(dir, "node.pem"), filepath.Join(dir, "node.key")
	ca.Issue(t, cert, key, 2, false)
	users := filepath.Join(dir, "users.yaml")
	testsvc.WriteFileAtomic(t, users, []byte(`users:
  - name: node
    password: node-secret
    permissions: [{operation: admin, topic_prefix: ""}]
  - name: app
    password: app-secret
    permissions: [{operation: admin, topic_prefix: ""}]
`))
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"segment.max_bytes=4KiB", "segment.roll_check_interval=5",
			"kafka.tls.cert_file=" + cert, "kafka.tls.key_file=" + key,
			"kafka.sasl.mechanisms=[SCRAM-SHA-512]", "kafka.sasl.users_file=" + users,
			"cluster.peer_user=node", "cluster.peer_ca_file=" + ca.PEMFile},
		opts: []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool}),
			kgo.SASL(scram.Auth{User: "app", Pass: "app-secret"}.AsSha512Mechanism())}}
	c.add(1)
	createTopic(t, c.client(1), "sec", 2)
	c.leaders(1, "sec", allLed)
	produced := map[int32][]string{}
	for i := 0; i < 8; i++ {
		for p, vs := range c.produce(1, "sec", []int32{0, 1}, 20, fmt.Sprintf("early%d", i)) {
			produced[p] = append(produced[p], vs...)
		}
	}
	c.add(2)
	deadline := time.Now().Add(90 * time.Second)
	for i, after := 0, 0; after < 2; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no partition moved to node 2 at its rolls; leaders %v", c.leaders(1, "sec", allLed))
		}
		for p, vs := range c.produce(1, "sec", []int32{0, 1}, 20, fmt.Sprintf("late%d", i)) {
			produced[p] = append(produced[p], vs...)
		}
		if after > 0 || slices.Contains(c.leaders(1, "sec", allLed), 2) {
			after++
		}
	}
	total := len(produced[0]) + len(produced[1])
	if got := c.consume(2, "sec", total); !equalParts(got, produced) {
		t.Errorf("reading a partition moved at a roll over TLS and SASL: got %v records per partition, want %v", counts(got), counts(produced))
	}

	// A client that is not the peer user naming a node's replica id gets a
	// consumer's answer: node 1 no longer leads the moved partition.
	moved := slices.Index(c.leaders(1, "sec", allLed), 2)
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.ReplicaState.ID, req.MaxBytes = 2, 2, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "sec"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = int32(moved), 0, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, c.client(1).SeedBrokers()[0])
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.NotLeaderForPartition.Code || len(p.RecordBatches) > 0 {
		t.Errorf("the app user, claiming node 2's replica id, fetched sec-%d from node 1: error %d, %d bytes; want NOT_LEADER_OR_FOLLOWER", moved, p.ErrorCode, len(p.RecordBatches))
	}
}
