package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
)

// describeProducers answers DescribeProducers: each partition's idempotent
// producers as strata keeps them to match retries (partition/producers.go), with
// their epoch, last sequence and the largest timestamp of their last
// batch. strata has no transactions, so no producer has one open
// (CurrentTxnStartOffset -1) and none has a coordinator epoch.
func (s *Server) describeProducers(ctx context.Context, r *kmsg.DescribeProducersRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, s.producersOf(ctx, t.Topic, p))
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) producersOf(ctx context.Context, topic string, partition int32) kmsg.DescribeProducersResponseTopicPartition {
	rp := kmsg.NewDescribeProducersResponseTopicPartition()
	rp.Partition = partition
	if rp.ErrorCode = s.leads(topic, partition); rp.ErrorCode != errNone {
		return rp
	}
	topics, err := s.topics(ctx)
	if err == nil && partition >= topics[topic] {
		rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
		return rp
	}
	ps, err := s.partitions.Producers(ctx, store.ShardName(topic, partition))
	if err != nil {
		s.log.Error("kafka: describe producers", "topic", topic, "partition", partition, "err", err)
		rp.ErrorCode = kerr.UnknownServerError.Code
		return rp
	}
	rp.ActiveProducers = []kmsg.DescribeProducersResponseTopicPartitionActiveProducer{}
	for _, p := range ps {
		ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
		ap.ProducerID, ap.ProducerEpoch, ap.LastSequence, ap.LastTimestamp = p.ID, int32(p.Epoch), p.LastSequence, p.LastTimestamp
		ap.CoordinatorEpoch = -1
		rp.ActiveProducers = append(rp.ActiveProducers, ap)
	}
	return rp
}
