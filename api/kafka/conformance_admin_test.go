package kafka

import (
	"context"
	"fmt"
	"slices"
	"strata/internal/testsvc"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// adminObserved is what the admin calls of the Java Admin client and
// Kafka's CLI answer, in a form two brokers can be compared by: error
// names and messages, counts, and what varies between brokers (producer
// ids, node ids, sizes, paths) reduced to what a user checks of it.
type adminObserved struct {
	// CreatePartitions: grow 2 -> 4, then the errors.
	Grow, GrowSame, GrowLess, GrowUnknown, GrowTwice, GrowValidateOnly, GrowBadAssignment string
	AfterGrowStart, AfterGrowEnd                                                          map[int32]int64
	ProducedToNew                                                                         []int64
	// Groups: a group made by an admin's commit, and one with a member
	// subscribed to the topic.
	ListedCommitted, DescribedCommitted                       string
	OffsetDeleteUnknownGroup, OffsetDeleteUnknownTopic        string
	CommitWhileMember, OffsetDeleteSubscribed, DeleteNonEmpty string
	OffsetDeleteAfterLeave, OffsetsAfterDelete                string
	DeleteGroup, DeleteAgain, ListedAfterDelete, DescribeGone string
	// DescribeProducers of the idempotent producer that wrote p0 and p1.
	Producers map[int32]string
	// DescribeCluster and DescribeLogDirs.
	Cluster, ControllerEndpoint string
	LogDirs                     string
}

func observeAdmin(ctx context.Context, t *testing.T, c *kgo.Client, adm *kadm.Client, addr, topic string) adminObserved {
	var o adminObserved
	grow := func(count int32, validateOnly bool, topics ...string) string {
		req := kmsg.NewPtrCreatePartitionsRequest()
		req.TimeoutMillis, req.ValidateOnly = 30_000, validateOnly
		for _, name := range topics {
			rt := kmsg.NewCreatePartitionsRequestTopic()
			rt.Topic, rt.Count = name, count
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, c)
		if err != nil {
			t.Fatalf("%s: create partitions: %v", addr, err)
		}
		var out []string
		for _, rt := range resp.Topics {
			out = append(out, codeAndMessage(rt.ErrorCode, rt.ErrorMessage))
		}
		return strings.Join(out, "; ")
	}
	o.GrowValidateOnly = grow(3, true, topic)
	o.GrowSame = grow(2, false, topic)
	o.GrowLess = grow(1, false, topic)
	o.GrowUnknown = grow(3, false, topic+"-never")
	o.GrowTwice = grow(3, false, topic, topic)
	{
		req := kmsg.NewPtrCreatePartitionsRequest()
		req.TimeoutMillis = 30_000
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = topic, 4
		rt.Assignment = []kmsg.CreatePartitionsRequestTopicAssignment{{Replicas: []int32{12345}}}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c)
		if err != nil {
			t.Fatalf("%s: create partitions: %v", addr, err)
		}
		o.GrowBadAssignment = kerr.ErrorForCode(resp.Topics[0].ErrorCode).Error()
	}
	o.Grow = grow(4, false, topic)
	waitPartitions(ctx, t, adm, topic, 4)
	o.AfterGrowStart = listed(ctx, t, addr, func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) })
	o.AfterGrowEnd = listed(ctx, t, addr, func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, topic) })
	// A new client: c's metadata knows two partitions until its next refresh.
	pc, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for p := int32(2); p < 4; p++ {
		res := pc.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("new")})
		if err := res.FirstErr(); err != nil {
			t.Fatalf("%s: produce to new partition %d: %v", addr, p, err)
		}
		o.ProducedToNew = append(o.ProducedToNew, res[0].Record.Offset)
	}

	// A group made by an admin's commit: Empty, no protocol type.
	admin := topic + "-admin"
	commit := kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: topic, Partition: 0, At: 2, LeaderEpoch: -1})
	commit.Add(kadm.Offset{Topic: topic, Partition: 1, At: 3, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, admin, commit); err != nil || resp.Error() != nil {
		t.Fatalf("%s: commit offsets: %v %v", addr, err, resp.Error())
	}
	o.ListedCommitted = listedGroup(ctx, t, c, addr, admin)
	o.DescribedCommitted = describedGroup(ctx, t, c, addr, admin)
	o.OffsetDeleteUnknownGroup = offsetDelete(ctx, t, c, addr, topic+"-nobody", topic)
	o.OffsetDeleteUnknownTopic = offsetDelete(ctx, t, c, addr, admin, topic+"-never")

	// A member subscribed to the topic: its offsets of the topic stay, and
	// the group cannot be deleted while it is in.
	consumers := topic + "-consumers"
	if resp, err := adm.CommitOffsets(ctx, consumers, commit); err != nil || resp.Error() != nil {
		t.Fatalf("%s: commit offsets: %v %v", addr, err, resp.Error())
	}
	member := joinAsConsumer(ctx, t, c, addr, consumers, topic)
	// An admin's commit to a group with members is refused: only a member
	// moves the group's positions then.
	resp, err := adm.CommitOffsets(ctx, consumers, commit)
	if err != nil {
		t.Fatalf("%s: commit offsets: %v", addr, err)
	}
	o.CommitWhileMember = fmt.Sprint(resp.Error())
	o.OffsetDeleteSubscribed = offsetDelete(ctx, t, c, addr, consumers, topic)
	o.DeleteNonEmpty = deleteGroup(ctx, t, c, addr, consumers)
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group, leave.Members = consumers, []kmsg.LeaveGroupRequestMember{{MemberID: member}}
	if resp, err := leave.RequestWith(ctx, c); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("%s: leave group: %v %+v", addr, err, resp)
	}
	o.OffsetDeleteAfterLeave = offsetDelete(ctx, t, c, addr, consumers, topic)
	fetched, err := adm.FetchOffsets(ctx, consumers)
	if err != nil {
		t.Fatalf("%s: fetch offsets: %v", addr, err)
	}
	var left []string
	fetched.Each(func(r kadm.OffsetResponse) { left = append(left, fmt.Sprintf("p%d@%d", r.Partition, r.At)) })
	slices.Sort(left)
	o.OffsetsAfterDelete = strings.Join(left, ",")

	o.DeleteGroup = deleteGroup(ctx, t, c, addr, admin)
	o.DeleteAgain = deleteGroup(ctx, t, c, addr, admin)
	o.ListedAfterDelete = listedGroup(ctx, t, c, addr, admin)
	o.DescribeGone = describedGroup(ctx, t, c, addr, admin)

	// The idempotent producer of the records of p0 and p1 (kgo's producers
	// are idempotent): one batch of six records each.
	dp := kmsg.NewPtrDescribeProducersRequest()
	dp.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: topic, Partitions: []int32{0, 1}}}
	dresp, err := dp.RequestWith(ctx, c)
	if err != nil {
		t.Fatalf("%s: describe producers: %v", addr, err)
	}
	o.Producers = map[int32]string{}
	for _, rt := range dresp.Topics {
		for _, rp := range rt.Partitions {
			var ps []string
			for _, ap := range rp.ActiveProducers {
				ps = append(ps, fmt.Sprintf("id>=0:%t epoch=%d last_seq=%d last_ts=%d coordinator_epoch=%d txn_start=%d",
					ap.ProducerID >= 0, ap.ProducerEpoch, ap.LastSequence, ap.LastTimestamp, ap.CoordinatorEpoch, ap.CurrentTxnStartOffset))
			}
			o.Producers[rp.Partition] = codeAndMessage(rp.ErrorCode, nil) + " " + strings.Join(ps, "; ")
		}
	}

	dc := kmsg.NewPtrDescribeClusterRequest()
	cresp, err := dc.RequestWith(ctx, c)
	if err != nil {
		t.Fatalf("%s: describe cluster: %v", addr, err)
	}
	var brokers []string
	controllerIsBroker := false
	for _, b := range cresp.Brokers {
		brokers = append(brokers, fmt.Sprintf("%s:%d", b.Host, b.Port))
		controllerIsBroker = controllerIsBroker || b.NodeID == cresp.ControllerID
	}
	o.Cluster = fmt.Sprintf("%s id=%t brokers=%v dialed=%t controller_is_broker=%t", codeAndMessage(cresp.ErrorCode, cresp.ErrorMessage),
		cresp.ClusterID != "", len(brokers), slices.Contains(brokers, addr), controllerIsBroker)
	dc.EndpointType = 2 // controllers: a broker refuses
	if cresp, err = dc.RequestWith(ctx, c); err != nil {
		t.Fatalf("%s: describe cluster: %v", addr, err)
	}
	o.ControllerEndpoint = codeAndMessage(cresp.ErrorCode, cresp.ErrorMessage)

	dirs, err := adm.DescribeAllLogDirs(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}, 2: {}, 3: {}}})
	if err != nil {
		t.Fatalf("%s: describe log dirs: %v", addr, err)
	}
	var parts []string
	ndirs := 0
	dirs.Each(func(d kadm.DescribedLogDir) {
		ndirs++
		if d.Err != nil || !strings.HasPrefix(d.Dir, "/") || d.TotalBytes <= 0 || d.UsableBytes <= 0 || d.UsableBytes > d.TotalBytes {
			t.Errorf("%s: log dir %q: err %v, total %d, usable %d", addr, d.Dir, d.Err, d.TotalBytes, d.UsableBytes)
		}
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			parts = append(parts, fmt.Sprintf("p%d size>0:%t lag=%d future=%t", p.Partition, p.Size > 0, p.OffsetLag, p.IsFuture))
		})
	})
	slices.Sort(parts)
	o.LogDirs = fmt.Sprintf("%d dirs: %s", ndirs, strings.Join(parts, ", "))

	// Messages name the topic, which differs between the two brokers.
	for _, f := range []*string{&o.GrowLess, &o.DescribeGone, &o.DescribedCommitted} {
		*f = strings.ReplaceAll(*f, topic, "{topic}")
	}
	return o
}

func codeAndMessage(code int16, msg *string) string {
	s := "ok"
	if code != 0 {
		s = kerr.ErrorForCode(code).(*kerr.Error).Message
	}
	if msg != nil && *msg != "" {
		s += ": " + *msg
	}
	return s
}

func waitPartitions(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, n int) {
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil && len(md.Topics[topic].Partitions) == n {
			ok := true
			for _, p := range md.Topics[topic].Partitions {
				ok = ok && p.Leader >= 0
			}
			if ok {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s: not %d partitions with leaders: %v", topic, n, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func listedGroup(ctx context.Context, t *testing.T, c *kgo.Client, addr, group string) string {
	req := kmsg.NewPtrListGroupsRequest()
	shards := c.RequestSharded(ctx, req)
	for _, sh := range shards {
		if sh.Err != nil {
			t.Fatalf("%s: list groups: %v", addr, sh.Err)
		}
		for _, g := range sh.Resp.(*kmsg.ListGroupsResponse).Groups {
			if g.Group == group {
				return fmt.Sprintf("%s type=%q", g.GroupState, g.ProtocolType)
			}
		}
	}
	return "not listed"
}

func describedGroup(ctx context.Context, t *testing.T, c *kgo.Client, addr, group string) string {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatalf("%s: describe groups: %v", addr, err)
	}
	g := resp.Groups[0]
	return fmt.Sprintf("%s %s type=%q members=%d", codeAndMessage(g.ErrorCode, g.ErrorMessage), g.State, g.ProtocolType, len(g.Members))
}

func offsetDelete(ctx context.Context, t *testing.T, c *kgo.Client, addr, group, topic string) string {
	req := kmsg.NewPtrOffsetDeleteRequest()
	req.Group = group
	req.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}, {Partition: 1}}}}
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatalf("%s: offset delete: %v", addr, err)
	}
	if resp.ErrorCode != 0 {
		return codeAndMessage(resp.ErrorCode, nil)
	}
	var out []string
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			out = append(out, fmt.Sprintf("p%d %s", rp.Partition, codeAndMessage(rp.ErrorCode, nil)))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func deleteGroup(ctx context.Context, t *testing.T, c *kgo.Client, addr, group string) string {
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatalf("%s: delete groups: %v", addr, err)
	}
	return codeAndMessage(resp.Groups[0].ErrorCode, nil)
}

// joinAsConsumer joins group as its one member, subscribed to topic, with
// the classic protocol a Java consumer uses, and takes the leader's part
// of the assignment; it returns the member id.
func joinAsConsumer(ctx context.Context, t *testing.T, c *kgo.Client, addr, group, topic string) string {
	sub := kmsg.NewConsumerMemberMetadata()
	sub.Topics = []string{topic}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = group, "consumer", 30_000, 10_000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: sub.AppendTo(nil)}}
	var resp *kmsg.JoinGroupResponse
	for range 2 { // the first answer hands out the member id (KIP-394)
		var err error
		if resp, err = join.RequestWith(ctx, c); err != nil {
			t.Fatalf("%s: join group: %v", addr, err)
		}
		if resp.ErrorCode != kerr.MemberIDRequired.Code {
			break
		}
		join.MemberID = resp.MemberID
	}
	if resp.ErrorCode != 0 {
		t.Fatalf("%s: join group: %s", addr, codeAndMessage(resp.ErrorCode, nil))
	}
	assignment := kmsg.NewConsumerMemberAssignment()
	assignment.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: topic, Partitions: []int32{0, 1, 2, 3}}}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.Generation, sync.MemberID = group, resp.Generation, resp.MemberID
	sync.ProtocolType, sync.Protocol = &join.ProtocolType, resp.Protocol
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: resp.MemberID, MemberAssignment: assignment.AppendTo(nil)}}
	sresp, err := sync.RequestWith(ctx, c)
	if err != nil || sresp.ErrorCode != 0 {
		t.Fatalf("%s: sync group: %v %+v", addr, err, sresp)
	}
	return resp.MemberID
}

// strata advertises no API Apache Kafka does not serve, and no version
// newer than Kafka's: what a client sends strata, a Kafka broker of the
// same release would have taken. (strata keeps some older versions Kafka 4
// dropped, for older clients.)
func TestAdvertisesOnlyWhatApacheKafkaServes(t *testing.T) {
	// Both servers start before the requests' minute runs: starting Apache
	// Kafka has its own bound (testsvc's) and took most of that minute on
	// a loaded machine.
	addrs := map[string]string{"kafka": testsvc.StartKafka(t)}
	addrs["strata"], _ = startServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	versions := map[string]map[int16][2]int16{}
	for name, addr := range addrs {
		c, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, c)
		c.Close()
		if err != nil {
			t.Fatalf("%s: ApiVersions: %v", name, err)
		}
		versions[name] = map[int16][2]int16{}
		for _, k := range resp.ApiKeys {
			versions[name][k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
		}
	}
	for key, s := range versions["strata"] {
		k, ok := versions["kafka"][key]
		switch {
		case !ok:
			t.Errorf("strata advertises %s (%d), which Apache Kafka does not serve", kmsg.NameForKey(key), key)
		case s[1] > k[1]:
			t.Errorf("%s (%d): strata advertises v%d-%d, Apache Kafka serves v%d-%d", kmsg.NameForKey(key), key, s[0], s[1], k[0], k[1])
		}
	}
}
