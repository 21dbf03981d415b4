package etcdcat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"strata/catalog"
	"strata/catalog/catalogtest"
	"strata/internal/testsvc"
)

var now = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// client returns a new etcd client, as a node has its own.
func client(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{testsvc.StartEtcd(t)}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func open(t *testing.T, cli *clientv3.Client, prefix string, m *Metrics) *Catalog {
	t.Helper()
	c, err := Open(context.Background(), Config{Client: cli, Prefix: prefix, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestContract(t *testing.T) {
	cli := client(t)
	catalogtest.Run(t, func(t *testing.T) (catalog.Catalog, func() catalog.Catalog) {
		prefix := testsvc.UniquePrefix(t)
		reopen := func() catalog.Catalog { return open(t, cli, prefix, nil) }
		return reopen(), reopen
	})
}

// The keys are what docs/catalog.md shows, in order, and their values are
// the JSON an operator reads with etcdctl.
func TestKeySchema(t *testing.T) {
	cli := client(t)
	prefix := testsvc.UniquePrefix(t)
	c := open(t, cli, prefix, nil)
	if _, _, err := c.CreateShard("orders-0", now); err != nil {
		t.Fatal(err)
	}
	for no := range uint64(10) {
		if _, err := c.Roll(catalog.Segment{Shard: "orders-0", No: no, StartOffset: no * 100, EndOffset: no*100 + 99, Records: 100}, now); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(context.Background(), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), prefix))
	}
	want := []string{}
	for no := range 11 {
		want = append(want, fmt.Sprintf("/catalog/seg/orders-0/%020d", no))
	}
	want = append(want, "/catalog/shard/orders-0")
	if strings.Join(keys, "\n") != strings.Join(want, "\n") {
		t.Fatalf("keys:\n%s\nwant:\n%s", strings.Join(keys, "\n"), strings.Join(want, "\n"))
	}
	var seg map[string]any
	if err := json.Unmarshal(resp.Kvs[9].Value, &seg); err != nil {
		t.Fatalf("segment 9's value is not JSON: %v: %s", err, resp.Kvs[9].Value)
	}
	if seg["state"] != "sealed" || seg["start_offset"] != 900.0 || seg["end_offset"] != 999.0 || seg["records"] != 100.0 {
		t.Fatalf("segment 9 reads %s", resp.Kvs[9].Value)
	}
	var sh map[string]any
	if err := json.Unmarshal(resp.Kvs[11].Value, &sh); err != nil || sh["name"] != "orders-0" {
		t.Fatalf("shard value %s: %v", resp.Kvs[11].Value, err)
	}
}

// race runs a and b on two catalogs (two nodes) with both holding after
// their read until the other has read too, so both decide on the same state
// and only the compare in etcd tells them apart.
func race(t *testing.T, ca, cb *Catalog, a, b func() error) (errA, errB error) {
	t.Helper()
	var read sync.WaitGroup
	read.Add(2)
	for _, c := range []*Catalog{ca, cb} {
		var once sync.Once
		c.decided = func() { // only the first decision waits: a re-read must not
			once.Do(func() { read.Done(); read.Wait() })
		}
	}
	defer func() { ca.decided, cb.decided = nil, nil }()
	var done sync.WaitGroup
	done.Add(2)
	go func() { defer done.Done(); errA = a() }()
	go func() { defer done.Done(); errB = b() }()
	done.Wait()
	return errA, errB
}

func oneWinner(t *testing.T, what string, errA, errB error, loser error) {
	t.Helper()
	switch {
	case errA == nil && errors.Is(errB, loser), errB == nil && errors.Is(errA, loser):
	default:
		t.Fatalf("%s: want one success and one %v, got %v and %v", what, loser, errA, errB)
	}
}

func segments(t *testing.T, c catalog.Catalog, shard string) string {
	t.Helper()
	segs, err := c.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, s := range segs {
		fmt.Fprintf(&b, "%d %s %d-%d\n", s.No, s.State, s.StartOffset, s.EndOffset)
	}
	return b.String()
}

func TestTwoNodesRace(t *testing.T) {
	prefix := testsvc.UniquePrefix(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	a, b := open(t, client(t), prefix, m), open(t, client(t), prefix, m)

	errA, errB := race(t, a, b,
		func() error { _, _, err := a.CreateShard("s-0", now); return err },
		func() error { _, _, err := b.CreateShard("s-0", now); return err })
	oneWinner(t, "create", errA, errB, catalog.ErrExists)

	// Both nodes seal segment 0, at different end offsets: one roll wins
	// whole, the other changes nothing.
	errA, errB = race(t, a, b,
		func() error { _, err := a.Roll(catalog.Segment{Shard: "s-0", No: 0, EndOffset: 99}, now); return err },
		func() error { _, err := b.Roll(catalog.Segment{Shard: "s-0", No: 0, EndOffset: 199}, now); return err })
	oneWinner(t, "roll", errA, errB, catalog.ErrConflict)
	got := segments(t, a, "s-0")
	if got != "0 sealed 0-99\n1 active 100-0\n" && got != "0 sealed 0-199\n1 active 200-0\n" {
		t.Fatalf("after racing rolls:\n%s", got)
	}
	if n := testutil.ToFloat64(m.lostCAS.WithLabelValues("roll")); n != 1 {
		t.Fatalf("roll compare failures = %v, want 1: the race was not a race", n)
	}

	// Both nodes' tiering jobs claim segment 0 for upload.
	var won catalog.Segment
	errA, errB = race(t, a, b,
		func() error {
			s, err := a.Transition("s-0", 0, catalog.Sealed, catalog.Uploading, func(s *catalog.Segment) { s.ObjectKey = "a" })
			if err == nil {
				won = s
			}
			return err
		},
		func() error {
			s, err := b.Transition("s-0", 0, catalog.Sealed, catalog.Uploading, func(s *catalog.Segment) { s.ObjectKey = "b" })
			if err == nil {
				won = s
			}
			return err
		})
	oneWinner(t, "transition", errA, errB, catalog.ErrConflict)
	segs, err := b.Segments("s-0")
	if err != nil {
		t.Fatal(err)
	}
	if segs[0].State != catalog.Uploading || segs[0].ObjectKey != won.ObjectKey {
		t.Fatalf("segment 0 is %s with object %q; the winner wrote %q", segs[0].State, segs[0].ObjectKey, won.ObjectKey)
	}
	if n := testutil.ToFloat64(m.lostCAS.WithLabelValues("transition")); n != 1 {
		t.Fatalf("transition compare failures = %v, want 1", n)
	}

	// Two raises of the low watermark: the loser re-reads, finds it higher
	// than its own and leaves it.
	errA, errB = race(t, a, b,
		func() error { _, err := a.SetLowWatermark("s-0", 50); return err },
		func() error { _, err := b.SetLowWatermark("s-0", 30); return err })
	if errA != nil || errB != nil {
		t.Fatalf("low watermarks: %v, %v", errA, errB)
	}
	if sh, err := b.Shard("s-0"); err != nil || sh.LowWatermark != 50 {
		t.Fatalf("low watermark %d (%v), want 50", sh.LowWatermark, err)
	}
}

// Writers on different segments of one shard never conflict, and nothing
// one writes is lost to the other.
func TestTwoNodesDifferentSegments(t *testing.T) {
	prefix := testsvc.UniquePrefix(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	a, b := open(t, client(t), prefix, m), open(t, client(t), prefix, m)
	if _, _, err := a.CreateShard("s-0", now); err != nil {
		t.Fatal(err)
	}
	for no := range uint64(20) {
		if _, err := a.Roll(catalog.Segment{Shard: "s-0", No: no, StartOffset: no * 10, EndOffset: no*10 + 9}, now); err != nil {
			t.Fatal(err)
		}
	}

	// Held together: a rolls the active segment while b claims segment 0.
	errA, errB := race(t, a, b,
		func() error {
			_, err := a.Roll(catalog.Segment{Shard: "s-0", No: 20, StartOffset: 200, EndOffset: 209}, now)
			return err
		},
		func() error {
			_, err := b.Transition("s-0", 0, catalog.Sealed, catalog.Uploading, nil)
			return err
		})
	if errA != nil || errB != nil {
		t.Fatalf("roll and transition on different segments: %v, %v", errA, errB)
	}

	// Then both nodes move every other segment through the lifecycle at once.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i, c := range []*Catalog{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for no := uint64(1 + i); no < 21; no += 2 {
				for _, step := range [][2]catalog.State{{catalog.Sealed, catalog.Uploading}, {catalog.Uploading, catalog.Cold}} {
					if _, err := c.Transition("s-0", no, step[0], step[1], nil); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var want strings.Builder
	fmt.Fprintf(&want, "0 uploading 0-9\n")
	for no := 1; no < 21; no++ {
		fmt.Fprintf(&want, "%d cold %d-%d\n", no, no*10, no*10+9)
	}
	fmt.Fprintf(&want, "21 active 210-0\n")
	if got := segments(t, b, "s-0"); got != want.String() {
		t.Fatalf("segments:\n%s\nwant:\n%s", got, want.String())
	}
	for _, op := range []string{"roll", "transition"} {
		if n := testutil.ToFloat64(m.lostCAS.WithLabelValues(op)); n != 0 {
			t.Errorf("%s compare failures = %v on different segments, want 0", op, n)
		}
	}
}

// etcd is written on shard and segment events only: one write per create
// (also one that finds the shard exists, as a replayed event does), roll,
// lifecycle step or raised watermark, none for a read or a watermark that
// is already as high.
func TestWritesCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := open(t, client(t), testsvc.UniquePrefix(t), NewMetrics(reg))
	if _, _, err := c.CreateShard("s-0", now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CreateShard("s-0", now); !errors.Is(err, catalog.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	for no := range uint64(5) {
		if _, err := c.Roll(catalog.Segment{Shard: "s-0", No: no, EndOffset: no}, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Transition("s-0", 0, catalog.Sealed, catalog.Uploading, nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.SetLowWatermark("s-0", 2); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Segments("s-0"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Shards(); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP strata_catalog_etcd_writes_total Write transactions the catalog sent to etcd, by operation (each is a Raft proposal, won or lost).
# TYPE strata_catalog_etcd_writes_total counter
strata_catalog_etcd_writes_total{op="create_shard"} 2
strata_catalog_etcd_writes_total{op="low_watermark"} 1
strata_catalog_etcd_writes_total{op="roll"} 5
strata_catalog_etcd_writes_total{op="transition"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "strata_catalog_etcd_writes_total"); err != nil {
		t.Fatal(err)
	}
	if c.Writes() != 9 {
		t.Fatalf("Writes() = %d, want 9", c.Writes())
	}
}

// A Restore larger than one etcd transaction is staged, invisible until its
// last stage; what an interrupted one left is cleared by the next create.
func TestRestoreLarge(t *testing.T) {
	cli := client(t)
	prefix := testsvc.UniquePrefix(t)
	c := open(t, cli, prefix, nil)
	var segs []catalog.Segment
	for no := range uint64(300) {
		segs = append(segs, catalog.Segment{Shard: "big-0", No: no, State: catalog.Remote, StartOffset: no * 10, EndOffset: no*10 + 9})
	}
	if err := c.Restore(catalog.Shard{Name: "big-0", LowWatermark: 0}, segs); err != nil {
		t.Fatal(err)
	}
	got, err := c.Segments("big-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 300 || got[0].No != 0 || got[299].No != 299 || got[299].EndOffset != 2999 {
		t.Fatalf("restored %d segments, first %+v", len(got), got[0])
	}
	if err := c.Restore(catalog.Shard{Name: "big-0"}, segs); !errors.Is(err, catalog.ErrExists) {
		t.Fatalf("second restore: %v, want ErrExists", err)
	}
	if k, err := cli.Get(context.Background(), c.restoreKey("big-0")); err != nil || len(k.Kvs) != 0 {
		t.Fatalf("restore marker left behind: %v %v", k.Kvs, err)
	}

	// A restore that stopped after its first batches: segments, a marker,
	// no shard key.
	ctx := context.Background()
	for no := range 3 {
		if _, err := cli.Put(ctx, c.segKey("half-0", uint64(no)), `{"shard":"half-0","state":"remote"}`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, c.restoreKey("half-0"), "restoring"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Segments("half-0"); err != nil || len(got) != 0 {
		t.Fatalf("an unfinished restore shows %d segments (%v)", len(got), err)
	}
	if shards, _ := c.Shards(); len(shards) != 1 {
		t.Fatalf("shards: %+v", shards)
	}
	if _, _, err := c.CreateShard("half-0", now); err != nil {
		t.Fatal(err)
	}
	if got := segments(t, c, "half-0"); got != "0 active 0-0\n" {
		t.Fatalf("created over an unfinished restore:\n%s", got)
	}
	if k, err := cli.Get(ctx, c.restoreKey("half-0")); err != nil || len(k.Kvs) != 0 {
		t.Fatalf("restore marker left behind: %v %v", k.Kvs, err)
	}
}

// Close leaves the caller's client working; the closed catalog refuses.
func TestCloseKeepsClient(t *testing.T) {
	cli := client(t)
	c := open(t, cli, testsvc.UniquePrefix(t), nil)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(context.Background(), "any"); err != nil {
		t.Fatalf("client after the catalog's Close: %v", err)
	}
	if _, err := c.Shards(); !errors.Is(err, context.Canceled) {
		t.Fatalf("closed catalog's Shards: %v, want context.Canceled", err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	_, err = Open(context.Background(), Config{Client: cli, Prefix: "x", Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "x/catalog/") {
		t.Fatalf("Open on no etcd: %v, want an error naming the prefix", err)
	}
}
