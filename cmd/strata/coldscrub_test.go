package main

import (
	"fmt"
	"io"
	stdmaps "maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/catalog"
	"strata/tiering"
)

// The cold scrub as an operator meets it in `strata serve`: of two objects
// damaged in the bucket (one deleted, one overwritten in place), the one
// whose segment is still local is uploaded again and reads back through Kafka once the local copy is gone; the one
// whose local copy is gone is reported (GET /v1/scrub, the metrics) and its
// offsets answer KAFKA_STORAGE_ERROR, not UNKNOWN_SERVER_ERROR.
func TestColdScrubThroughServe(t *testing.T) {
	h := newHonourHarness(t, "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "tiering.enabled=false",
		"tiering.min_sealed_age=0s", "tiering.local_retention=1h", "tiering.scrub_schedule=@every 1000h")
	ts := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	h.create("clicks")
	h.produce("clicks", 0, 300, ts)
	h.tierRun()
	segs := h.segments("clicks-0")
	sealed := sizes(segs, func(s catalog.Segment) bool { return s.State == catalog.Cold })
	if len(segs) < 4 || segs[0].State != catalog.Cold {
		t.Fatalf("want every sealed segment uploaded with its local copy kept:\n%s", states(segs))
	}
	// Only the oldest local copy goes.
	h.alter("clicks", fmt.Sprintf("local.retention.bytes=%d", sealed-1))
	h.tierRun()
	segs = h.segments("clicks-0")
	if segs[0].State != catalog.Remote || segs[1].State != catalog.Cold {
		t.Fatalf("want segment 0 remote, 1 cold:\n%s", states(segs))
	}
	// Segment 0's object is damaged in place and has no local copy left;
	// segment 1's is deleted. (In place: the local backend keeps its read
	// handles open, and a file unlinked behind its back stays readable
	// through them until it is replaced through the bucket.)
	lost, missing := segs[0], segs[1]
	path := filepath.Join(h.dir, "cold", lost.ObjectKey)
	obj, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Its closing magic: a flip in the middle may land in bytes no check
	// reads (statistics, a page's unused dictionary), and the tiering
	// package's tests flip those already.
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("XXXX"), int64(len(obj)-4)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Remove(filepath.Join(h.dir, "cold", missing.ObjectKey)); err != nil {
		t.Fatal(err)
	}

	var sum tiering.ColdScrubSummary
	if err := adminCall(h.s.Admin, "POST", "/v1/scrub/cold/run", nil, &sum); err != nil {
		t.Fatalf("POST /v1/scrub/cold/run: %v", err)
	}
	if sum.Checked != len(segs)-1 || len(sum.Findings) != 2 {
		t.Fatalf("cold scrub: %d checked, findings %+v; want %d checked, 2 findings", sum.Checked, sum.Findings, len(segs)-1)
	}
	var report struct {
		Cold struct {
			Findings []tiering.ColdFinding `json:"findings"`
		} `json:"cold"`
	}
	if err := adminCall(h.s.Admin, "GET", "/v1/scrub", nil, &report); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range report.Cold.Findings {
		got[f.Key] = string(f.Problem) + " " + f.State
	}
	if want := map[string]string{lost.ObjectKey: "damaged unrepairable", missing.ObjectKey: "missing repaired"}; !stdmaps.Equal(got, want) {
		t.Fatalf("GET /v1/scrub cold findings %v, want %v", got, want)
	}
	resp, err := http.Get("http://" + h.s.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`strata_scrub_cold_damaged_total{problem="missing"} 1`, `strata_scrub_cold_damaged_total{problem="damaged"} 1`,
		"strata_scrub_cold_repaired_total 1", "strata_scrub_cold_unrepairable_total 1", "strata_scrub_cold_unrepairable_objects 1",
		fmt.Sprintf("strata_scrub_cold_checked_objects_total %d", len(segs)-1)} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}

	// The lost offsets: a clear storage error.
	td, err := h.adm.ListTopics(h.ctx, "clicks")
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxBytes, req.MaxWaitMillis = -1, 1<<20, 0
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = "clicks", td["clicks"].ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, int64(lost.StartOffset), 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	fr, err := req.RequestWith(h.ctx, h.cl)
	if err != nil || len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch of the lost offsets: %v", err)
	}
	if code := fr.Topics[0].Partitions[0].ErrorCode; code != kerr.KafkaStorageError.Code {
		t.Errorf("fetch of the lost offsets answers %v with %d bytes, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(code), len(fr.Topics[0].Partitions[0].RecordBatches))
	}

	// The repaired object serves its offsets once no local copy is left.
	h.alter("clicks", "local.retention.ms=0")
	h.tierRun()
	if segs := h.segments("clicks-0"); slices.ContainsFunc(segs[:len(segs)-1], func(s catalog.Segment) bool { return s.State != catalog.Remote }) {
		t.Fatalf("want every sealed segment remote:\n%s", states(segs))
	}
	h.consume("the repaired object read from the bucket", "clicks", int(missing.StartOffset), 300, ts)
}
