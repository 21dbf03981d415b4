package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/bench"
	"strata/bench/load"
)

// benchCmd drives a running strata (or any Kafka) with franz-go: produce N
// records of a size across partitions, then consume them back, and report
// throughput and produce latency, like Kafka's own perf-test tools. It is
// the load `make bench` puts on strata and Apache Kafka (bench/load).
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
	if err := load.CreateTopic(ctx, *brokers, *topic, *partitions, nil); err != nil {
		return err
	}
	c, err := kgo.NewClient(load.ClientOpts(*brokers)...)
	if err != nil {
		return err
	}
	defer c.Close()
	progress := func(string) func(int) { return nil }
	if isTerminal(os.Stderr) {
		progress = func(what string) func(int) {
			return func(n int) { fmt.Fprintf(os.Stderr, "\r%s %d/%d", what, n, *records) }
		}
	}
	prod, err := load.Produce(ctx, c, *topic, *records, *size, 0, progress("produced"))
	if err != nil {
		return err
	}
	cons, err := load.Consume(ctx, *brokers, *topic, *records, progress("consumed"))
	if err != nil {
		return err
	}
	if isTerminal(os.Stderr) {
		fmt.Fprintln(os.Stderr)
	}
	fmt.Fprintf(out, "produce: %d records of %d bytes in %s: %.0f rec/s, %.1f MB/s, latency p50 %s p99 %s\n",
		prod.Records, *size, prod.Elapsed.Round(time.Millisecond), prod.RecordsPerSec(), prod.MBPerSec(),
		bench.Percentile(prod.Latencies, 50).Round(time.Microsecond), bench.Percentile(prod.Latencies, 99).Round(time.Microsecond))
	fmt.Fprintf(out, "consume: %d records from the start of %s in %s: %.0f rec/s, %.1f MB/s\n",
		cons.Records, *topic, cons.Elapsed.Round(time.Millisecond), cons.RecordsPerSec(), cons.MBPerSec())
	return nil
}
