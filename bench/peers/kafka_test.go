package peers

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/bench"
	"strata/bench/load"
	"strata/internal/testsvc"
)

var strataBin string

func TestMain(m *testing.M) { os.Exit(testsvc.RunWithStrata(m, &strataBin)) }

func report(b *testing.B, f bench.Figure) {
	bench.Must(b, "make bench (go test -bench Peer ./bench/peers)", f)
}

const (
	partitions = 16
	recordSize = 1024
	records    = 100_000 // per produce pass: 100 MB of values
	warmup     = 20_000
	runs       = 3
	latencyN   = 20_000
)

// broker is one side of a comparison: where it listens and the topic
// configs that set its durability.
type broker struct {
	name    string
	addr    string
	configs map[string]*string
}

type sample struct{ produce, consume, p99, p50 []float64 }

// BenchmarkPeerKafka runs the same franz-go load (1 KiB records, 16
// partitions, acks=all, no compression, one producer) against strata and
// Apache Kafka, alternating runs, twice:
//
//   - durable: strata's default (fsync before the acknowledgement) against
//     Kafka with flush.messages=1 (fsync after every append);
//   - page cache: strata with engine.fsync=none against Kafka's default
//     (acknowledge from the page cache, flush in the background).
//
// Each side gets one untimed warm-up pass (the JVM compiles, strata's files
// open); then median of 3 runs of: produce 100,000 records as fast as the
// client goes, consume them from the start with a new client. Latency is
// measured after, at one fixed rate for both (half the slower side's
// produce rate): p99 of 20,000 records, median of 3 runs. Last, strata's
// durable produce rate is set beside Kafka's page-cache one, from the same
// runs.
func BenchmarkPeerKafka(b *testing.B) {
	kafkaAddr := testsvc.StartKafka(b)
	one := "1"
	// Each setup's produce runs, kept for the figure across setups below.
	produced := map[string]map[string][]float64{}
	for _, setup := range []struct {
		name         string
		strataFsync  string
		kafkaConfigs map[string]*string
	}{
		{"durable: strata fsync=batch, Kafka flush.messages=1", "batch", map[string]*string{"flush.messages": &one}},
		{"page cache: strata fsync=none, Kafka defaults", "none", nil},
	} {
		srv := testsvc.ServeStrata(b, strataBin, "engine.fsync="+setup.strataFsync, "tiering.enabled=false")
		sides := []broker{{"strata", srv.Kafka, nil}, {"kafka", kafkaAddr, setup.kafkaConfigs}}
		got := map[string]*sample{}
		for _, s := range sides {
			got[s.name] = &sample{}
			pass(b, s, "warmup-"+setup.strataFsync, warmup, 0)
		}
		for run := 0; run < runs; run++ {
			for _, s := range sides {
				topic := fmt.Sprintf("peer-%s-%d", setup.strataFsync, run)
				prod := pass(b, s, topic, records, 0)
				cons, err := load.Consume(context.Background(), s.addr, topic, records, nil)
				if err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				got[s.name].produce = append(got[s.name].produce, prod.RecordsPerSec())
				got[s.name].consume = append(got[s.name].consume, cons.RecordsPerSec())
				fmt.Fprintf(os.Stderr, "peers: %s run %d/%d %s: produce %.0f rec/s, consume %.0f rec/s\n",
					setup.name, run+1, runs, s.name, prod.RecordsPerSec(), cons.RecordsPerSec())
			}
		}
		rate := min(bench.Median(got["strata"].produce), bench.Median(got["kafka"].produce)) / 2
		for run := 0; run < runs; run++ {
			for _, s := range sides {
				lat := pass(b, s, fmt.Sprintf("peer-%s-%d", setup.strataFsync, run), latencyN, rate).Latencies
				got[s.name].p99 = append(got[s.name].p99, bench.Ms(bench.Percentile(lat, 99)))
				got[s.name].p50 = append(got[s.name].p50, bench.Ms(bench.Percentile(lat, 50)))
			}
		}
		st, kf := got["strata"], got["kafka"]
		produced[setup.strataFsync] = map[string][]float64{"strata": st.produce, "kafka": kf.produce}
		target := ">= 1.00"
		report(b, bench.Figure{Name: "produce 1KiB x16, acks=all; " + setup.name, Value: bench.Median(st.produce), Unit: "rec/s",
			Reference: "Apache Kafka 4.4, same load", ReferenceValue: bench.Median(kf.produce), Target: target, Runs: runs})
		report(b, bench.Figure{Name: fmt.Sprintf("produce p99 at %.0f rec/s; %s", rate, setup.name), Value: bench.Median(st.p99), Unit: "ms",
			Reference: "Apache Kafka 4.4, same load", ReferenceValue: bench.Median(kf.p99), Target: "<= 1.00", Runs: runs})
		report(b, bench.Figure{Name: fmt.Sprintf("produce p50 at %.0f rec/s; %s", rate, setup.name), Value: bench.Median(st.p50), Unit: "ms",
			Reference: "Apache Kafka 4.4, same load", ReferenceValue: bench.Median(kf.p50), Runs: runs})
		consumeTarget := ">= 1.00"
		if setup.strataFsync == "none" {
			consumeTarget = ">= 1.20" // issue #15's floor
		}
		report(b, bench.Figure{Name: "consume from the start; " + setup.name, Value: bench.Median(st.consume), Unit: "rec/s",
			Reference: "Apache Kafka 4.4, same load", ReferenceValue: bench.Median(kf.consume), Target: consumeTarget, Runs: runs})
	}
	// What a user trading durability for speed compares: strata never
	// acknowledging before an fsync beside Kafka acknowledging from its page
	// cache. Both are the runs above (the durable setup's strata side, the
	// page-cache setup's Kafka side), so no pass is added.
	report(b, bench.Figure{Name: "produce 1KiB x16, acks=all; strata fsync=batch beside Kafka's page cache",
		Value: bench.Median(produced["batch"]["strata"]), Unit: "rec/s",
		Reference: "Apache Kafka 4.4, defaults (page cache)", ReferenceValue: bench.Median(produced["none"]["kafka"]),
		Target: ">= 1.00", Runs: runs})
}

// pass creates topic on s (when new) and produces n records to it (at rate, or as fast
// as the client goes when rate is 0).
func pass(b *testing.B, s broker, topic string, n int, rate float64) load.Result {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := load.CreateTopic(ctx, s.addr, topic, partitions, s.configs); err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	c, err := kgo.NewClient(load.ClientOpts(s.addr)...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	res, err := load.Produce(ctx, c, topic, n, recordSize, rate, nil)
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	return res
}
