package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// initProducerID hands out a producer id the metadata layer reserved for
// this node (a block at a time: unique across the cluster and across
// restarts, docs/kafka.md#idempotent-producers). Without a block, as when
// etcd cannot be reached, the client is told to retry with
// COORDINATOR_LOAD_IN_PROGRESS, as Kafka's brokers answer while their
// block request to the controller is outstanding.
func (s *Server) initProducerID(ctx context.Context, r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	if r.TransactionalID != nil {
		resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode = -1, -1, kerr.InvalidRequest.Code
		return resp
	}
	id, err := s.cluster.ProducerID(ctx)
	if err != nil {
		s.log.Warn("kafka: no producer id to hand out", "err", err)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}
