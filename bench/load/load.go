// Package load drives any Kafka-protocol broker with franz-go the same way,
// so strata and its peers are measured with one load: `strata bench` and
// the peer benchmarks both use it.
package load

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ClientOpts are the producer settings every measured broker gets:
// acks=all, no compression (the broker, not the codec, is measured).
func ClientOpts(brokers string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(brokers), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.MaxBufferedRecords(50_000)}
}

// CreateTopic creates topic with partitions and the topic configs given, or
// leaves it be when it exists, and waits until every partition has a
// leader: a broker may answer CreateTopics before it can take writes, and
// that wait must not count as produce latency.
func CreateTopic(ctx context.Context, brokers, topic string, partitions int, configs map[string]*string) error {
	return CreateReplicatedTopic(ctx, brokers, topic, partitions, 1, configs)
}

// CreateReplicatedTopic is CreateTopic with a replication factor.
func CreateReplicatedTopic(ctx context.Context, brokers, topic string, partitions, rf int, configs map[string]*string) error {
	c, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return err
	}
	defer c.Close()
	adm := kadm.NewClient(c)
	resp, err := adm.CreateTopic(ctx, int32(partitions), int16(rf), configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s at %s: %w", topic, brokers, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil && ready(md.Topics[topic]) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s at %s: partitions without a leader after 30s (%v)", topic, brokers, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ready(t kadm.TopicDetail) bool {
	if t.Err != nil || len(t.Partitions) == 0 {
		return false
	}
	for _, p := range t.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// Result is what one produce or consume pass measured.
type Result struct {
	Records int
	Bytes   int64
	Elapsed time.Duration
	// Latencies are per record, from Produce to acknowledgement.
	Latencies []time.Duration
}

// RecordsPerSec is the pass's throughput.
func (r Result) RecordsPerSec() float64 { return float64(r.Records) / r.Elapsed.Seconds() }

// MBPerSec is the pass's value throughput, in 10^6 bytes per second.
func (r Result) MBPerSec() float64 { return float64(r.Bytes) / 1e6 / r.Elapsed.Seconds() }

// Produce sends n records of size value bytes to topic through c, as fast as
// the client's buffer allows when rate is 0, else at rate records per
// second (in bursts of 64, every 64/rate seconds). progress, if set, learns
// the count sent every 10,000 records.
func Produce(ctx context.Context, c *kgo.Client, topic string, n, size int, rate float64, progress func(int)) (Result, error) {
	value := make([]byte, size)
	for i := range value { // not all zeros, in case a link or disk compresses
		value[i] = byte(i*31 + i>>8)
	}
	return ProduceSpread(ctx, c, topic, 0, value, n, rate, progress)
}

// ProduceSpread is Produce of n records holding value; with partitions
// above 0 record i goes to partition i % partitions (c must use
// kgo.ManualPartitioner): a partitioner filling one batch at a time would
// leave most of very many partitions untouched.
func ProduceSpread(ctx context.Context, c *kgo.Client, topic string, partitions int, value []byte, n int, rate float64, progress func(int)) (Result, error) {
	res := Result{Records: n, Bytes: int64(n) * int64(len(value)), Latencies: make([]time.Duration, 0, n)}
	var mu sync.Mutex
	var failed error
	var tick *time.Ticker
	if rate > 0 {
		tick = time.NewTicker(time.Duration(float64(time.Second) * 64 / rate))
		defer tick.Stop()
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if tick != nil && i%64 == 0 {
			<-tick.C
		}
		r := &kgo.Record{Topic: topic, Value: value}
		if partitions > 0 {
			r.Partition = int32(i % partitions)
		}
		sent := time.Now()
		c.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && failed == nil {
				failed = err
			}
			res.Latencies = append(res.Latencies, time.Since(sent))
		})
		if progress != nil && i%10_000 == 0 {
			progress(i)
		}
	}
	if err := c.Flush(ctx); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	if failed != nil {
		return res, fmt.Errorf("produce to %s: %w", topic, failed)
	}
	return res, nil
}

// Consume reads n records of topic from the start of its log with a fresh
// client, the way a new consumer catches up.
func Consume(ctx context.Context, brokers, topic string, n int, progress func(int)) (Result, error) {
	c, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	res := Result{}
	start := time.Now()
	for res.Records < n {
		fs := c.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			return res, fmt.Errorf("consume %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) { res.Bytes += int64(len(r.Value)) })
		res.Records += fs.NumRecords()
		if progress != nil {
			progress(res.Records)
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}
