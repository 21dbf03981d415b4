package kafka

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strata/engine/integrity"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/engine/store"
	"strata/partition"
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
			if conf().ValueSchemaValidation {
				if bad, why := s.unregisteredValue(in); why != "" {
					rp.ErrorCode, rp.ErrorMessage = kerr.InvalidRecord.Code, &why
					rp.ErrorRecords = []kmsg.ProduceResponseTopicPartitionErrorRecord{{RelativeOffset: int32(bad), ErrorMessage: &why}}
					continue
				}
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
	recs      []record.Record
	batches   []kmsg.RecordBatch
	// acks and timeout are the request's: acks=all (-1) on a replicated
	// partition waits for its replicas.
	acks    int16
	timeout time.Duration
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
	if err == nil && len(batches) == 0 {
		err = fmt.Errorf("%w: no record batch", errInvalidRecord) // as Kafka: exactly one
	}
	if err != nil {
		s.refusal("kafka: refusing a produce", "shard", shard, "err", err)
		switch {
		case errors.Is(err, errTooLarge):
			return produceInput{}, kerr.MessageTooLarge.Code
		case errors.Is(err, errInvalidRecord):
			return produceInput{}, kerr.InvalidRecord.Code
		case errors.Is(err, errTransactional):
			return produceInput{}, kerr.InvalidTxnState.Code
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
	in := produceInput{topic: topic, partition: partition, recs: recs, batches: batches, logAppendTime: -1}
	if conf().LogAppendTime {
		in.logAppendTime = time.Now().UnixMilli()
		for i := range in.recs {
			in.recs[i].Timestamp = in.logAppendTime
		}
	}
	return in, errNone
}

// unregisteredValue is strata.value.schema.validation: the first record
// whose value does not carry the wire header of a schema registered under
// the subject {topic}-value, and why (none: "").
func (s *Server) unregisteredValue(in produceInput) (int, string) {
	subject := in.topic + "-value"
	for i := range in.recs {
		var err error
		if s.cfg.Schemas == nil {
			err = errors.New("this broker serves no schema registry (schema_registry.addr) to check it against")
		} else {
			err = s.cfg.Schemas.CheckWireHeader(subject, in.recs[i].Value)
		}
		if err != nil {
			why := fmt.Sprintf("record %d: %v (strata.value.schema.validation is on for topic %s)", i, err, in.topic)
			s.refusal("kafka: refusing a produce: a value without a registered schema", "shard", store.ShardName(in.topic, in.partition), "why", why)
			return i, why
		}
	}
	return 0, ""
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

// producePartition appends one partition's batch through the append path
// and answers with its code and first offset.
func (s *Server) producePartition(ctx context.Context, in produceInput) (int16, int64) {
	b := partition.Batch{Records: in.recs}
	// Idempotence: decoding refused more than one batch.
	if in.batches[0].ProducerID >= 0 && in.batches[0].FirstSequence >= 0 {
		rb := in.batches[0]
		b.Producer = &partition.ProducerBatch{ID: rb.ProducerID, Epoch: rb.ProducerEpoch, FirstSequence: rb.FirstSequence, LastOffsetDelta: rb.LastOffsetDelta}
	}
	acks := partition.AckLeader
	if in.acks == -1 {
		acks = partition.AckAll
	}
	base, err := s.partitions.Append(ctx, partition.ID{Topic: in.topic, Partition: in.partition}, b, acks, in.timeout)
	if err != nil {
		return s.appendCode(in.topic, in.partition, err), -1
	}
	return errNone, base
}

// appendCode is the Produce error code for an append's error.
func (s *Server) appendCode(topic string, p int32, err error) int16 {
	switch {
	case errors.Is(err, partition.ErrFenced):
		// The metadata says who leads instead, or that none does.
		return cmp.Or(s.leads(topic, p), kerr.NotLeaderForPartition.Code)
	case errors.Is(err, partition.ErrNotLeader):
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, partition.ErrNotEnoughReplicas):
		return kerr.NotEnoughReplicas.Code
	case errors.Is(err, partition.ErrNotEnoughReplicasAfterAppend):
		return kerr.NotEnoughReplicasAfterAppend.Code
	case errors.Is(err, partition.ErrTimedOut):
		return kerr.RequestTimedOut.Code
	case errors.Is(err, partition.ErrDuplicateSequence):
		return kerr.DuplicateSequenceNumber.Code
	case errors.Is(err, partition.ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, partition.ErrProducerFenced):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, store.ErrUnknownShard):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, store.ErrStorage), integrity.IsCorruption(err):
		// A failed fsync or damage on disk: the partition refuses writes
		// until it is repaired or refilled, as Kafka's offline log dir does.
		return kerr.KafkaStorageError.Code
	}
	return kerr.UnknownServerError.Code
}
