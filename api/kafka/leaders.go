package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/engine/store"
	"strata/metadata"
)

// awaitLeaders returns once this node's view has a leader for each of
// topic's partitions in [from, to), and this node, where it is that leader
// of a replicated partition, has taken the leadership (it would refuse a
// produce before). Kafka's CreateTopics and CreatePartitions answer once the
// leaders are known; a client that produces right after the answer then
// never sees LEADER_NOT_AVAILABLE. It answers REQUEST_TIMED_OUT when the
// timeout passes first (the topic exists; its leaders are still coming), as
// Kafka does; a timeout of 0 or less does not wait.
func (s *Server) awaitLeaders(ctx context.Context, topic string, from, to int32, timeout time.Duration) int16 {
	if timeout <= 0 {
		return errNone
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	vc, _ := s.cluster.(metadata.Changes)
	for {
		var changed <-chan struct{}
		if vc != nil {
			changed = vc.Changed() // taken before the look, so no change is missed
		}
		if s.leadersKnown(topic, from, to) {
			return errNone
		}
		// The view's changes wake the wait; a replica taking leadership is
		// no change of the view, so it is looked at again shortly.
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			s.log.Warn("kafka: the new partitions' leaders are not known within the request's timeout", "topic", topic, "from", from, "to", to, "timeout", timeout)
			return kerr.RequestTimedOut.Code
		}
		t.Stop()
	}
}

func (s *Server) leadersKnown(topic string, from, to int32) bool {
	for p := from; p < to; p++ {
		info, ok := s.cluster.Partition(topic, p)
		if !ok || info.Leader < 0 {
			return false
		}
		if info.Leader == s.cluster.Self() && len(info.Replicas) > 1 && !s.partitions.LeadTaken(store.ShardName(topic, p)) {
			return false
		}
	}
	return true
}
