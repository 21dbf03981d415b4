package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/catalog"
	"strata/catalog/offsets"
	"strata/engine/memory"
)

// As in Kafka, an OffsetCommit keeps nothing a consumer will not read and
// nothing over offset.metadata.max.bytes: metadata longer than that is
// refused with OFFSET_METADATA_TOO_LARGE, a partition that does not exist
// with UNKNOWN_TOPIC_OR_PARTITION, each partition on its own, and the
// request's other partitions are committed.
func TestOffsetCommitBounds(t *testing.T) {
	srv := serverWithTopic(t, Config{OffsetMetadataMaxBytes: 100}, "t", 2)
	md := func(n int) *string { s := strings.Repeat("m", n); return &s }
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = "g", -1
	req.Topics = []kmsg.OffsetCommitRequestTopic{
		{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{
			{Partition: 0, Offset: 5, Metadata: md(100)},
			{Partition: 1, Offset: 6, Metadata: md(101)},
			{Partition: 2, Offset: 7},
		}},
		{Topic: "never", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 8}}},
	}
	resp := srv.handle(req, clientInfo{}).(*kmsg.OffsetCommitResponse)
	want := map[string]map[int32]int16{"t": {0: errNone, 1: kerr.OffsetMetadataTooLarge.Code, 2: kerr.UnknownTopicOrPartition.Code},
		"never": {0: kerr.UnknownTopicOrPartition.Code}}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != want[rt.Topic][rp.Partition] {
				t.Errorf("commit of %s/%d: %s; want %s", rt.Topic, rp.Partition, codeName(rp.ErrorCode), codeName(want[rt.Topic][rp.Partition]))
			}
		}
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = "g"
	fresp := srv.handle(fetch, clientInfo{}).(*kmsg.OffsetFetchResponse)
	got := map[string]map[int32]int64{}
	for _, rt := range fresp.Topics {
		for _, rp := range rt.Partitions {
			if got[rt.Topic] == nil {
				got[rt.Topic] = map[int32]int64{}
			}
			got[rt.Topic][rp.Partition] = rp.Offset
		}
	}
	if len(got) != 1 || len(got["t"]) != 1 || got["t"][0] != 5 {
		t.Fatalf("the group's committed offsets: %v; want only t/0 at 5", got)
	}
}

// fullOffsets is a real store that refuses commits as an etcd past its
// quota does.
type fullOffsets struct{ *offsets.Store }

func (fullOffsets) Commit(string, map[string]map[int32]offsets.Committed) error {
	return errors.Join(catalog.ErrMetadataFull, errors.New("etcdserver: mvcc: database space exceeded"))
}

// A commit etcd refuses for want of space answers KAFKA_STORAGE_ERROR, not
// COORDINATOR_NOT_AVAILABLE or UNKNOWN_SERVER_ERROR: the consumer is told
// its position is not stored, and the log says why (docs/cluster.md).
func TestOffsetCommitWhenMetadataFull(t *testing.T) {
	store, err := offsets.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := serverWithTopic(t, Config{Offsets: fullOffsets{store}}, "t", 1)
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = "g", -1
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
	resp := srv.handle(req, clientInfo{}).(*kmsg.OffsetCommitResponse)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.KafkaStorageError.Code {
		t.Fatalf("commit while etcd is full: %s; want KAFKA_STORAGE_ERROR", codeName(code))
	}
}

// serverWithTopic is a single node on the memory engine with one topic.
func serverWithTopic(t *testing.T, cfg Config, topic string, partitions int32) *Server {
	t.Helper()
	cfg.Logger = quiet
	srv := New(memory.New(100), cfg)
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}}
	if code := srv.handle(ct, clientInfo{}).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != errNone {
		t.Fatalf("create topic %s: %s", topic, codeName(code))
	}
	return srv
}
