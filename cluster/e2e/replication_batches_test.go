package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// An idempotent producer's batch larger than a follower's fetch budget is
// replicated whole: with throttled followers, the leader killed as soon as
// a follower has copied anything of one 2,000-record batch (2 MB, twice the
// 1 MiB a partition's fetch asks for) leaves a successor that holds all of
// it or none, so the producer's retry of the batch is answered as a
// duplicate or stored once, never refused as out of order and stored again
// (Kafka replicates batches whole). The log then holds each record once.
func TestLargeBatchReplicatedWholeThroughLeaderKill(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.follower_throttled_rate=64KiB", "cluster.replica_lag_time_max=30s")
	createReplicated(t, c, "whole", 1, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2"),
		"max.message.bytes": kadm.StringPtr("8388608")})
	c.waitISR(1, "whole", 3)
	leaders, _ := c.isrs(1, "whole")
	leader := leaders[0]
	var follower int32 = leader%3 + 1
	var other int32 = follower%3 + 1
	cl := c.client(follower, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(8<<20), kgo.MaxBufferedBytes(64<<20), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(time.Second), kgo.RecordRetries(100))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 2000
	value := make([]byte, 1000)
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		v := append([]byte(fmt.Sprintf("r%04d-", i)), value...)
		recs = append(recs, &kgo.Record{Topic: "whole", Partition: 0, Value: v})
	}
	done := make(chan error, 1)
	go func() { done <- cl.ProduceSync(ctx, recs...).FirstErr() }()
	// The followers take the leader's first answer at once and the next
	// only when the throttle allows (seconds later): the leader dies
	// between the two.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if c.metric(follower, "strata_replica_copied_records_total") > 0 && c.metric(other, "strata_replica_copied_records_total") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no follower copied anything of the batch")
		}
	}
	c.nodes[leader].Kill()
	if err := <-done; err != nil {
		t.Fatalf("the batch through the leader's kill: %v", err)
	}
	now := c.newLeader(follower, "whole", 0, leader)
	adm := kadm.NewClient(c.client(now))
	ends, err := adm.ListEndOffsets(ctx, "whole")
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets: %v %v", err, ends.Error())
	}
	end, _ := ends.Lookup("whole", 0)
	got := c.consume(now, "whole", int(end.Offset))[0]
	seen := map[string]int{}
	for _, v := range got {
		seen[v[:6]]++
	}
	for k, times := range seen {
		if times > 1 {
			t.Errorf("record %s stored %d times", k, times)
		}
	}
	if end.Offset != n || len(seen) != n {
		t.Fatalf("the new leader (node %d) holds %d records, %d distinct; want each of the %d once", now, end.Offset, len(seen), n)
	}
}
