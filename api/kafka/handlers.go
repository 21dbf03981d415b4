package kafka

import (
	"context"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// errNone is Kafka's "no error"; every other code comes from kerr.
const errNone int16 = 0

const apiVersionsKey = 18

type versionRange struct{ min, max int16 }

// The APIs and versions strata speaks. Versions that address topics by id
// (Fetch 13+, Produce 13+) are left out: strata names topics.
var supportedVersions = map[int16]versionRange{
	0:  {3, 9},  // Produce (record batch v2 from v3)
	1:  {4, 12}, // Fetch
	2:  {1, 7},  // ListOffsets
	3:  {0, 12}, // Metadata
	8:  {0, 8},  // OffsetCommit
	9:  {1, 7},  // OffsetFetch (one group per request)
	10: {0, 4},  // FindCoordinator
	11: {0, 9},  // JoinGroup
	12: {0, 4},  // Heartbeat
	13: {0, 5},  // LeaveGroup
	14: {0, 5},  // SyncGroup
	15: {0, 6},  // DescribeGroups
	16: {0, 4},  // ListGroups
	18: {0, 3},  // ApiVersions
	19: {0, 7},  // CreateTopics
	20: {0, 5},  // DeleteTopics (by name)
	21: {0, 2},  // DeleteRecords
	22: {0, 4},  // InitProducerId
	23: {3, 4},  // OffsetForLeaderEpoch
	32: {0, 4},  // DescribeConfigs
	33: {0, 2},  // AlterConfigs
	44: {0, 1},  // IncrementalAlterConfigs
	17: {0, 1},  // SaslHandshake (v0 is refused: its raw SASL frames are not spoken; librdkafka needs it listed)
	36: {0, 2},  // SaslAuthenticate
	50: {0, 0},  // DescribeUserScramCredentials
	51: {0, 0},  // AlterUserScramCredentials
	// The admin calls of the Java Admin client and Kafka's CLI (issue #14).
	// DescribeLogDirs v0 is gone from Kafka 4 (KIP-896).
	35: {1, 4}, // DescribeLogDirs
	37: {0, 3}, // CreatePartitions
	42: {0, 2}, // DeleteGroups
	47: {0, 0}, // OffsetDelete
	60: {0, 1}, // DescribeCluster
	61: {0, 0}, // DescribeProducers
}

func (s *Server) fillVersions(resp *kmsg.ApiVersionsResponse) {
	keys := make([]int, 0, len(supportedVersions))
	for k := range supportedVersions {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	for _, k := range keys {
		v := supportedVersions[int16(k)]
		resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: int16(k), MinVersion: v.min, MaxVersion: v.max})
	}
}

// client is who sent a request: its client id and address.
type clientInfo struct {
	id, host string
	user     string          // signed in as, with SASL on
	ctx      context.Context // ends when the client goes away; nil (tests) is never
	// denyConfigs, if set, says whether the user may see or change a
	// config resource (an error code) or not (errNone).
	denyConfigs func(kmsg.ConfigResourceType, string) int16
}

func (cl clientInfo) configsAllowed(kind kmsg.ConfigResourceType, name string) int16 {
	if cl.denyConfigs == nil {
		return errNone
	}
	return cl.denyConfigs(kind, name)
}

func (s *Server) handle(req kmsg.Request, cl clientInfo) kmsg.Response {
	ctx := cl.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
		s.fillVersions(resp)
		return resp
	case *kmsg.MetadataRequest:
		return s.metadata(ctx, r)
	case *kmsg.CreateTopicsRequest:
		return s.createTopics(ctx, r)
	case *kmsg.DeleteTopicsRequest:
		return s.deleteTopics(ctx, r)
	case *kmsg.CreatePartitionsRequest:
		return s.createPartitions(ctx, r)
	case *kmsg.DescribeLogDirsRequest:
		return s.describeLogDirs(ctx, r)
	case *kmsg.DescribeProducersRequest:
		return s.describeProducers(ctx, r)
	case *kmsg.DescribeClusterRequest:
		return s.describeCluster(r)
	case *kmsg.InitProducerIDRequest:
		return s.initProducerID(ctx, r)
	case *kmsg.ProduceRequest:
		return s.produce(ctx, r)
	case *kmsg.FindCoordinatorRequest:
		return s.findCoordinator(r)
	case *kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest, *kmsg.HeartbeatRequest, *kmsg.LeaveGroupRequest:
		if resp := s.notCoordinator(r); resp != nil {
			return resp
		}
		return s.groups.do(ctx, cl, r, nil)
	case *kmsg.DescribeGroupsRequest, *kmsg.ListGroupsRequest:
		return s.groupAdmin(ctx, cl, r)
	case *kmsg.DeleteGroupsRequest, *kmsg.OffsetDeleteRequest:
		return s.groupAdmin(ctx, cl, r)
	case *kmsg.OffsetCommitRequest:
		return s.offsetCommit(r)
	case *kmsg.OffsetFetchRequest:
		return s.offsetFetch(r)
	case *kmsg.FetchRequest:
		if !s.fromPeer(r, max(r.ReplicaID, r.ReplicaState.ID), r.UnknownTags, cl) {
			r.ReplicaID, r.ReplicaState.ID = -1, -1
		}
		return s.fetch(ctx, r)
	case *kmsg.ListOffsetsRequest:
		if !s.fromPeer(r, r.ReplicaID, r.UnknownTags, cl) {
			r.ReplicaID = -1
		}
		return s.listOffsets(ctx, r)
	case *kmsg.DeleteRecordsRequest:
		return s.deleteRecords(ctx, r)
	case *kmsg.OffsetForLeaderEpochRequest:
		return s.offsetForLeaderEpoch(ctx, r)
	case *kmsg.DescribeConfigsRequest:
		return s.describeConfigs(ctx, r, cl.configsAllowed)
	case *kmsg.AlterConfigsRequest:
		return s.alterConfigs(ctx, r, cl.configsAllowed)
	case *kmsg.IncrementalAlterConfigsRequest:
		return s.incrementalAlterConfigs(ctx, r, cl.configsAllowed)
	}
	return unhandled{req.ResponseKind()}
}

// unhandled answers an API without a handler with its empty response
// (none reaches here: the frame reader refuses what ApiVersions does not
// advertise); TestApiVersionsAdvertisesWhatIsServed looks for it.
type unhandled struct{ kmsg.Response }

// topicShape is how kmsg spells a topic of the APIs that name topics only
// by name: a request's with the partitions asked for, a response's with
// their answers.
type topicShape[P any] struct {
	Topic       string
	Partitions  []P
	UnknownTags kmsg.Tags
}

// kmsgTopic is any kmsg topic of that shape (DeleteRecordsRequestTopic,
// ListOffsetsResponseTopic, ...): converting to topicShape reads its fields.
type kmsgTopic[P any] interface {
	~struct {
		Topic       string
		Partitions  []P
		UnknownTags kmsg.Tags
	}
}

// eachPartition answers every partition of every topic of a request, in
// request order: answer gives one partition's response, and the topics of
// the response (RT) are built around them.
func eachPartition[RT kmsgTopic[RP], T kmsgTopic[P], P, RP any](topics []T, answer func(topic string, p P) RP) []RT {
	out := make([]RT, 0, len(topics))
	for _, t := range topics {
		in := topicShape[P](t)
		rt := topicShape[RP]{Topic: in.Topic, Partitions: make([]RP, 0, len(in.Partitions))}
		for _, p := range in.Partitions {
			rt.Partitions = append(rt.Partitions, answer(in.Topic, p))
		}
		out = append(out, RT(rt))
	}
	return out
}
