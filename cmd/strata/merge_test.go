package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tiering"
)

// A quiet topic's small cold objects merge at the tiering run, as the
// topic's strata.cold.target_bytes asks: the run's summary and the
// metrics say so, fewer objects are left in the manifest, and a consumer
// reading from offset 0 gets every record, at its offset, as produced. A
// topic with strata.cold.target_bytes=0 keeps its objects.
func TestSmallColdObjectsMerge(t *testing.T) {
	s := startServe(t, "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "tiering.schedule=@every 1h",
		"tiering.min_sealed_age=0s", "tiering.local_retention=0s", "tiering.merge_min_age=0s", "tiering.merge_min_objects=2")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	target, off := "1048576", "0"
	for topic, v := range map[string]*string{"quiet": &target, "kept": &off} {
		if resp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"strata.cold.target_bytes": v}, topic); err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, resp.Err)
		}
	}
	produced := map[string][]string{}
	for _, topic := range []string{"quiet", "kept"} {
		for b := range 8 { // batches of 50, so segments roll between them
			var recs []*kgo.Record
			for i := range 50 {
				v := fmt.Sprintf("%s %d %s", topic, b*50+i, strings.Repeat("x", i))
				recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i % 7)), Value: []byte(v)})
				produced[topic] = append(produced[topic], v)
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cold := strings.TrimPrefix(s.sets[1], "cold.local.dir=")
	var merges []tiering.MergeProgress
	for run := range 2 {
		resp, err := http.Post("http://"+s.Admin+"/v1/tiering/run", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		var sum tiering.RunSummary
		err = json.NewDecoder(resp.Body).Decode(&sum)
		resp.Body.Close()
		if err != nil || len(sum.Errors) > 0 {
			t.Fatalf("tiering run %d: %v %+v", run, err, sum.Errors)
		}
		merges = append(merges, sum.Merges...)
	}
	if len(merges) == 0 {
		t.Fatalf("no merge in two tiering runs")
	}
	for _, m := range merges {
		if !strings.HasPrefix(m.Shard, "quiet-") || len(m.Objects) < 2 {
			t.Errorf("merge %+v: want only quiet's objects merged, several at a time", m)
		}
	}
	for topic, want := range map[string]func(n int) bool{"quiet": func(n int) bool { return n == 1 }, "kept": func(n int) bool { return n >= 3 }} {
		raw, err := os.ReadFile(filepath.Join(cold, "topic="+topic, "partition=0", "_strata_manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m tiering.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		if !want(len(m.Objects)) {
			t.Errorf("%s's manifest lists %d objects after merging", topic, len(m.Objects))
		}
	}
	metrics := scrapeMetrics(t, s.Admin)
	for name, min := range map[string]float64{"strata_tiering_merges_total": 1, "strata_tiering_merged_objects_total": 2, "strata_cold_objects": 4} {
		if metrics[name] < min {
			t.Errorf("%s is %v; want at least %v", name, metrics[name], min)
		}
	}
	for _, topic := range []string{"quiet", "kept"} {
		c, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		var got []*kgo.Record
		for len(got) < len(produced[topic]) && ctx.Err() == nil {
			fs := c.PollFetches(ctx)
			for _, e := range fs.Errors() {
				t.Logf("fetch %s: %v", topic, e.Err)
			}
			got = append(got, fs.Records()...)
		}
		c.Close()
		if len(got) != len(produced[topic]) {
			t.Fatalf("%s: consumed %d records from offset 0, produced %d", topic, len(got), len(produced[topic]))
		}
		for i, r := range got {
			if r.Offset != int64(i) || string(r.Value) != produced[topic][i] || string(r.Key) != strconv.Itoa(i%50%7) {
				t.Fatalf("%s: record %d is offset %d %q=%q; produced %q at offset %d", topic, i, r.Offset, r.Key, r.Value, produced[topic][i], i)
			}
		}
	}
}

var metricLine = regexp.MustCompile(`^(strata_[a-z_]+)(?:\{[^}]*\})? ([0-9.e+-]+)$`)

// scrapeMetrics sums each strata_ metric's samples in GET /metrics.
func scrapeMetrics(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if m := metricLine.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] += v
		}
	}
	return out
}
