package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"strata/icetable"
	"strata/internal/testsvc"
	"strata/tiering/objstore/local"
)

// tierRun asks node id for a tiering run and returns what it did.
func (c *cluster) tierRun(id int32) (summary struct {
	Uploaded []struct {
		Key string `json:"key"`
	} `json:"uploaded"`
	ClaimsLost     int               `json:"claims_lost"`
	OrphansDeleted int               `json:"orphans_deleted"`
	Errors         []json.RawMessage `json:"errors"`
}) {
	c.t.Helper()
	resp, err := http.Post("http://"+c.nodes[id].Admin+"/v1/tiering/run", "application/json", nil)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &summary) != nil || len(summary.Errors) > 0 {
		c.t.Fatalf("tiering run on node %d: %d %s", id, resp.StatusCode, body)
	}
	return summary
}

// Two nodes share one cold tier (here one local folder, so the local
// bucket's lock is shared between processes). Each tiers the partitions
// it leads, through its claims in etcd: a segment another node claimed
// waits, counted, without an error. Each node's orphan sweep, with no
// grace, leaves the objects of the other's partitions, which its own
// catalog does not know (the manifests name them), and every record reads
// back from the cold tier through either node. The topic's Iceberg table
// over the shared bucket holds every object; deleted, the topic leaves the
// table before its objects leave the bucket, then the table goes too, and
// made again, it has a new table.
func TestNodesShareTheColdTier(t *testing.T) {
	shared := t.TempDir()
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"tiering.enabled=true", "tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s",
			"tiering.orphan_grace=1ms", "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "cold.local.dir=" + shared,
			"iceberg.enabled=true"}}
	bucket, err := local.New(shared)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	tables := &icetable.Tables{Bucket: bucket, Location: shared, Log: slog.New(slog.DiscardHandler)}
	describe := func(what string, files, records int) {
		t.Helper()
		v, err := tables.Describe(context.Background(), "orders")
		if err != nil || v.DataFiles != int64(files) || v.Records != int64(records) {
			t.Fatalf("%s: the table holds %d files and %d records (%v); want %d and %d", what, v.DataFiles, v.Records, err, files, records)
		}
	}
	c.add(1)
	c.add(2)
	createTopic(t, c.client(1), "orders", 2)
	leaders := c.leaders(1, "orders", func(brokers int, l []int32) bool { return brokers == 2 && allLed(brokers, l) && l[0] != l[1] })
	// In several rounds: a segment rolls at an append after it is full.
	want := map[int32][]string{}
	for round := range 6 {
		for p, vs := range c.produce(2, "orders", []int32{0, 1}, 50, fmt.Sprintf("t%d", round)) {
			want[p] = append(want[p], vs...)
		}
	}

	// A node that died holding a claim on partition 0's first segment:
	// its leader skips it while the claim lives.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, c.pfx+"/claims/orders-0/"+fmt.Sprintf("%020d", 0), `{"node":9}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if sum := c.tierRun(leaders[0]); sum.ClaimsLost != 1 || len(sum.Uploaded) != 0 {
		t.Fatalf("node %d's run while a dead node claims partition 0's first segment: %+v; want that partition skipped, one claim lost", leaders[0], sum)
	}
	resp, err := http.Get("http://" + c.nodes[leaders[0]].Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "\nstrata_tiering_claims_lost_total 1\n") {
		t.Fatalf("node %d's /metrics lacks strata_tiering_claims_lost_total 1", leaders[0])
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}

	uploaded := map[string]bool{}
	for _, id := range []int32{1, 2, 1, 2} {
		sum := c.tierRun(id)
		if sum.OrphansDeleted != 0 {
			t.Fatalf("node %d's orphan sweep deleted %d objects: the other node's", id, sum.OrphansDeleted)
		}
		for _, u := range sum.Uploaded {
			uploaded[u.Key] = true
		}
	}
	var objects []string
	for p := range 2 {
		dir := filepath.Join(shared, "topic=orders", fmt.Sprintf("partition=%d", p))
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		parquets := 0
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".parquet") {
				parquets++
				objects = append(objects, fmt.Sprintf("topic=orders/partition=%d/%s", p, e.Name()))
			}
		}
		raw, err := os.ReadFile(filepath.Join(dir, "_strata_manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Objects []struct{ Key string } }
		if err := json.Unmarshal(raw, &m); err != nil || len(m.Objects) != parquets || parquets < 2 {
			t.Fatalf("partition %d: %d objects, the manifest lists %d (%v); want several, each listed", p, parquets, len(m.Objects), err)
		}
	}
	if len(objects) != len(uploaded) {
		t.Fatalf("%d objects in the shared folder, %d uploaded", len(objects), len(uploaded))
	}
	tieredRecords := 0
	for p := range 2 {
		raw, _ := os.ReadFile(filepath.Join(shared, "topic=orders", fmt.Sprintf("partition=%d", p), "_strata_manifest.json"))
		var m struct{ Objects []struct{ Records int } }
		json.Unmarshal(raw, &m)
		for _, o := range m.Objects {
			tieredRecords += o.Records
		}
	}
	describe("tiered by both nodes", len(objects), tieredRecords)
	for id := range c.nodes {
		got := c.consume(id, "orders", 600)
		for p := range int32(2) {
			if strings.Join(got[p], ",") != strings.Join(want[p], ",") {
				t.Fatalf("partition %d read through node %d differs from what was produced", p, id)
			}
		}
	}

	// Deleted, the topic's objects leave the shared bucket (the controller
	// clears them once), and a topic made again under the name tiers and
	// reads only its own records.
	adm := kadm.NewClient(c.client(2))
	if resp, err := adm.DeleteTopics(ctx, "orders"); err != nil || resp.Error() != nil {
		t.Fatalf("delete orders: %v %v", err, resp.Error())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		filepath.WalkDir(filepath.Join(shared, "topic=orders"), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				left = append(left, path)
			}
			return nil
		})
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after orders was deleted, the shared bucket still holds %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Its table went with it (nothing above is left in the folder).
	if _, err := tables.Describe(ctx, "orders"); !errors.Is(err, icetable.ErrNoTable) {
		t.Fatalf("the deleted topic's table: %v; want none", err)
	}
	recreate(t, c.client(2), "orders", 2)
	c.leaders(1, "orders", func(brokers int, l []int32) bool { return allLed(brokers, l) })
	again := map[int32][]string{}
	for round := range 3 {
		for p, vs := range c.produce(1, "orders", []int32{0, 1}, 50, fmt.Sprintf("again%d", round)) {
			again[p] = append(again[p], vs...)
		}
	}
	n := 0
	for _, id := range []int32{1, 2} {
		n += len(c.tierRun(id).Uploaded)
	}
	if n == 0 {
		t.Fatal("the topic made again tiered nothing: the test would prove nothing")
	}
	if v, err := tables.Describe(ctx, "orders"); err != nil || v.DataFiles != int64(n) || v.Records == 0 || v.Records > 300 {
		t.Fatalf("the table of the topic made again: %d files, %d records (%v); want its %d objects and none of the old topic's records", v.DataFiles, v.Records, err, n)
	}
	if got := c.consume(1, "orders", 300); !equalParts(got, again) {
		t.Fatalf("the topic made again reads %v records per partition, want only its own %v", counts(got), counts(again))
	}
}

// One node at a time commits a topic's table, under an etcd mutex held
// with its lease; a node SIGKILLed while it waits for (or holds) that
// mutex holds the others up only until its lease expires, and a commit
// after it finishes the job: the table holds every tiered object once.
// A dead node's lock key, put under a lease the test revokes, keeps both
// nodes waiting first, so node 2 is killed in the mutex's queue ahead of
// node 1.
func TestTableCommitterKilled(t *testing.T) {
	shared := t.TempDir()
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"tiering.enabled=true", "tiering.schedule=@every 1h", "tiering.min_sealed_age=0s",
			"segment.max_bytes=4KiB", "segment.roll_check_interval=5", "cold.local.dir=" + shared, "iceberg.enabled=true"}}
	c.add(1)
	c.add(2)
	createTopic(t, c.client(1), "orders", 2)
	c.leaders(1, "orders", func(brokers int, l []int32) bool { return brokers == 2 && allLed(brokers, l) && l[0] != l[1] })
	for round := range 6 {
		c.produce(2, "orders", []int32{0, 1}, 50, fmt.Sprintf("k%d", round))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	lockKeys := func() int64 {
		resp, err := cli.Get(ctx, c.pfx+"/tablecommits/orders/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	waitKeys := func(n int64, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for lockKeys() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d keys in the table's mutex, want %d", what, lockKeys(), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, c.pfx+"/tablecommits/orders/dead", "", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	run := func(id int32) chan int {
		done := make(chan int, 1)
		go func() {
			resp, err := http.Post("http://"+c.nodes[id].Admin+"/v1/tiering/run", "application/json", nil)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		return done
	}
	killed := run(2)
	waitKeys(2, "node 2's run, waiting for the dead node's commit")
	survivor := run(1)
	waitKeys(3, "node 1's run, queued behind node 2")
	c.nodes[2].Kill()
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	<-killed
	select {
	case code := <-survivor:
		if code != http.StatusOK {
			t.Fatalf("node 1's run, after node 2 died in the table's mutex: %d", code)
		}
	case <-time.After(time.Minute):
		t.Fatal("node 1's commit still waits a minute after node 2 died queued before it")
	}
	waitKeys(0, "after node 1's commit")

	// Node 2 back: its objects, uploaded before it died, join the table.
	c.restart(2)
	c.leaders(1, "orders", func(brokers int, l []int32) bool { return brokers == 2 && allLed(brokers, l) })
	for _, id := range []int32{2, 1} {
		c.tierRun(id)
	}
	objects, records := 0, 0
	for p := range 2 {
		raw, err := os.ReadFile(filepath.Join(shared, "topic=orders", fmt.Sprintf("partition=%d", p), "_strata_manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Objects []struct{ Records int } }
		if err := json.Unmarshal(raw, &m); err != nil || len(m.Objects) == 0 {
			t.Fatalf("partition %d's manifest: %v, %d objects; want some", p, err, len(m.Objects))
		}
		objects += len(m.Objects)
		for _, o := range m.Objects {
			records += o.Records
		}
	}
	bucket, err := local.New(shared)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	tables := &icetable.Tables{Bucket: bucket, Location: shared, Log: slog.New(slog.DiscardHandler)}
	v, err := tables.Describe(ctx, "orders")
	// A file added twice would count in the data files and in the rows
	// past the partitions' ranges (hidden_records).
	if err != nil || v.DataFiles != int64(objects) || v.Records != int64(records) || v.HiddenRecords != 0 {
		t.Fatalf("the table: %d files, %d records, %d hidden (%v); want the manifests' %d objects and %d records, each once",
			v.DataFiles, v.Records, v.HiddenRecords, err, objects, records)
	}
}
