package kafka

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/internal/testsvc"
	"strata/metadata"
)

// movedLeader is this node (0) leading topic "here" and node 1 leading
// topic "away" at epoch 4: a node asked for a partition whose leader moved,
// as after a failover, without the rest of a cluster.
type movedLeader struct {
	addr string
	fixedTopics
}

func (c movedLeader) Self() int32 { return 0 }
func (c movedLeader) Brokers() []Broker {
	host, port, _ := net.SplitHostPort(c.addr)
	p, _ := strconv.Atoi(port)
	return []Broker{{NodeID: 0, Host: host, Port: int32(p)}, {NodeID: 1, Host: host, Port: 1}}
}
func (c movedLeader) Controller() int32 { return 0 }
func (c movedLeader) Topics(context.Context) (map[string]int32, error) {
	return map[string]int32{"here": 1, "away": 1}, nil
}
func (c movedLeader) Partition(topic string, p int32) (PartitionInfo, bool) {
	switch {
	case p != 0:
		return PartitionInfo{}, false
	case topic == "here":
		return PartitionInfo{Leader: 0, LeaderEpoch: 2, Replicas: []int32{0}, ISR: []int32{0}}, true
	case topic == "away":
		return PartitionInfo{Leader: 1, LeaderEpoch: 4, Replicas: []int32{1}, ISR: []int32{1}}, true
	}
	return PartitionInfo{}, false
}
func (c movedLeader) Coordinator(string) Broker { return c.Brokers()[0] }

// Every version of Produce and Fetch strata answers is read by
// kafka-clients' own parsers (scripts/kafkawire), not only franz-go's:
// answers with records, and NOT_LEADER_OR_FOLLOWER answers with KIP-951's
// leader hints where the version defines them (Fetch's current leader from
// v12); a tag the version does not define makes a JVM client drop the
// answer.
func TestJavaClientsParseProduceAndFetchAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, _ := serveShards(t, []string{"here-0", "away-0"}, func(addr string) metadata.Cluster { return movedLeader{addr: addr} })
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	type answer struct {
		key, version int16
		raw          []byte // correlation id onwards
	}
	var answers []answer
	ask := func(req kmsg.Request, version int16) {
		t.Helper()
		raw, err := rawRequest(conn, req, version)
		if err != nil {
			t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), version, err)
		}
		answers = append(answers, answer{req.Key(), version, raw})
	}
	produce := supportedVersions[produceKey]
	for v := produce.min; v <= produce.max; v++ {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		for _, topic := range []string{"here", "away"} {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = encodeBatch(nil, []record.Record{{Timestamp: 1, Key: []byte("k"), Value: []byte(fmt.Sprintf("v%d", v))}})
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		ask(req, v)
	}
	fetch := supportedVersions[1]
	for v := fetch.min; v <= fetch.max; v++ {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxBytes, req.MaxWaitMillis = -1, 1<<20, 0
		for _, topic := range []string{"here", "away"} {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 1<<20, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		ask(req, v)
	}

	var in strings.Builder
	for _, a := range answers {
		fmt.Fprintf(&in, "%d %d 1 %s\n", a.key, a.version, hex.EncodeToString(a.raw))
	}
	cmd := exec.CommandContext(ctx, testsvc.Java(t), "-cp", testsvc.Classpath(t, "kafkawire"), "strata.ParseResponses")
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("strata.ParseResponses: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(answers) {
		t.Fatalf("kafka-clients parsed %d answers of %d:\n%s", len(lines), len(answers), out)
	}
	for i, a := range answers {
		name := fmt.Sprintf("%s v%d", kmsg.NameForKey(a.key), a.version)
		got := lines[i]
		if !strings.HasPrefix(got, "ok ") || strings.Contains(got, "left over") {
			t.Errorf("%s: kafka-clients cannot read strata's answer: %s", name, got)
			continue
		}
		// The moved partition is refused with NOT_LEADER_OR_FOLLOWER (6),
		// and the hint reaches the client where the version has one.
		if !strings.Contains(got, "errorCode=6") {
			t.Errorf("%s: no NOT_LEADER_OR_FOLLOWER for the moved partition in %s", name, got)
		}
		if a.key == 1 && a.version >= 12 && !strings.Contains(got, "currentLeader=LeaderIdAndEpoch(leaderId=1, leaderEpoch=4)") {
			t.Errorf("%s: kafka-clients read no leader hint in %s", name, got)
		}
		if a.key == 1 && !strings.Contains(got, "records=") {
			t.Errorf("%s: no records in %s", name, got)
		}
	}
}

func (c movedLeader) ProducerID(ctx context.Context) (int64, error) { return fakePIDs.Next(ctx) }
