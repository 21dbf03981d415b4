package kafka

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/integrity"
	"strata/engine/leaderepoch"
	"strata/engine/store"
	"strata/peer"
)

// fetch answers at once when there are min_bytes to send or the client
// does not wait; otherwise it waits for an append to one of the partitions
// it asked for (or max_wait) and reads again.
func (s *Server) fetch(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	namePartitionsOnce(r)
	if resp, ok := s.cfg.PeerFetches.Answer(ctx, r, s.longPoll); ok {
		return resp // another node's marked fetch: the node-to-node protocol's
	}
	var answered []fetchRead // the reads of the answer longPoll returns
	resp := s.longPoll(ctx, r, func() (*kmsg.FetchResponse, bool) {
		resp, total, reads := s.fetchOnce(ctx, r)
		answered = reads
		// As Kafka, an error answers at once: the client has to act on it
		// (re-route, reset, retry), not wait for records.
		// min_bytes past the answer's cap would wait out max_wait: Kafka
		// caps it at fetch.max.bytes too.
		return resp, total >= min(int(r.MinBytes), s.fetchMaxBytes(r)) || failed(resp) || r.MaxWaitMillis <= 0
	})
	s.readAheadAfter(ctx, r, answered)
	return resp
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
		woken := s.partitions.Wait(shards)
		resp, done := read()
		if done || !time.Now().Before(deadline) {
			s.partitions.Cancel(shards, woken)
			return resp
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-woken:
			timer.Stop()
		case <-timer.C:
			s.partitions.Cancel(shards, woken)
			resp, _ := read()
			return resp
		case <-s.closing: // shutting down: answer what there is now
			timer.Stop()
			s.partitions.Cancel(shards, woken)
			return resp
		case <-ctx.Done(): // the client went away: nobody waits for the answer
			timer.Stop()
			s.partitions.Cancel(shards, woken)
			return resp
		}
	}
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

// fetchMaxBytes is the request's max_bytes, or Kafka's default, capped at
// kafka.fetch_max_bytes, as Kafka's fetch.max.bytes.
func (s *Server) fetchMaxBytes(r *kmsg.FetchRequest) int {
	if r.MaxBytes <= 0 {
		return min(50<<20, int(s.cfg.FetchMaxBytes))
	}
	return int(min(r.MaxBytes, s.cfg.FetchMaxBytes))
}

// namePartitionsOnce leaves each partition of a fetch named once, as
// Kafka's broker reads a fetch's partitions into a map: a partition named
// again replaces the earlier entry's offsets and limits where it was first
// named. A request naming one partition many times reads it once, not once
// for each name.
func namePartitionsOnce(r *kmsg.FetchRequest) {
	n := 0
	for _, t := range r.Topics {
		n += len(t.Partitions)
	}
	if n < 2 {
		return
	}
	type topicKey struct {
		name string
		id   [16]byte
	}
	type partKey struct{ topic, partition int32 }
	topicAt := make(map[topicKey]int, len(r.Topics))
	partAt := make(map[partKey]int, n)
	var topics []kmsg.FetchRequestTopic
	again := false
	for _, t := range r.Topics {
		ti, ok := topicAt[topicKey{t.Topic, t.TopicID}]
		if !ok {
			ti = len(topics)
			topicAt[topicKey{t.Topic, t.TopicID}] = ti
			nt := t
			nt.Partitions = make([]kmsg.FetchRequestTopicPartition, 0, len(t.Partitions))
			topics = append(topics, nt)
		}
		for _, p := range t.Partitions {
			key := partKey{int32(ti), p.Partition}
			if pi, ok := partAt[key]; ok {
				topics[ti].Partitions[pi] = p
				again = true
				continue
			}
			partAt[key] = len(topics[ti].Partitions)
			topics[ti].Partitions = append(topics[ti].Partitions, p)
		}
	}
	if again || len(topics) < len(r.Topics) {
		r.Topics = topics
	}
}

// minAnswerGrant is the least of the answer budget a fetch waits for when
// it is full; with more room a fetch takes what there is, up to its
// max_bytes, and reads no more.
const minAnswerGrant = 1 << 20

// holdAnswer takes up to maxBytes of the server's fetch answer budget for
// ctx's request, held until its answer is written (its scratch is
// released), and returns what the fetch may read. A long poll's next read
// gives back what the last one held first. Without a scratch (a request
// not from a connection) nothing is held.
func (s *Server) holdAnswer(ctx context.Context, maxBytes int) int {
	sc, ok := ctx.Value(scratchKey{}).(*scratch)
	if !ok {
		return maxBytes
	}
	sc.mu.Lock()
	sc.dropHold()
	sc.mu.Unlock()
	n, err := s.answers.takeUpTo(ctx.Done(), int64(maxBytes), minAnswerGrant)
	if err != nil {
		return 0
	}
	sc.mu.Lock()
	sc.held, sc.budget = n, s.answers
	sc.mu.Unlock()
	return int(n)
}

// keepAnswer sets ctx's hold of the answer budget to the answer's size:
// what it did not use goes back, a first batch over max_bytes is counted.
func (s *Server) keepAnswer(ctx context.Context, size int) {
	sc, ok := ctx.Value(scratchKey{}).(*scratch)
	if !ok {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch d := int64(size) - sc.held; {
	case sc.budget == nil:
	case d > 0:
		s.answers.force(d)
		sc.held += d
	case d < 0:
		s.answers.release(-d)
		sc.held += d
	}
}

// fetchRead is one partition of a fetch read from this node's log.
type fetchRead struct {
	rp        *kmsg.FetchResponseTopicPartition
	shard     string
	from      uint64
	limit     int    // the partition's byte limit
	low, high uint64 // the partition's log start and high watermark
	used      int    // the limit read with: what max_bytes left of limit
	next      uint64 // the offset after the last record answered; 0 when none
}

func (s *Server) fetchOnce(ctx context.Context, r *kmsg.FetchRequest) (*kmsg.FetchResponse, int, []fetchRead) {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	maxBytes := s.fetchMaxBytes(r)
	var reads []fetchRead
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
			*rp = peer.NoRecords(p.Partition)
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
			reads = append(reads, fetchRead{rp: rp, shard: shard, from: uint64(p.FetchOffset), limit: limit, low: low, high: high})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(reads)+len(remotes) > 0 {
		// Answers built and not yet written share one budget across
		// connections: N fetches hold at most it, not N times max_bytes.
		maxBytes = s.holdAnswer(ctx, maxBytes)
	}
	var wg sync.WaitGroup
	for _, rd := range remotes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.readRemote(ctx, rd)
		}()
	}
	ahead := readAheadOf(ctx).take(ctx, reads)
	s.readParts(ctx, reads, maxBytes, runtime.GOMAXPROCS(0), ahead, func(n int) []byte { return scratchBuf(ctx, n) })
	ahead.drop()
	wg.Wait()
	total := 0
	for i := range reads {
		rd := &reads[i]
		if n := len(rd.rp.RecordBatches); total > 0 && total+n > maxBytes {
			rd.rp.RecordBatches = []byte{} // over max_bytes: the client asks again from the same offset
			rd.next = 0
		} else {
			total += n
		}
	}
	for _, rd := range remotes {
		total += len(rd.rp.RecordBatches)
	}
	if len(reads)+len(remotes) > 0 {
		s.keepAnswer(ctx, total)
	}
	for _, b := range leaders {
		resp.Brokers = append(resp.Brokers, kmsg.FetchResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port})
	}
	return resp, total, reads
}

// readParts reads and frames reads into their response partitions, in
// parallel. Partitions are taken in request order from one budget of
// max_bytes: a partition is read only with what the ones before it left,
// so the memory of one fetch stays near max_bytes however many it names.
// A partition read ahead with the same offset and limit (ahead, may be
// nil) is taken from there instead of read again. alloc gives the buffer
// a partition's batches are framed into.
func (s *Server) readParts(ctx context.Context, reads []fetchRead, maxBytes, workers int, ahead *aheadSet, alloc func(int) []byte) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	returned := sync.NewCond(&mu)
	taken, left, reading := 0, maxBytes, 0
	for w := 0; w < min(len(reads), workers); w++ {
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
				rd := &reads[taken]
				taken++
				limit := min(rd.limit, left)
				left -= limit // held while reading; what is not used goes back
				reading++
				mu.Unlock()
				rd.used = limit
				if e, ok := ahead.take(aheadKey{rd.shard, rd.from, limit}, rd.low, rd.high); ok {
					rd.rp.RecordBatches, rd.next = e.batches, e.next
					adoptScratch(ctx, e.batches)
				} else {
					s.readPart(ctx, rd, limit, alloc)
				}
				mu.Lock()
				left += limit - len(rd.rp.RecordBatches)
				reading--
				returned.Broadcast()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// belowLogEnd reports whether a read refused above the high watermark is
// still at or below the log end.
func (s *Server) belowLogEnd(ctx context.Context, shard string, from uint64, oor *store.OutOfRangeError) bool {
	r, ok := s.store.(store.Replica)
	if !ok || from < oor.Low {
		return false
	}
	end, err := r.LogEnd(ctx, shard)
	return err == nil && from <= end
}

// readPart reads and frames one partition with limit bytes.
func (s *Server) readPart(ctx context.Context, rd *fetchRead, limit int, alloc func(int) []byte) {
	// A view, not a copy: the records are reframed straight from the
	// segment's mapping, then let go.
	recs, release, err := store.ReadView(ctx, s.store, rd.shard, rd.from, store.Budget{MaxBytes: limit})
	defer release()
	var epochs leaderepoch.History
	if err == nil && len(recs) > 0 {
		epochs, err = s.storedEpochs(ctx, rd.shard)
	}
	var oor *store.OutOfRangeError
	switch {
	case errors.As(err, &oor) && s.belowLogEnd(ctx, rd.shard, rd.from, oor):
		// Between the high watermark and the log end: nothing to serve yet,
		// and not out of range. Kafka checks a consumer's offset against the
		// log end: one that read up to an old leader's high watermark may
		// be ahead of a new leader's for a while, and must not be reset.
	case errors.As(err, &oor):
		rd.rp.ErrorCode = kerr.OffsetOutOfRange.Code
	case err != nil:
		if ctx.Err() == nil {
			s.log.Error("kafka: fetch", "shard", rd.shard, "offset", rd.from, "err", err)
		}
		rd.rp.ErrorCode = readCode(err)
	default:
		rd.rp.RecordBatches = encodeBatches(alloc(batchesSize(recs)), recs, epochs)
		if len(recs) > 0 {
			rd.next = recs[len(recs)-1].Offset + 1
		}
	}
}

// readCode is a failed read's answer. Bytes that do not hold what was
// written, locally or in the cold tier (a damaged segment, a cold object
// missing or damaged: integrity.IsCorruption), and a shard whose disk
// failed, answer KAFKA_STORAGE_ERROR, as Kafka answers for an offline log
// dir: the log's storage failed, not the server.
func readCode(err error) int16 {
	if errors.Is(err, store.ErrStorage) || integrity.IsCorruption(err) {
		return kerr.KafkaStorageError.Code
	}
	return kerr.UnknownServerError.Code
}
