package kafka

import (
	"context"
	"errors"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
	"strata/metadata"
)

func (s *Server) metadata(ctx context.Context, r *kmsg.MetadataRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	for _, b := range s.cluster.Brokers() {
		resp.Brokers = append(resp.Brokers, kmsg.MetadataResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port})
	}
	resp.ControllerID = s.cluster.Controller()
	cluster := clusterID
	resp.ClusterID = &cluster
	topics, _ := s.topics(ctx)
	var names []string
	if r.Topics == nil {
		for t := range topics {
			names = append(names, t)
		}
		sort.Strings(names)
	} else {
		for _, t := range r.Topics {
			if t.Topic != nil {
				names = append(names, *t.Topic)
			}
		}
	}
	for _, name := range names {
		t := kmsg.NewMetadataResponseTopic()
		n := name
		t.Topic = &n
		parts, ok := topics[name]
		if !ok && r.Topics != nil && r.AllowAutoTopicCreation && s.cfg.AutoCreateTopics {
			// A name whose deleted topic is still leaving the bucket is no
			// topic yet: UNKNOWN_TOPIC_OR_PARTITION, which producers retry,
			// not partitions that refuse every produce.
			code, _, err := s.createTopicErr(ctx, name, 0, -1, nil)
			if !errors.Is(err, metadata.ErrTopicDeleting) && (code == errNone || code == kerr.TopicAlreadyExists.Code) {
				parts, ok = s.cfg.DefaultPartitions, true
				if again, _ := s.topics(ctx); again[name] > 0 {
					parts = again[name]
				}
			}
		}
		if !ok {
			t.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if store.ValidateTopic(name) != nil {
				t.ErrorCode = kerr.InvalidTopicException.Code
			}
		}
		for p := int32(0); p < parts; p++ {
			pm := kmsg.NewMetadataResponseTopicPartition()
			info, placed := s.cluster.Partition(name, p)
			if !placed { // a new topic the controller has not placed yet
				info = PartitionInfo{Leader: -1, LeaderEpoch: -1}
			}
			pm.Partition, pm.Leader, pm.LeaderEpoch = p, info.Leader, info.LeaderEpoch
			pm.Replicas, pm.ISR = info.Replicas, info.ISR
			if info.Leader < 0 {
				pm.ErrorCode = kerr.LeaderNotAvailable.Code // clients retry
			}
			t.Partitions = append(t.Partitions, pm)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}
