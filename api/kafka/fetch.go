package kafka

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/leaderepoch"
	"strata/engine/store"
)

// fetch answers at once when there are min_bytes to send or the client
// does not wait; otherwise it waits for an append to one of the partitions
// it asked for (or max_wait) and reads again.
func (s *Server) fetch(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	if isCopyRead(r) {
		return s.copyRead(ctx, r)
	}
	if s.isReplicaFetch(r) {
		return s.replicaFetch(ctx, r)
	}
	return s.longPoll(ctx, r, func() (*kmsg.FetchResponse, bool) {
		resp, total := s.fetchOnce(ctx, r)
		// As Kafka, an error answers at once: the client has to act on it
		// (re-route, reset, retry), not wait for records.
		return resp, total >= int(r.MinBytes) || failed(resp) || r.MaxWaitMillis <= 0
	})
}

// longPoll answers with read's response when read says it is done, else
// waits for an append to one of the partitions asked for (or max_wait) and
// reads again; at max_wait it answers what a last read finds.
func (s *Server) longPoll(ctx context.Context, r *kmsg.FetchRequest, read func() (*kmsg.FetchResponse, bool)) kmsg.Response {
	deadline := time.Now().Add(min(time.Duration(r.MaxWaitMillis)*time.Millisecond, s.cfg.MaxFetchWait))
	var shards []string
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			shards = append(shards, store.ShardName(t.Topic, p.Partition))
		}
	}
	for {
		// Register before reading, so an append between the read and the
		// wait still wakes this poll.
		woken := s.appended.wait(shards)
		resp, done := read()
		if done || !time.Now().Before(deadline) {
			s.appended.cancel(shards, woken)
			return resp
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-woken:
			timer.Stop()
		case <-timer.C:
			s.appended.cancel(shards, woken)
			resp, _ := read()
			return resp
		case <-s.closing: // shutting down: answer what there is now
			timer.Stop()
			s.appended.cancel(shards, woken)
			return resp
		case <-ctx.Done(): // the client went away: nobody waits for the answer
			timer.Stop()
			s.appended.cancel(shards, woken)
			return resp
		}
	}
}

// noRecords is a fetch answer's partition before anything is read into it.
func noRecords(partition int32) kmsg.FetchResponseTopicPartition {
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.Partition = partition
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
	rp.PreferredReadReplica = -1
	rp.RecordBatches = []byte{} // empty, not null: librdkafka refuses a null record set
	return rp
}

func failed(resp *kmsg.FetchResponse) bool {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != errNone {
				return true
			}
		}
	}
	return false
}

func (s *Server) fetchOnce(ctx context.Context, r *kmsg.FetchRequest) (*kmsg.FetchResponse, int) {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	maxBytes := int(r.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = 50 << 20
	}
	// Partitions are read and reframed in parallel (each is a decode and an
	// encode of up to a megabyte); the answer then keeps them in request
	// order until max_bytes, always including the first one with records.
	type read struct {
		rp    *kmsg.FetchResponseTopicPartition
		shard string
		from  uint64
		limit int
	}
	var reads []read
	var remotes []remoteRead
	leaders := map[int32]Broker{} // KIP-951: where the refused partitions are led
	// A replica (another node reading its part of a split log) is answered
	// from this node's log, whoever leads.
	replica := r.ReplicaID >= 0 || r.ReplicaState.ID >= 0
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.FetchResponseTopicPartition, len(t.Partitions))
		for i, p := range t.Partitions {
			rp := &rt.Partitions[i]
			*rp = noRecords(p.Partition)
			if !replica {
				rp.ErrorCode = s.leads(t.Topic, p.Partition)
			}
			if rp.ErrorCode == errNone && !replica && p.CurrentLeaderEpoch >= 0 {
				// A client that saw a different leader epoch re-reads
				// Metadata before fetching (KIP-320). Kafka's Fetch takes
				// any negative epoch for none (the conformance test shows
				// it), ListOffsets and OffsetForLeaderEpoch only -1.
				rp.ErrorCode = s.checkCurrentEpoch(t.Topic, p.Partition, p.CurrentLeaderEpoch)
			}
			if rp.ErrorCode != errNone {
				if info, b, ok := s.leader(t.Topic, p.Partition); ok && rp.ErrorCode == kerr.NotLeaderForPartition.Code {
					rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = info.Leader, info.LeaderEpoch
					leaders[b.NodeID] = b
				}
				continue
			}
			shard := store.ShardName(t.Topic, p.Partition)
			low, high, err := s.store.Watermarks(ctx, shard)
			limit := max(1, min(int(p.PartitionMaxBytes), maxBytes))
			if node := s.holder(s.parts(t.Topic, p.Partition), p.FetchOffset); !replica && node != s.cluster.Self() {
				if err == nil {
					rp.HighWatermark, rp.LastStableOffset = int64(high), int64(high)
				}
				remotes = append(remotes, remoteRead{rp, t.Topic, p.Partition, p.FetchOffset, limit, node})
				continue
			}
			if err != nil {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				continue
			}
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = int64(high), int64(high), int64(low)
			reads = append(reads, read{rp, shard, uint64(p.FetchOffset), limit})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	// Partitions are taken in request order from one budget of max_bytes:
	// a partition is read only with what the ones before it left, so the
	// memory of one fetch stays near max_bytes however many it names.
	var wg sync.WaitGroup
	for _, rd := range remotes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.readRemote(ctx, rd)
		}()
	}
	var mu sync.Mutex
	returned := sync.NewCond(&mu)
	taken, left, reading := 0, maxBytes, 0
	for w := 0; w < min(len(reads), runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				for taken < len(reads) && left <= 0 && reading > 0 {
					returned.Wait() // a read in flight may give bytes back
				}
				if taken == len(reads) || left <= 0 {
					mu.Unlock()
					return
				}
				rd := reads[taken]
				taken++
				limit := min(rd.limit, left)
				left -= limit // held while reading; what is not used goes back
				reading++
				mu.Unlock()
				// A view, not a copy: the records are reframed straight
				// from the segment's mapping, then let go.
				recs, release, err := store.ReadView(ctx, s.store, rd.shard, rd.from, store.Budget{MaxBytes: limit})
				var epochs leaderepoch.History
				if err == nil && len(recs) > 0 {
					epochs, err = s.storedEpochs(ctx, rd.shard)
				}
				var oor *store.OutOfRangeError
				switch {
				case errors.As(err, &oor):
					rd.rp.ErrorCode = kerr.OffsetOutOfRange.Code
				case err != nil:
					s.log.Error("kafka: fetch", "shard", rd.shard, "offset", rd.from, "err", err)
					rd.rp.ErrorCode = kerr.UnknownServerError.Code
				default:
					rd.rp.RecordBatches = encodeBatches(scratchBuf(ctx, batchesSize(recs)), recs, epochs)
				}
				release()
				mu.Lock()
				left += limit - len(rd.rp.RecordBatches)
				reading--
				returned.Broadcast()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, rd := range reads {
		if n := len(rd.rp.RecordBatches); total > 0 && total+n > maxBytes {
			rd.rp.RecordBatches = []byte{} // over max_bytes: the client asks again from the same offset
		} else {
			total += n
		}
	}
	for _, rd := range remotes {
		total += len(rd.rp.RecordBatches)
	}
	for _, b := range leaders {
		resp.Brokers = append(resp.Brokers, kmsg.FetchResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port})
	}
	return resp, total
}
