package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/replica"
)

// tagLogStart, on a follower's fetch request partition: where the
// follower's log starts, u64. The leader answers DeleteRecords only once
// every ISR member's log starts at or past the deletion (Kafka's low
// watermark), so no successor serves the deleted records again.
const tagLogStart = 0x5308

func encodeLogStart(start int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(start)) }

// followerLogStart reads a follower's log start from its fetch: bytes from
// the network. -1 when it does not say.
func followerLogStart(p kmsg.FetchRequestTopicPartition) (int64, error) {
	start, err := int64(-1), error(nil)
	p.UnknownTags.Each(func(k uint32, v []byte) {
		if k != tagLogStart {
			return
		}
		if len(v) != 8 {
			err = fmt.Errorf("log start: %d bytes, want 8", len(v))
			return
		}
		if s := int64(binary.BigEndian.Uint64(v)); s >= 0 {
			start = s
		} else {
			err = fmt.Errorf("log start %d: negative", s)
		}
	})
	if err != nil {
		return -1, err
	}
	return start, nil
}

// awaitDeleted waits, for a replicated partition, until its ISR has
// deleted below low too (replica.Node.AwaitLogStart), within the request's
// timeout: REQUEST_TIMED_OUT after it, as Kafka's delayed DeleteRecords
// answers (the leader's delete stands; the followers catch up).
func (s *Server) awaitDeleted(ctx context.Context, topic string, partition int32, shard string, low int64, timeout time.Duration) int16 {
	info, _ := s.cluster.Partition(topic, partition)
	if len(info.Replicas) <= 1 || s.cfg.Replication == nil {
		return errNone
	}
	// The followers' long polls answer now: their next fetch then deletes
	// and reports the new start.
	s.appended.wake(shard)
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch err := s.cfg.Replication.AwaitLogStart(ctx, shard, low); {
	case err == nil:
		return errNone
	case errors.Is(err, replica.ErrNotLeader):
		return kerr.NotLeaderForPartition.Code
	default:
		s.log.Warn("kafka: delete records: the ISR has not deleted within the request's timeout", "shard", shard, "offset", low, "err", err)
		return kerr.RequestTimedOut.Code
	}
}
