package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"strata/internal/testsvc"
)

// kafka.max_partitions bounds the whole cluster's partitions, each counted
// once: three nodes creating topics at once, each through its own node,
// stop together at the bound (the count is checked in the transaction that
// writes each topic record), and the creates past it are refused with
// POLICY_VIOLATION on every node, CreatePartitions too.
func TestMaxPartitionsBoundsTheCluster(t *testing.T) {
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"kafka.max_partitions=100"}}
	for id := int32(1); id <= 3; id++ {
		c.add(id)
	}
	c.controller(1, func(id int32) bool { return id > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	created, refused := 0, 0
	var other []string
	var wg sync.WaitGroup
	for id := int32(1); id <= 3; id++ {
		adm := kadm.NewClient(c.client(id))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 12 {
				topic := fmt.Sprintf("n%d-%d", id, i)
				resp, err := adm.CreateTopic(ctx, 5, 1, nil, topic)
				if err == nil {
					err = resp.Err
				}
				mu.Lock()
				switch {
				case err == nil:
					created += 5
				case kerr.IsRetriable(err) || ctx.Err() != nil:
					other = append(other, fmt.Sprintf("%s: %v", topic, err))
				default:
					if resp.Err == kerr.PolicyViolation {
						refused++
					} else {
						other = append(other, fmt.Sprintf("%s: %v", topic, err))
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("creates neither done nor refused by the bound: %v", other)
	}
	if created != 100 || refused != 36-20 {
		t.Fatalf("three nodes creating 36 topics of 5 partitions under kafka.max_partitions=100: %d partitions created, %d topics refused; want 100 and 16", created, refused)
	}
	topics, err := kadm.NewClient(c.client(2)).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, td := range topics {
		total += len(td.Partitions)
	}
	if total != 100 {
		t.Fatalf("the cluster lists %d partitions; want 100", total)
	}
	for id := int32(1); id <= 3; id++ {
		// A node that has not yet learned of the topic answers
		// UNKNOWN_TOPIC_OR_PARTITION, which clients retry (make test saw
		// it once, under load).
		var r kadm.CreatePartitionsResponse
		for try := 0; ; try++ {
			resp, err := kadm.NewClient(c.client(id)).CreatePartitions(ctx, 1, "n1-0")
			if err != nil {
				t.Fatal(err)
			}
			if r = resp["n1-0"]; !errors.Is(r.Err, kerr.UnknownTopicOrPartition) || try == 50 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if r.Err != kerr.PolicyViolation {
			t.Errorf("CreatePartitions past the bound through node %d: %v; want POLICY_VIOLATION", id, r.Err)
		}
	}
}
