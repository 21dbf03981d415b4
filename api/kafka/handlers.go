package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/engine/store"
)

// errNone is Kafka's "no error"; every other code comes from kerr.
const errNone int16 = 0

// leaderEpoch is the only epoch a single node has had.
const leaderEpoch = 0

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
	15: {0, 5},  // DescribeGroups
	16: {0, 4},  // ListGroups
	18: {0, 3},  // ApiVersions
	19: {0, 7},  // CreateTopics
	20: {0, 5},  // DeleteTopics (by name)
	21: {0, 2},  // DeleteRecords
	22: {0, 4},  // InitProducerId
	23: {3, 4},  // OffsetForLeaderEpoch
	17: {0, 1},  // SaslHandshake (v0 is refused: its raw SASL frames are not spoken; librdkafka needs it listed)
	36: {0, 2},  // SaslAuthenticate
	50: {0, 0},  // DescribeUserScramCredentials
	51: {0, 0},  // AlterUserScramCredentials
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
type clientInfo struct{ id, host string }

func (s *Server) handle(req kmsg.Request, cl clientInfo) kmsg.Response {
	ctx := context.Background()
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
	case *kmsg.InitProducerIDRequest:
		resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
		s.mu.Lock()
		s.nextPID++
		resp.ProducerID, resp.ProducerEpoch = s.nextPID, 0
		s.mu.Unlock()
		return resp
	case *kmsg.ProduceRequest:
		return s.produce(ctx, r)
	case *kmsg.FindCoordinatorRequest:
		return s.findCoordinator(r)
	case *kmsg.JoinGroupRequest:
		return s.groups.join(r, cl.id, cl.host)
	case *kmsg.SyncGroupRequest:
		return s.groups.sync(r)
	case *kmsg.HeartbeatRequest:
		return s.groups.heartbeat(r)
	case *kmsg.LeaveGroupRequest:
		return s.groups.leave(r)
	case *kmsg.OffsetCommitRequest:
		return s.offsetCommit(r)
	case *kmsg.OffsetFetchRequest:
		return s.offsetFetch(r)
	case *kmsg.DescribeGroupsRequest:
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, name := range r.Groups {
			resp.Groups = append(resp.Groups, s.groups.describe(name))
		}
		return resp
	case *kmsg.ListGroupsRequest:
		resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
		for _, name := range s.groups.names() {
			d := s.groups.describe(name)
			resp.Groups = append(resp.Groups, kmsg.ListGroupsResponseGroup{Group: name, ProtocolType: d.ProtocolType, GroupState: d.State})
		}
		return resp
	case *kmsg.FetchRequest:
		return s.fetch(ctx, r)
	case *kmsg.ListOffsetsRequest:
		return s.listOffsets(ctx, r)
	case *kmsg.DeleteRecordsRequest:
		return s.deleteRecords(ctx, r)
	case *kmsg.OffsetForLeaderEpochRequest:
		return s.offsetForLeaderEpoch(ctx, r)
	}
	return req.ResponseKind()
}

// topics groups the store's shards by topic: topic -> partition count.
func (s *Server) topics(ctx context.Context) (map[string]int32, error) {
	shards, err := s.store.Shards(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, sh := range shards {
		topic := store.Topic(sh)
		p, err := strconv.Atoi(strings.TrimPrefix(sh, topic+"-"))
		if err != nil {
			continue
		}
		out[topic] = max(out[topic], int32(p)+1)
	}
	return out, nil
}

func (s *Server) createTopic(ctx context.Context, topic string, partitions int32) int16 {
	if err := store.ValidateTopic(topic); err != nil {
		return kerr.InvalidTopicException.Code
	}
	if partitions <= 0 {
		partitions = s.cfg.DefaultPartitions
	}
	if partitions > s.cfg.MaxPartitionsPerTopic {
		s.log.Warn("kafka: refusing a topic over kafka.max_partitions_per_topic", "topic", topic, "partitions", partitions, "max", s.cfg.MaxPartitionsPerTopic)
		return kerr.InvalidPartitions.Code
	}
	if shards, err := s.store.Shards(ctx); err == nil && len(shards)+int(partitions) > s.cfg.MaxPartitions {
		s.log.Warn("kafka: refusing a topic over kafka.max_partitions", "topic", topic, "partitions", partitions, "broker_partitions", len(shards), "max", s.cfg.MaxPartitions)
		return kerr.PolicyViolation.Code
	}
	for p := int32(0); p < partitions; p++ {
		err := s.store.CreateShard(ctx, store.ShardName(topic, p))
		if errors.Is(err, store.ErrShardExists) {
			if p == 0 {
				return kerr.TopicAlreadyExists.Code
			}
			continue
		}
		if err != nil {
			s.log.Error("kafka: create topic", "topic", topic, "err", err)
			return kerr.UnknownServerError.Code
		}
	}
	s.log.Info("topic created", "topic", topic, "partitions", partitions)
	return errNone
}

func (s *Server) metadata(ctx context.Context, r *kmsg.MetadataRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	s.openMu.Lock()
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 0, Host: s.host, Port: s.port}}
	s.openMu.Unlock()
	resp.ControllerID = 0
	cluster := "strata"
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
			if code := s.createTopic(ctx, name, 0); code == errNone || code == kerr.TopicAlreadyExists.Code {
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
			pm.Partition, pm.Leader, pm.LeaderEpoch = p, 0, -1
			pm.Replicas, pm.ISR = []int32{0}, []int32{0}
			t.Partitions = append(t.Partitions, pm)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

func (s *Server) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, t.NumPartitions, 1
		if r.ValidateOnly {
			if store.ValidateTopic(t.Topic) != nil {
				rt.ErrorCode = kerr.InvalidTopicException.Code
			}
		} else {
			rt.ErrorCode = s.createTopic(ctx, t.Topic, t.NumPartitions)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	topics, _ := s.topics(ctx)
	for _, name := range r.TopicNames {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		n := name
		rt.Topic = &n
		parts, ok := topics[name]
		if !ok {
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		}
		for p := int32(0); p < parts; p++ {
			if err := s.store.DeleteShard(ctx, store.ShardName(name, p)); err != nil && !errors.Is(err, store.ErrUnknownShard) {
				s.log.Error("kafka: delete topic", "topic", name, "partition", p, "err", err)
				rt.ErrorCode = kerr.UnknownServerError.Code
			}
			s.seqs.forget(store.ShardName(name, p))
		}
		if rt.ErrorCode == errNone {
			s.log.Info("topic deleted", "topic", name, "partitions", parts)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

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
		for j, p := range t.Partitions {
			rp := &rt.Partitions[j]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			in, code := s.decodePartition(ctx, t.Topic, p.Partition, p.Records, &left, &topics)
			if code != errNone || len(in.recs) == 0 {
				rp.ErrorCode = code
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				rp.ErrorCode, rp.BaseOffset = s.producePartition(ctx, in)
			}()
		}
	}
	wg.Wait()
	return resp
}

// maxConcurrentAppends bounds the partitions of one Produce appended at once.
const maxConcurrentAppends = 256

// produceInput is one partition's decoded part of a Produce request.
type produceInput struct {
	shard   string
	recs    []record.Record
	batches []kmsg.RecordBatch
}

// decodePartition checks one partition's batches against the topic's
// limits and decodes them.
func (s *Server) decodePartition(ctx context.Context, topic string, partition int32, raw []byte, left *int64, topics *map[string]int32) (produceInput, int16) {
	shard := store.ShardName(topic, partition)
	if err := store.ValidateTopic(topic); err != nil {
		return produceInput{}, kerr.InvalidTopicException.Code
	}
	if limit := s.maxMessageBytes(topic); len(raw) > int(limit) {
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
		s.createTopic(ctx, topic, 0)
		*topics, _ = s.topics(ctx)
	}
	if partition < 0 || partition >= (*topics)[topic] {
		return produceInput{}, kerr.UnknownTopicOrPartition.Code
	}
	return produceInput{shard: shard, recs: recs, batches: batches}, errNone
}

func (s *Server) maxMessageBytes(topic string) int32 {
	if v, ok := s.cfg.TopicMaxMessageBytes[topic]; ok && v > 0 {
		return v
	}
	return s.cfg.MaxMessageBytes
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
	// Idempotence: one batch per request per partition is what clients send.
	if len(in.batches) == 1 && in.batches[0].ProducerID >= 0 && in.batches[0].FirstSequence >= 0 {
		b := in.batches[0]
		key := seqKey{b.ProducerID, in.shard}
		unlock, err := s.seqs.lock(ctx, s.store, key)
		if err != nil {
			s.log.Error("kafka: reading producer state", "shard", in.shard, "err", err)
			return kerr.UnknownServerError.Code, -1
		}
		defer unlock()
		first, last := b.FirstSequence, seqAdd(b.FirstSequence, b.LastOffsetDelta)
		switch v, base := check(s.seqs.get(key), b.ProducerEpoch, first, last); v {
		case duplicateBatch:
			return errNone, base // a retry of a batch already stored
		case unknownDuplicate:
			return kerr.DuplicateSequenceNumber.Code, -1
		case outOfOrder:
			return kerr.OutOfOrderSequenceNumber.Code, -1
		case fencedEpoch:
			return kerr.InvalidProducerEpoch.Code, -1
		}
		code, base := s.appendRecords(ctx, in.shard, in.recs)
		if code == errNone {
			s.seqs.put(key, b.ProducerEpoch, first, last, base)
		}
		return code, base
	}
	return s.appendRecords(ctx, in.shard, in.recs)
}

func (s *Server) appendRecords(ctx context.Context, shard string, recs []record.Record) (int16, int64) {
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

// fetch answers at once when there are min_bytes to send or the client
// does not wait; otherwise it waits for an append to one of the partitions
// it asked for (or max_wait) and reads again.
func (s *Server) fetch(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
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
		resp, total := s.fetchOnce(ctx, r)
		if total >= int(r.MinBytes) || r.MaxWaitMillis <= 0 || !time.Now().Before(deadline) {
			s.appended.cancel(shards, woken)
			return resp
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-woken:
			timer.Stop()
		case <-timer.C:
			s.appended.cancel(shards, woken)
			resp, _ := s.fetchOnce(ctx, r)
			return resp
		case <-s.closing: // shutting down: answer what there is now
			timer.Stop()
			s.appended.cancel(shards, woken)
			return resp
		}
	}
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
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.FetchResponseTopicPartition, len(t.Partitions))
		for i, p := range t.Partitions {
			rp := &rt.Partitions[i]
			*rp = kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			rp.PreferredReadReplica = -1
			rp.RecordBatches = []byte{} // empty, not null: librdkafka refuses a null record set
			shard := store.ShardName(t.Topic, p.Partition)
			low, high, err := s.store.Watermarks(ctx, shard)
			if err != nil {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				continue
			}
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = int64(high), int64(high), int64(low)
			reads = append(reads, read{rp, shard, uint64(p.FetchOffset), max(1, min(int(p.PartitionMaxBytes), maxBytes))})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	// Partitions are taken in request order from one budget of max_bytes:
	// a partition is read only with what the ones before it left, so the
	// memory of one fetch stays near max_bytes however many it names.
	var wg sync.WaitGroup
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
				recs, err := s.store.Read(ctx, rd.shard, rd.from, store.Budget{MaxBytes: limit})
				var oor *store.OutOfRangeError
				switch {
				case errors.As(err, &oor):
					rd.rp.ErrorCode = kerr.OffsetOutOfRange.Code
				case err != nil:
					s.log.Error("kafka: fetch", "shard", rd.shard, "offset", rd.from, "err", err)
					rd.rp.ErrorCode = kerr.UnknownServerError.Code
				default:
					rd.rp.RecordBatches = encodeBatch(rd.rp.RecordBatches, recs)
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
	total := 0
	for _, rd := range reads {
		if n := len(rd.rp.RecordBatches); total > 0 && total+n > maxBytes {
			rd.rp.RecordBatches = []byte{} // over max_bytes: the client asks again from the same offset
		} else {
			total += n
		}
	}
	return resp, total
}

func (s *Server) listOffsets(ctx context.Context, r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.LeaderEpoch, rp.Timestamp = p.Partition, -1, -1
			shard := store.ShardName(t.Topic, p.Partition)
			low, high, err := s.store.Watermarks(ctx, shard)
			switch {
			case err != nil:
				rp.ErrorCode, rp.Offset = kerr.UnknownTopicOrPartition.Code, -1
			case p.Timestamp == -2: // earliest
				rp.Offset = int64(low)
			case p.Timestamp == -1: // latest
				rp.Offset = int64(high)
			case p.Timestamp == -3: // the record with the largest timestamp (KIP-734)
				rp.Offset = -1
				if ts, off, ok, err := s.maxTimestamp(ctx, shard); err != nil {
					rp.ErrorCode = kerr.UnknownServerError.Code
				} else if ok {
					rp.Offset, rp.Timestamp = off, ts
				}
			default:
				off, err := s.store.OffsetForTime(ctx, shard, p.Timestamp)
				if err != nil {
					rp.ErrorCode, rp.Offset = kerr.UnknownServerError.Code, -1
					break
				}
				rp.Offset = int64(off)
				if off < high {
					if recs, err := s.store.Read(ctx, shard, off, store.Budget{MaxRecords: 1}); err == nil && len(recs) == 1 {
						rp.Timestamp = recs[0].Timestamp
					}
				} else {
					rp.Offset = -1 // no record at or after the time
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// maxTimestamper is a store that knows a shard's largest timestamp.
type maxTimestamper interface {
	MaxTimestamp(ctx context.Context, shard string) (int64, bool, error)
}

// maxTimestamp finds the first record holding the shard's largest
// timestamp: the largest timestamp from the store, then the first offset
// at or after it.
func (s *Server) maxTimestamp(ctx context.Context, shard string) (ts, offset int64, ok bool, err error) {
	mt, can := s.store.(maxTimestamper)
	if !can {
		return 0, 0, false, errors.New("the store cannot find the largest timestamp")
	}
	max, ok, err := mt.MaxTimestamp(ctx, shard)
	if err != nil || !ok {
		return 0, 0, false, err
	}
	off, err := s.store.OffsetForTime(ctx, shard, max)
	if err != nil {
		return 0, 0, false, err
	}
	_, high, err := s.store.Watermarks(ctx, shard)
	if err != nil || off >= high {
		return 0, 0, false, err
	}
	return max, int64(off), true, nil
}

// deleteRecords advances low watermarks (Kafka's DeleteRecords); offset -1
// means the high watermark.
func (s *Server) deleteRecords(ctx context.Context, r *kmsg.DeleteRecordsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.LowWatermark = p.Partition, -1
			shard := store.ShardName(t.Topic, p.Partition)
			_, high, err := s.store.Watermarks(ctx, shard)
			if err != nil {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			off := uint64(p.Offset)
			if p.Offset == -1 {
				off = high
			}
			var oor *store.OutOfRangeError
			switch err := s.store.DeleteBefore(ctx, shard, off); {
			case errors.As(err, &oor), p.Offset < -1:
				rp.ErrorCode = kerr.OffsetOutOfRange.Code
			case err != nil:
				rp.ErrorCode = kerr.UnknownServerError.Code
			default:
				low, _, _ := s.store.Watermarks(ctx, shard)
				rp.LowWatermark = int64(low)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// offsetForLeaderEpoch answers for the one epoch a single node has had: a
// lower epoch is fenced, a higher one unknown, the current one ends at the
// high watermark (the follower's truncation point).
func (s *Server) offsetForLeaderEpoch(ctx context.Context, r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.LeaderEpoch, rp.EndOffset = p.Partition, -1, -1
			_, high, err := s.store.Watermarks(ctx, store.ShardName(t.Topic, p.Partition))
			switch {
			case err != nil:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case p.CurrentLeaderEpoch > leaderEpoch:
				rp.ErrorCode = kerr.UnknownLeaderEpoch.Code
			case p.CurrentLeaderEpoch >= 0 && p.CurrentLeaderEpoch < leaderEpoch:
				rp.ErrorCode = kerr.FencedLeaderEpoch.Code
			case p.LeaderEpoch > leaderEpoch:
				rp.ErrorCode = kerr.UnknownLeaderEpoch.Code
			default:
				rp.LeaderEpoch, rp.EndOffset = leaderEpoch, int64(high)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
