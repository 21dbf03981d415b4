package kafka

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/internal/testsvc"
)

// What a client sees of one broker after the same calls, in a form two
// brokers can be compared by.
type observed struct {
	ProducedOffsets []int64
	Consumed        []string
	Start, End      map[int32]int64
	AfterMilli      map[int32]int64
	CreateAgain     string
	// CreateAgainAs: the same, asking for configs it would refuse
	// (cleanup.policy=compact, which strata does not do yet): the topic's
	// existence is answered first, as Kafka Connect's workers rely on.
	CreateAgainAs string
	AfterDelete   map[int32]int64
	FetchDeleted  string
	FetchPastEnd  string
	FetchAtEnd    string
	Epochs        map[string]string
	Committed     map[int32]string
	Admin         adminObserved
	Configs       observedConfigs
}

// The same franz-go calls against strata and Apache Kafka (KRaft, one node)
// give the same answers: offsets, records byte for byte (null and empty
// keys, null values, headers, timestamps), watermarks, offsets by time,
// errors on a duplicate topic and on offsets outside the log, and
// DeleteRecords; and the admin calls of the Java Admin client and Kafka's
// CLI (CreatePartitions, DeleteGroups, OffsetDelete, ListGroups and
// DescribeGroups of a group that lives in its offsets, DescribeProducers,
// DescribeCluster, DescribeLogDirs). Kafka is the reference implementation
// a client was written against.
func TestSameAnswersAsApacheKafka(t *testing.T) {
	strataAddr, _ := startServer(t, Config{LogDir: t.TempDir()})
	got := map[string]observed{}
	for name, addr := range map[string]string{"strata": strataAddr, "kafka": testsvc.StartKafka(t)} {
		got[name] = observe(t, addr, fmt.Sprintf("conformance-%d", time.Now().UnixNano()))
	}
	s, k := got["strata"], got["kafka"]
	if !reflect.DeepEqual(s, k) {
		t.Fatalf("strata and Apache Kafka answered differently:\nstrata: %+v\nkafka:  %+v", s, k)
	}
	// And both answered what the calls call for.
	want := observed{
		ProducedOffsets: []int64{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5},
		Start:           map[int32]int64{0: 0, 1: 0}, End: map[int32]int64{0: 6, 1: 6},
		AfterMilli:  map[int32]int64{0: 3, 1: 3},
		CreateAgain: kerr.TopicAlreadyExists.Message, CreateAgainAs: kerr.TopicAlreadyExists.Message, AfterDelete: map[int32]int64{0: 4, 1: 0},
		FetchDeleted: kerr.OffsetOutOfRange.Message, FetchPastEnd: kerr.OffsetOutOfRange.Message, FetchAtEnd: "",
		Epochs: map[string]string{
			"fetch current=-1": "ok", "fetch current=E": "ok",
			"fetch current=E+1": "UNKNOWN_LEADER_EPOCH", "fetch current=-2": "ok", // Fetch: any negative is none
			"list-offsets current=-1": "ok", "list-offsets current=E": "ok",
			"list-offsets current=E+1": "UNKNOWN_LEADER_EPOCH", "list-offsets current=-2": "FENCED_LEADER_EPOCH",
			"offset-for-epoch current=-1": "ok", "offset-for-epoch current=E": "ok",
			"offset-for-epoch current=E+1": "UNKNOWN_LEADER_EPOCH", "offset-for-epoch current=-2": "FENCED_LEADER_EPOCH",
			"p1 end of E": "E ends at 6", "p1 end of E+1": "-1 ends at -1",
			// Partition 0's records below 4 were deleted: the epoch still ends at the log end.
			"p0 end of E": "E ends at 6",
		},
		Committed: map[int32]string{0: `5 "checkpoint"`},
		Admin: adminObserved{
			GrowValidateOnly: "ok", Grow: "ok",
			GrowSame:          "INVALID_PARTITIONS: Topic already has 2 partition(s).",
			GrowLess:          "INVALID_PARTITIONS: The topic {topic} currently has 2 partition(s); 1 would not be an increase.",
			GrowUnknown:       "UNKNOWN_TOPIC_OR_PARTITION",
			GrowTwice:         "INVALID_REQUEST: Duplicate topic name.",
			GrowBadAssignment: "INVALID_REPLICA_ASSIGNMENT: Replica assignment is invalid.",
			// The new partitions start empty; the old ones keep their records.
			AfterGrowStart: map[int32]int64{0: 4, 1: 0, 2: 0, 3: 0}, AfterGrowEnd: map[int32]int64{0: 6, 1: 6, 2: 0, 3: 0},
			ProducedToNew:            []int64{0, 0},
			ListedCommitted:          `Empty type=""`,
			DescribedCommitted:       `ok Empty type="" members=0`,
			OffsetDeleteUnknownGroup: "GROUP_ID_NOT_FOUND",
			OffsetDeleteUnknownTopic: "p0 UNKNOWN_TOPIC_OR_PARTITION, p1 UNKNOWN_TOPIC_OR_PARTITION",
			CommitWhileMember:        "UNKNOWN_MEMBER_ID: The coordinator is not aware of this member.",
			OffsetDeleteSubscribed:   "p0 GROUP_SUBSCRIBED_TO_TOPIC, p1 GROUP_SUBSCRIBED_TO_TOPIC",
			DeleteNonEmpty:           "NON_EMPTY_GROUP",
			OffsetDeleteAfterLeave:   "p0 ok, p1 ok",
			DeleteGroup:              "ok", DeleteAgain: "GROUP_ID_NOT_FOUND", ListedAfterDelete: "not listed",
			DescribeGone: `GROUP_ID_NOT_FOUND: Group {topic}-admin not found. Dead type="" members=0`,
			Producers: map[int32]string{
				0: "ok id>=0:true epoch=0 last_seq=5 last_ts=1700000000011 coordinator_epoch=-1 txn_start=-1",
				1: "ok id>=0:true epoch=0 last_seq=5 last_ts=1700000000011 coordinator_epoch=-1 txn_start=-1",
			},
			Cluster:            "ok id=true brokers=1 dialed=true controller_is_broker=true",
			ControllerEndpoint: "MISMATCHED_ENDPOINT_TYPE: The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER",
			LogDirs:            "1 dirs: p0 size>0:true lag=0 future=false, p1 size>0:true lag=0 future=false, p2 size>0:true lag=0 future=false, p3 size>0:true lag=0 future=false",
		},
	}
	want.Consumed = s.Consumed
	want.Configs = s.Configs
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("both brokers answered, but not as expected:\n got: %+v\nwant: %+v", s, want)
	}
	if len(s.Consumed) != 12 {
		t.Fatalf("consumed %d records, produced 12", len(s.Consumed))
	}
}

func observe(t *testing.T, addr, topic string) observed {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm := kadm.NewClient(c)
	var o observed
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatalf("%s: create topic: %v", addr, err)
	}
	waitLeaders(ctx, t, adm, topic)
	_, err = adm.CreateTopic(ctx, 2, 1, nil, topic)
	var ke *kerr.Error
	if errors.As(err, &ke) {
		o.CreateAgain = ke.Message
	}
	compact := "compact"
	_, err = adm.CreateTopic(ctx, 2, 1, map[string]*string{"cleanup.policy": &compact}, topic)
	if errors.As(err, &ke) {
		o.CreateAgainAs = ke.Message
	}

	base := time.UnixMilli(1_700_000_000_000)
	for p := int32(0); p < 2; p++ {
		recs := []*kgo.Record{
			{Key: []byte("k"), Value: []byte("v0"), Timestamp: base},
			{Key: nil, Value: []byte("null key"), Timestamp: base.Add(time.Millisecond)},
			{Key: []byte{}, Value: []byte("empty key"), Timestamp: base.Add(2 * time.Millisecond)},
			{Key: []byte("tombstone"), Value: nil, Timestamp: base.Add(10 * time.Millisecond)},
			{Key: []byte("h"), Value: []byte{}, Timestamp: base.Add(11 * time.Millisecond),
				Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "null", Value: nil}, {Key: "", Value: []byte{}}}},
			{Key: []byte("late"), Value: []byte("earlier timestamp"), Timestamp: base.Add(5 * time.Millisecond)},
		}
		for _, r := range recs {
			r.Topic, r.Partition = topic, p
		}
		res := c.ProduceSync(ctx, recs...)
		if err := res.FirstErr(); err != nil {
			t.Fatalf("%s: produce: %v", addr, err)
		}
		for _, r := range res {
			o.ProducedOffsets = append(o.ProducedOffsets, r.Record.Offset)
		}
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for len(o.Consumed) < 12 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("%s: consume: %v", addr, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			o.Consumed = append(o.Consumed, fmt.Sprintf("p%d@%d ts=%d key=%q/%t value=%q/%t headers=%v",
				r.Partition, r.Offset, r.Timestamp.UnixMilli(), r.Key, r.Key == nil, r.Value, r.Value == nil, headers(r.Headers)))
		})
	}
	slices.Sort(o.Consumed) // partitions arrive in either order

	o.Start = listed(ctx, t, addr, func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) })
	o.End = listed(ctx, t, addr, func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, topic) })
	// The first record at or after base+3ms: offset 3 (10ms); the earlier
	// timestamp of offset 5 does not count, it comes later in the log.
	o.AfterMilli = listed(ctx, t, addr, func() (kadm.ListedOffsets, error) {
		return adm.ListOffsetsAfterMilli(ctx, base.Add(3*time.Millisecond).UnixMilli(), topic)
	})

	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 4})
	if _, err := adm.DeleteRecords(ctx, del); err != nil {
		t.Fatalf("%s: delete records: %v", addr, err)
	}
	o.AfterDelete = listed(ctx, t, addr, func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) })
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatalf("%s: metadata: %v", addr, err)
	}
	id := md.Topics[topic].ID // fetch v13+ names topics by ID, older versions by name
	o.FetchDeleted = fetchError(ctx, t, c, topic, id, 0, 1)
	o.FetchPastEnd = fetchError(ctx, t, c, topic, id, 1, 7)
	o.FetchAtEnd = fetchError(ctx, t, c, topic, id, 1, 6)
	o.Epochs = observeEpochs(ctx, t, c, topic, id, max(md.Topics[topic].Partitions[1].LeaderEpoch, 0))

	// A consumer without a group membership commits, then reads it back.
	commit := kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: topic, Partition: 0, At: 5, LeaderEpoch: -1, Metadata: "checkpoint"})
	group := topic + "-readers"
	if resp, err := adm.CommitOffsets(ctx, group, commit); err != nil || resp.Error() != nil {
		t.Fatalf("%s: commit offsets: %v %v", addr, err, resp.Error())
	}
	fetched, err := adm.FetchOffsets(ctx, group)
	if err != nil || fetched.Error() != nil {
		t.Fatalf("%s: fetch offsets: %v %v", addr, err, fetched.Error())
	}
	o.Committed = map[int32]string{}
	fetched.Each(func(r kadm.OffsetResponse) { o.Committed[r.Partition] = fmt.Sprintf("%d %q", r.At, r.Metadata) })

	o.Admin = observeAdmin(ctx, t, c, adm, addr, topic)
	o.Configs = observeConfigs(ctx, t, c, addr, topic)
	return o
}

func headers(hs []kgo.RecordHeader) []string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%q=%q/%t", h.Key, h.Value, h.Value == nil))
	}
	return out
}

func listed(ctx context.Context, t *testing.T, addr string, list func() (kadm.ListedOffsets, error)) map[int32]int64 {
	l, err := list()
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		t.Fatalf("%s: list offsets: %v", addr, err)
	}
	out := map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// fetchError fetches partition at offset with a raw request, the way a
// client learns that an offset is gone, and returns the error's message.
func fetchError(ctx context.Context, t *testing.T, c *kgo.Client, topic string, id [16]byte, partition int32, offset int64) string {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxBytes, req.MaxWaitMillis = -1, 1<<20, 0
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = partition, offset, 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatalf("fetch %s/%d@%d: %v", topic, partition, offset, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch %s/%d@%d: %d topics in the answer", topic, partition, offset, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
		return err.(*kerr.Error).Message
	}
	return ""
}

// observeEpochs sends Fetch, ListOffsets and OffsetForLeaderEpoch with
// current leader epochs around the partition's own (e: Kafka's first epoch
// is 0; strata's single node answers -1 in Metadata and checks as 0), and
// asks where epochs e and e+1 end. Answers name e as "E" so that both
// brokers' read the same.
func observeEpochs(ctx context.Context, t *testing.T, c *kgo.Client, topic string, id [16]byte, e int32) map[string]string {
	out := map[string]string{}
	name := func(v int32) string {
		switch v {
		case e:
			return "E"
		case e + 1:
			return "E+1"
		}
		return strconv.Itoa(int(v))
	}
	for _, current := range []int32{-1, e, e + 1, -2} {
		f := kmsg.NewPtrFetchRequest()
		f.ReplicaID, f.MaxBytes, f.MaxWaitMillis = -1, 1<<20, 0
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = topic, id
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = 1, 0, 1<<20, current, -1
		ft.Partitions = append(ft.Partitions, fp)
		f.Topics = append(f.Topics, ft)
		fr, err := f.RequestWith(ctx, c)
		if err != nil {
			t.Fatalf("fetch at current epoch %d: %v", current, err)
		}
		out["fetch current="+name(current)] = errName(fr.Topics[0].Partitions[0].ErrorCode)

		l := kmsg.NewPtrListOffsetsRequest()
		l.ReplicaID = -1
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = topic
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.CurrentLeaderEpoch, lp.Timestamp = 1, current, -1
		lt.Partitions = append(lt.Partitions, lp)
		l.Topics = append(l.Topics, lt)
		lr, err := l.RequestWith(ctx, c)
		if err != nil {
			t.Fatalf("list offsets at current epoch %d: %v", current, err)
		}
		out["list-offsets current="+name(current)] = errName(lr.Topics[0].Partitions[0].ErrorCode)

		oc, _, _ := offsetForEpoch(ctx, t, c, topic, 1, current, e)
		out["offset-for-epoch current="+name(current)] = errName(oc)
	}
	for _, asked := range []int32{e, e + 1} {
		_, ep, end := offsetForEpoch(ctx, t, c, topic, 1, e, asked)
		out["p1 end of "+name(asked)] = fmt.Sprintf("%s ends at %d", name(ep), end)
	}
	_, ep, end := offsetForEpoch(ctx, t, c, topic, 0, -1, e)
	out["p0 end of E"] = fmt.Sprintf("%s ends at %d", name(ep), end)
	return out
}

// errName is an error code's name, "ok" for none.
func errName(c int16) string {
	if err := kerr.ErrorForCode(c); err != nil {
		return err.(*kerr.Error).Message
	}
	return "ok"
}

func offsetForEpoch(ctx context.Context, t *testing.T, c *kgo.Client, topic string, partition, current, asked int32) (int16, int32, int64) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = partition, current, asked
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatalf("offset for leader epoch %d at current epoch %d: %v", asked, current, err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.LeaderEpoch, p.EndOffset
}

func waitLeaders(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) {
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil && md.Topics[topic].Err == nil && len(md.Topics[topic].Partitions) == 2 {
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
			t.Fatalf("topic %s: partitions without a leader: %v", topic, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
