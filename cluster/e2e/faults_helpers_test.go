package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/internal/testsvc"
)

// newClusterOn starts n nodes on the etcd at endpoint (the test's own).
func newClusterOn(t *testing.T, endpoint string, n int) *cluster {
	c := &cluster{t: t, etcd: endpoint, pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{}}
	for id := int32(1); id <= int32(n); id++ {
		c.add(id)
	}
	return c
}

// startLoad produces to parts of topic from one idempotent acks=all
// producer per node in via, about rate records a second each, recording
// every outcome in h, until the returned stop is called; stop waits for
// every buffered record's outcome (or gives up after a while, which counts
// them as failed).
func (c *cluster) startLoad(h *history, topic string, parts []int32, rate int, via ...int32) (stop func()) {
	c.t.Helper()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for _, id := range via {
		// franz-go's producer is idempotent by default, with acks=all.
		opts := []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.MaxBufferedRecords(50000)}
		// STRATA_TEST_LOGS keeps the producers' own logs too, beside the
		// nodes' (internal/testsvc).
		if dir := os.Getenv("STRATA_TEST_LOGS"); dir != "" {
			name := fmt.Sprintf("%s-producer-%s-via%d.log", strings.ReplaceAll(c.t.Name(), "/", "_"), topic, id)
			if f, err := os.Create(filepath.Join(dir, name)); err == nil {
				c.t.Cleanup(func() { f.Close() })
				opts = append(opts, kgo.WithLogger(kgo.BasicLogger(f, kgo.LogLevelInfo, nil)))
			}
		}
		cl := c.client(id, opts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-quit:
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					if err := cl.Flush(ctx); err != nil {
						c.t.Errorf("producer through node %d: buffered records still unacknowledged 30s after the load stopped: %v", id, err)
					}
					cl.Close() // fails what is left, which the history counts as maybe stored
					return
				case <-tick.C:
				}
				v := fmt.Sprintf("%s-via%d-%06d", topic, id, i)
				cl.Produce(context.Background(), &kgo.Record{Topic: topic, Partition: parts[i%len(parts)], Value: []byte(v)}, h.produced)
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(quit); wg.Wait() }) }
}

// clusterAnswer is GET /v1/cluster as a user reads it.
type clusterAnswer struct {
	Cluster    bool  `json:"cluster"`
	Self       int32 `json:"self"`
	Live       bool  `json:"live"`
	Controller int32 `json:"controller"`
	Nodes      []struct {
		ID    int32 `json:"id"`
		Alive bool  `json:"alive"`
	} `json:"nodes"`
	Partitions []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Leader    int32  `json:"leader"`
		Epoch     int32  `json:"epoch"`
		Spans     []struct {
			Start int64 `json:"start"`
			Node  int32 `json:"node"`
		} `json:"spans"`
		Segments []struct {
			No       uint64 `json:"no"`
			State    string `json:"state"`
			Start    uint64 `json:"start_offset"`
			End      uint64 `json:"end_offset"`
			Checksum uint32 `json:"checksum"`
		} `json:"segments_here"`
	} `json:"partitions"`
}

func (c *cluster) adminView(id int32) (clusterAnswer, error) {
	var a clusterAnswer
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + c.nodes[id].Admin + "/v1/cluster")
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return a, fmt.Errorf("GET /v1/cluster: %s", resp.Status)
	}
	return a, json.NewDecoder(resp.Body).Decode(&a)
}

// waitHealthy waits until every node says it is live and its Metadata
// lists every node and a leader for each of topic's partitions.
func (c *cluster) waitHealthy(topic string) {
	c.t.Helper()
	for id := range c.nodes {
		c.leaders(id, topic, func(brokers int, l []int32) bool { return brokers == len(c.nodes) && allLed(brokers, l) })
		deadline := time.Now().Add(20 * time.Second)
		for {
			a, err := c.adminView(id)
			if err == nil && a.Live {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d does not say it is live: %+v, %v", id, a, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// metric is the value of one sample in node id's /metrics (name with its
// labels as Prometheus prints them), 0 when absent.
func (c *cluster) metric(id int32, sample string) float64 {
	c.t.Helper()
	resp, err := http.Get("http://" + c.nodes[id].Admin + "/metrics")
	if err != nil {
		c.t.Fatalf("node %d /metrics: %v", id, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if name, val, ok := strings.Cut(sc.Text(), " "); ok && name == sample {
			f, _ := strconv.ParseFloat(val, 64)
			return f
		}
	}
	return 0
}

// epochs asks node `from` for topic's leaders and leader epochs.
func (c *cluster) epochs(from int32, topic string) (leaders, epochs map[int32]int32) {
	c.t.Helper()
	md, err := c.metadata(c.client(from), topic)
	if err != nil || len(md.Topics) != 1 {
		c.t.Fatalf("metadata of %s from node %d: %v", topic, from, err)
	}
	leaders, epochs = map[int32]int32{}, map[int32]int32{}
	for _, p := range md.Topics[0].Partitions {
		leaders[p.Partition], epochs[p.Partition] = p.Leader, p.LeaderEpoch
	}
	return leaders, epochs
}
