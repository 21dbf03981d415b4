package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// benchCmd drives a running strata (or any Kafka) with franz-go: produce N
// records of a size across partitions, then consume them back, and report
// throughput and produce latency, like Kafka's own perf-test tools.
func benchCmd(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "Kafka address of the service")
	topic := fs.String("topic", "strata-bench", "topic to create (if missing) and use")
	partitions := fs.Int("partitions", 16, "partitions of the topic, when created")
	records := fs.Int("records", 100_000, "records to produce")
	size := fs.Int("size", 1024, "value bytes per record")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *records < 1 || *size < 0 || *partitions < 1 {
		return errors.New("bench: --records and --partitions must be positive, --size not negative")
	}
	ctx := context.Background()
	c, err := kgo.NewClient(kgo.SeedBrokers(*brokers), kgo.DefaultProduceTopic(*topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := kadm.NewClient(c).CreateTopic(ctx, int32(*partitions), 1, nil, *topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s at %s: %w", *topic, *brokers, err)
	}
	progress := func(string, int) {}
	if isTerminal(os.Stderr) {
		progress = func(what string, n int) { fmt.Fprintf(os.Stderr, "\r%s %d/%d", what, n, *records) }
	}
	value := make([]byte, *size)
	var mu sync.Mutex
	var lat []time.Duration
	var failed error
	start := time.Now()
	for i := 0; i < *records; i++ {
		sent := time.Now()
		c.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = err
			}
			lat = append(lat, time.Since(sent))
		})
		if i%10_000 == 0 {
			progress("produced", i)
		}
	}
	if err := c.Flush(ctx); err != nil {
		return err
	}
	if failed != nil {
		return fmt.Errorf("produce: %w", failed)
	}
	produced := time.Since(start)
	progress("produced", *records)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })

	cons, err := kgo.NewClient(kgo.SeedBrokers(*brokers), kgo.ConsumeTopics(*topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd().Relative(-int64(*records))))
	if err != nil {
		return err
	}
	defer cons.Close()
	start = time.Now()
	for n := 0; n < *records; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		n += fs.NumRecords()
		progress("consumed", n)
	}
	consumed := time.Since(start)
	if isTerminal(os.Stderr) {
		fmt.Fprintln(os.Stderr)
	}
	mb := float64(*records) * float64(*size) / 1e6
	fmt.Fprintf(out, "produce: %d records of %d bytes in %s: %.0f rec/s, %.1f MB/s, latency p50 %s p99 %s\n",
		*records, *size, produced.Round(time.Millisecond), float64(*records)/produced.Seconds(), mb/produced.Seconds(),
		lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))
	fmt.Fprintf(out, "consume: %d records in %s: %.0f rec/s, %.1f MB/s\n",
		*records, consumed.Round(time.Millisecond), float64(*records)/consumed.Seconds(), mb/consumed.Seconds())
	return nil
}
