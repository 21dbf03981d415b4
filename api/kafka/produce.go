package kafka

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/engine/store"
	"strata/replica"
	"strata/topicconfig"
)

// produce decodes every partition's batches against one inflate budget for
// the request, then appends the partitions concurrently, so a request for
// many partitions shares the engine's fsyncs instead of waiting for each
// partition's in turn.
func (s *Server) produce(ctx context.Context, r *kmsg.ProduceRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	left := int64(s.cfg.MaxInflatedBytes)
	topics, _ := s.topics(ctx)
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxConcurrentAppends)
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(r.Topics))
	for i, t := range r.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		// Once a topic, not a partition: resolving a topic's configs took
		// 3% of the server's CPU producing to 10,000 partitions.
		conf := sync.OnceValue(func() topicconfig.Resolved { return s.topicConfig(t.Topic) })
		for j, p := range t.Partitions {
			rp := &rt.Partitions[j]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			in, code := s.decodePartition(ctx, t.Topic, p.Partition, p.Records, &left, &topics, conf)
			if code != errNone || len(in.recs) == 0 {
				rp.ErrorCode = code
				continue
			}
			in.acks, in.timeout = r.Acks, time.Duration(r.TimeoutMillis)*time.Millisecond
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				rp.ErrorCode, rp.BaseOffset = s.producePartition(ctx, in)
				if rp.ErrorCode == errNone {
					rp.LogAppendTime = in.logAppendTime
				}
			}()
		}
	}
	wg.Wait()
	s.hintProduceLeaders(resp)
	return resp
}

// hintProduceLeaders adds the leaders of the partitions refused with
// NOT_LEADER_OR_FOLLOWER (KIP-951).
func (s *Server) hintProduceLeaders(resp *kmsg.ProduceResponse) {
	seen := map[int32]bool{}
	for i := range resp.Topics {
		rt := &resp.Topics[i]
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			if rp.ErrorCode != kerr.NotLeaderForPartition.Code {
				continue
			}
			if info, b, ok := s.leader(rt.Topic, rp.Partition); ok {
				rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = info.Leader, info.LeaderEpoch
				if !seen[b.NodeID] {
					seen[b.NodeID] = true
					resp.Brokers = append(resp.Brokers, kmsg.ProduceResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port})
				}
			}
		}
	}
}

// maxConcurrentAppends bounds the partitions of one Produce appended at once.
const maxConcurrentAppends = 256

// produceInput is one partition's decoded part of a Produce request.
type produceInput struct {
	topic     string
	partition int32
	shard     string
	recs      []record.Record
	batches   []kmsg.RecordBatch
	// acks and timeout are the request's: acks=all (-1) on a replicated
	// partition waits for its replicas.
	acks    int16
	timeout time.Duration
	// replicated: replication recorded the leader epoch (replica.Node).
	replicated bool
	// logAppendTime is the broker's time stamped on every record when the
	// topic's message.timestamp.type is LogAppendTime (else -1).
	logAppendTime int64
}

// decodePartition checks one partition's batches against the topic's
// limits and decodes them.
func (s *Server) decodePartition(ctx context.Context, topic string, partition int32, raw []byte, left *int64, topics *map[string]int32,
	conf func() topicconfig.Resolved) (produceInput, int16) {
	shard := store.ShardName(topic, partition)
	if err := store.ValidateTopic(topic); err != nil {
		return produceInput{}, kerr.InvalidTopicException.Code
	}
	if limit := conf().MaxMessageBytes; len(raw) > int(limit) {
		if batchesOver(raw, limit) {
			s.refusal("kafka: refusing a produce: a record batch is over max.message.bytes", "shard", shard, "bytes", len(raw), "max_message_bytes", limit)
			return produceInput{}, kerr.MessageTooLarge.Code
		}
	}
	recs, batches, err := decodeBatches(raw, left)
	if err != nil {
		s.refusal("kafka: refusing a produce", "shard", shard, "err", err)
		if errors.Is(err, errTooLarge) {
			return produceInput{}, kerr.MessageTooLarge.Code
		}
		return produceInput{}, kerr.CorruptMessage.Code
	}
	for i := range recs {
		if record.Size(&recs[i]) > record.MaxSize {
			s.refusal("kafka: refusing a produce: a record is over the engine's limit", "shard", shard, "bytes", record.Size(&recs[i]), "max", record.MaxSize)
			return produceInput{}, kerr.MessageTooLarge.Code
		}
	}
	if len(recs) == 0 {
		return produceInput{}, errNone
	}
	if _, ok := (*topics)[topic]; !ok && s.cfg.AutoCreateTopics {
		s.createTopic(ctx, topic, 0, -1, nil)
		*topics, _ = s.topics(ctx)
	}
	if partition < 0 || partition >= (*topics)[topic] {
		return produceInput{}, kerr.UnknownTopicOrPartition.Code
	}
	if code := s.leads(topic, partition); code != errNone {
		return produceInput{}, code
	}
	in := produceInput{topic: topic, partition: partition, shard: shard, recs: recs, batches: batches, logAppendTime: -1}
	if conf().LogAppendTime {
		in.logAppendTime = time.Now().UnixMilli()
		for i := range in.recs {
			in.recs[i].Timestamp = in.logAppendTime
		}
	}
	return in, errNone
}

// batchesOver reports whether any record batch in raw is longer than limit
// (Kafka checks max.message.bytes per batch, as sent: compressed).
func batchesOver(raw []byte, limit int32) bool {
	for len(raw) >= 12 {
		n := int64(int32(binary.BigEndian.Uint32(raw[8:]))) + 12
		if n > int64(limit) {
			return true
		}
		if n < 12 || n > int64(len(raw)) {
			return false // malformed: decoding says so
		}
		raw = raw[n:]
	}
	return false
}

func (s *Server) producePartition(ctx context.Context, in produceInput) (int16, int64) {
	// Whether a partition is replicated is the metadata's to say, not
	// whether replication has set it up yet: until it has, its appends are
	// refused, never taken unreplicated.
	info, _ := s.cluster.Partition(in.topic, in.partition)
	repl := s.cfg.Replication
	if len(info.Replicas) <= 1 {
		code, base, _ := s.appendPartition(ctx, in)
		return code, base
	}
	if repl == nil {
		return kerr.NotLeaderForPartition.Code, -1
	}
	// Only while this node leads it at an epoch it has recorded, and with
	// acks=all only while the ISR holds min.insync.replicas; no change of
	// leadership takes effect until the append is done.
	release, epoch, res := repl.BeginAppend(in.shard, in.acks == -1)
	if res != replica.OK {
		return res.KafkaCode(), -1
	}
	in.replicated = true
	code, base, end := s.appendPartition(ctx, in)
	if code == errNone {
		repl.Appended(in.shard, end)
	}
	release()
	if code != errNone || in.acks != -1 {
		return code, base
	}
	if res := repl.AwaitAck(ctx, in.shard, epoch, base, end, in.timeout); res != replica.OK {
		return res.KafkaCode(), -1
	}
	return code, base
}

// appendPartition appends one partition's batch, or answers a retry of one
// already stored with its offsets; end is the offset after its last record.
func (s *Server) appendPartition(ctx context.Context, in produceInput) (code int16, base, end int64) {
	if g, ok := s.cluster.(AppendGuard); ok {
		release, leads := g.GuardAppend(in.topic, in.partition)
		if !leads {
			// Handed over (or its lease lost) since the request was checked.
			return cmp.Or(s.leads(in.topic, in.partition), kerr.NotLeaderForPartition.Code), -1, -1
		}
		defer release()
	}
	// Idempotence: one batch per request per partition is what clients send.
	if len(in.batches) == 1 && in.batches[0].ProducerID >= 0 && in.batches[0].FirstSequence >= 0 {
		b := in.batches[0]
		key := seqKey{b.ProducerID, in.shard}
		unlock, err := s.seqs.lock(ctx, s.store, key)
		if errors.Is(err, store.ErrUnknownShard) {
			// Placed here a moment ago, its shard not made yet: the client
			// retries, as it does an append to a missing shard.
			return kerr.UnknownTopicOrPartition.Code, -1, -1
		}
		if err != nil {
			s.log.Error("kafka: reading producer state", "shard", in.shard, "err", err)
			return kerr.UnknownServerError.Code, -1, -1
		}
		defer unlock()
		first, last := b.FirstSequence, seqAdd(b.FirstSequence, b.LastOffsetDelta)
		st := s.seqs.get(key)
		switch v, base := check(st, b.ProducerEpoch, first, last); v {
		case duplicateBatch:
			return errNone, base, base + int64(len(in.recs)) // a retry of a batch already stored
		case unknownDuplicate:
			return kerr.DuplicateSequenceNumber.Code, -1, -1
		case outOfOrder:
			return kerr.OutOfOrderSequenceNumber.Code, -1, -1
		case fencedEpoch:
			return kerr.InvalidProducerEpoch.Code, -1, -1
		case completeBatch:
			// The log was cut inside this batch (a crash mid-append): its
			// first part is stored, so only the rest is, and the client
			// gets the batch's first offset, never a second copy.
			stored := st.lastSeq
			if seqDist(first, stored)+1 >= int64(len(in.recs)) {
				return kerr.OutOfOrderSequenceNumber.Code, -1, -1 // its sequences do not match its records
			}
			rest := in.recs[seqDist(first, stored)+1:]
			code, at := s.appendRecords(context.WithoutCancel(ctx), in.shard, rest, in.replicated)
			if code != errNone {
				return code, -1, -1
			}
			s.seqs.complete(key, last, at, maxTimestamp(rest))
			s.log.Info("kafka: completed a batch whose first part the log held", "shard", in.shard, "producer", b.ProducerID,
				"first_sequence", first, "stored_up_to", stored, "base_offset", base, "rest_at", at)
			return errNone, base, at + int64(len(rest))
		}
		// Once queued, an append completes whether or not its client
		// waits: it must be recorded, or the client's retry on a new
		// connection would be appended again.
		code, base := s.appendRecords(context.WithoutCancel(ctx), in.shard, in.recs, in.replicated)
		if code == errNone {
			s.seqs.put(key, b.ProducerEpoch, first, last, base, maxTimestamp(in.recs))
		}
		return code, base, base + int64(len(in.recs))
	}
	code, base = s.appendRecords(ctx, in.shard, in.recs, in.replicated)
	return code, base, base + int64(len(in.recs))
}

// appendRecords appends to shard; a partition that replication does not
// run records its leader epoch first (one that it runs has it already).
func (s *Server) appendRecords(ctx context.Context, shard string, recs []record.Record, replicated bool) (int16, int64) {
	if !replicated {
		if code := s.assignEpoch(ctx, shard); code != errNone {
			return code, -1
		}
	}
	base, err := s.store.Append(ctx, shard, recs)
	if err != nil {
		s.log.Error("kafka: append", "shard", shard, "err", err)
		if errors.Is(err, store.ErrUnknownShard) {
			return kerr.UnknownTopicOrPartition.Code, -1
		}
		return kerr.UnknownServerError.Code, -1
	}
	s.appended.wake(shard)
	return errNone, int64(base)
}

func maxTimestamp(recs []record.Record) int64 {
	ts := int64(-1)
	for _, r := range recs {
		ts = max(ts, r.Timestamp)
	}
	return ts
}
