package cluster

// Tiering in a cluster: nodes that hold copies of one shard's segments, or
// different offset ranges of it, tier them into one shared bucket at once,
// each with its own catalog in etcd and its claims under its own lease.
// Real etcd, real MinIO, real engines; nothing mocked.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"strata/catalog"
	"strata/catalog/etcdcat"
	"strata/catalog/pebblecat"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/engine/store/storetest"
	"strata/internal/testsvc"
	"strata/parquet"
	"strata/tiering"
	"strata/tiering/objstore"
	"strata/tiering/objstore/s3"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var quiet = slog.New(slog.DiscardHandler)

// tierNode is one node as cmd wires it for tiering: an engine, its catalog
// in etcd under the node's own prefix, its own client of the shared bucket,
// its Member (whose lease holds its claims) and its tiering job.
type tierNode struct {
	engine *segment.Engine
	cat    catalog.Catalog
	bucket objstore.Bucket
	member *Member
	job    *tiering.Job
}

// sharedBucket names a fresh prefix in MinIO that every node of one test
// opens its own client on.
func sharedBucket(t *testing.T) func() objstore.Bucket {
	m := testsvc.StartMinIO(t)
	bucket, prefix := m.Bucket(t, "strata-cluster-tiering"), testsvc.UniquePrefix(t)
	return func() objstore.Bucket {
		b, err := s3.New(s3.Config{Endpoint: m.Endpoint, Bucket: bucket, Prefix: prefix, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
		if err != nil {
			t.Fatal(err)
		}
		// Its keep-alive connections to MinIO end with the test (goleak
		// found them left open: nothing closed the buckets).
		t.Cleanup(func() { b.Close() })
		return b
	}
}

func (h *harness) tierNode(id int32, bucket objstore.Bucket) *tierNode {
	t := h.t
	cat, err := etcdcat.Open(context.Background(), etcdcat.Config{Client: h.cli, Prefix: fmt.Sprintf("%s/node/%d", h.prefix, id)})
	if err != nil {
		t.Fatal(err)
	}
	e, err := segment.Open(segment.Config{Dir: t.TempDir(), Workers: 2, MaxSegmentBytes: 8 << 10, RollCheckInterval: 10, Logger: quiet,
		Events: tiering.Listen(cat, nil, "data", quiet)})
	if err != nil {
		cat.Close()
		t.Fatal(err)
	}
	e.SetColdSource(tiering.NewColdReader(cat, bucket, 0))
	n := &tierNode{engine: e, cat: cat, bucket: bucket, member: h.join(id)}
	n.job = &tiering.Job{Engine: e, Catalog: cat, Bucket: bucket, Prefix: "data", Claims: n.member,
		Log: quiet.With("node", id), Parquet: parquet.Options{RowGroupBytes: 4 << 10}}
	t.Cleanup(func() {
		n.job.Close()
		e.Close()
		cat.Close()
	})
	return n
}

// produce appends batches of 20 records to shard; the engine rolls by size.
func produce(t *testing.T, e *segment.Engine, shard string, batches int) {
	ctx := context.Background()
	if err := e.CreateShard(ctx, shard); err != nil && !errors.Is(err, store.ErrShardExists) {
		t.Fatal(err)
	}
	for i := 0; i < batches; i++ {
		if _, err := e.Append(ctx, shard, storetest.Records(20, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// sealed lists src's sealed segments of shard.
func sealed(t *testing.T, e *segment.Engine, shard string) []segment.SegmentMeta {
	segs, err := e.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	var out []segment.SegmentMeta
	for _, s := range segs {
		if s.State == segment.SegmentSealed {
			out = append(out, s)
		}
	}
	return out
}

// copySegments gives dst src's segments segs of shard (in order, from
// dst's log end), appended at their offsets and rolled where src rolled:
// a follower's byte-identical copy.
func copySegments(t *testing.T, src, dst *segment.Engine, shard string, segs []segment.SegmentMeta) {
	ctx := context.Background()
	if err := dst.CreateShard(ctx, shard); err != nil && !errors.Is(err, store.ErrShardExists) {
		t.Fatal(err)
	}
	for _, s := range segs {
		var recs []record.Record
		for off := s.StartOffset; off <= s.EndOffset; {
			got, err := src.Read(ctx, shard, off, store.Budget{MaxRecords: int(s.EndOffset - off + 1)})
			if err != nil || len(got) == 0 {
				t.Fatalf("reading %s at %d from the source: %d records, %v", shard, off, len(got), err)
			}
			recs = append(recs, got...)
			off = got[len(got)-1].Offset + 1
		}
		if err := dst.AppendAt(ctx, shard, recs[:int(s.EndOffset-s.StartOffset+1)]); err != nil {
			t.Fatal(err)
		}
		if err := dst.RollAt(ctx, shard, s.EndOffset+1); err != nil {
			t.Fatal(err)
		}
	}
}

// runTogether runs every node's job at once, once, and fails on any error.
func runTogether(t *testing.T, nodes ...*tierNode) []tiering.RunSummary {
	sums := make([]tiering.RunSummary, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum, err := n.job.Run(context.Background())
			if err == nil && len(sum.Errors) > 0 {
				err = errors.Join(func() (errs []error) {
					for _, e := range sum.Errors {
						errs = append(errs, e)
					}
					return
				}()...)
			}
			if err != nil {
				t.Errorf("node %d's run: %v", n.member.Node().ID, err)
			}
			sums[i] = sum
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return sums
}

// remote reports whether every one of segs is remote in n's catalog, at
// its deterministic key.
func (n *tierNode) remote(t *testing.T, shard string, segs []segment.SegmentMeta) bool {
	n.engine.SyncEvents()
	got, err := n.cat.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	byStart := map[uint64]catalog.Segment{}
	for _, c := range got {
		byStart[c.StartOffset] = c
	}
	for _, s := range segs {
		c := byStart[s.StartOffset]
		if c.State != catalog.Remote || c.ObjectKey != objectKey(t, shard, s) {
			return false
		}
	}
	return true
}

func objectKey(t *testing.T, shard string, s segment.SegmentMeta) string {
	loc, err := tiering.LocationOf(shard)
	if err != nil {
		t.Fatal(err)
	}
	return loc.ObjectKey("data", s.StartOffset, s.EndOffset)
}

// checkBucket checks the bucket holds exactly one object per segment of
// every shard, and each shard's manifest lists each segment once, in order.
func checkBucket(t *testing.T, b objstore.Bucket, want map[string][]segment.SegmentMeta) {
	t.Helper()
	ctx := context.Background()
	var objects, wantObjects []string
	if err := b.List(ctx, "data/", func(a objstore.Attrs) error {
		if strings.HasSuffix(a.Name, ".parquet") {
			objects = append(objects, a.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for shard, segs := range want {
		loc, _ := tiering.LocationOf(shard)
		raw, err := objstore.ReadAll(ctx, b, loc.ManifestKey("data"))
		if err != nil {
			t.Fatalf("%s's manifest: %v", shard, err)
		}
		var m tiering.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		var listed, expected []string
		for _, e := range m.Objects {
			listed = append(listed, fmt.Sprintf("%d-%d %s %08x", e.StartOffset, e.EndOffset, e.Key, e.SegmentChecksum))
		}
		for _, s := range segs {
			expected = append(expected, fmt.Sprintf("%d-%d %s %08x", s.StartOffset, s.EndOffset, objectKey(t, shard, s), s.Checksum))
			wantObjects = append(wantObjects, objectKey(t, shard, s))
		}
		if !slices.Equal(listed, expected) {
			t.Errorf("%s's manifest lists\n  %s\nwant every segment once, in order:\n  %s", shard, strings.Join(listed, "\n  "), strings.Join(expected, "\n  "))
		}
	}
	slices.Sort(wantObjects)
	if !slices.Equal(objects, wantObjects) {
		t.Errorf("the bucket holds %d objects:\n  %s\nwant one per segment (%d):\n  %s", len(objects), strings.Join(objects, "\n  "),
			len(wantObjects), strings.Join(wantObjects, "\n  "))
	}
}

// Two nodes tier concurrently: one object per segment, manifests complete.
// Here both hold byte-identical copies of the same sealed segments (a
// follower's copy, as replication makes): each segment is uploaded by
// exactly one of them, and the other records that object as its own
// segment's (adopted), so both catalogs end with every segment remote.
func TestTwoNodesTierIdenticalCopies(t *testing.T) {
	h := newHarness(t)
	bucket := sharedBucket(t)
	a, b := h.tierNode(1, bucket()), h.tierNode(2, bucket())
	shards := []string{"orders-0", "orders-1", "orders-2"}
	want := map[string][]segment.SegmentMeta{}
	for _, shard := range shards {
		produce(t, a.engine, shard, 30)
		want[shard] = sealed(t, a.engine, shard)
		if len(want[shard]) < 4 {
			t.Fatalf("%s rolled %d times; the test needs several segments", shard, len(want[shard]))
		}
		copySegments(t, a.engine, b.engine, shard, want[shard])
		for i, s := range sealed(t, b.engine, shard) {
			if w := want[shard][i]; s.StartOffset != w.StartOffset || s.EndOffset != w.EndOffset || s.Checksum != w.Checksum {
				t.Fatalf("%s segment %d: the copy is %+v, the original %+v", shard, i, s, w)
			}
		}
	}
	records := map[string][]record.Record{}
	for _, shard := range shards {
		records[shard] = storetest.ReadAll(t, a.engine, shard, 0)
	}

	uploads, adopted, lost := map[string]int{}, map[string]int{}, 0
	for round := 1; ; round++ {
		for _, sum := range runTogether(t, a, b) {
			for _, u := range sum.Uploaded {
				uploads[u.Key]++
			}
			for _, u := range sum.Adopted {
				adopted[u.Key]++
			}
			lost += sum.ClaimsLost
		}
		done := true
		for _, shard := range shards {
			done = done && a.remote(t, shard, want[shard]) && b.remote(t, shard, want[shard])
		}
		if done && round >= 3 {
			t.Logf("every segment remote on both nodes after %d concurrent runs; %d claims lost to the other node", round, lost)
			break
		}
		if round == 10 {
			t.Fatalf("after %d concurrent runs not every segment is remote on both nodes", round)
		}
	}
	checkBucket(t, bucket(), want)
	for _, shard := range shards {
		for _, s := range want[shard] {
			key := objectKey(t, shard, s)
			if uploads[key] != 1 || adopted[key] != 1 {
				t.Errorf("%s: uploaded %d times and adopted %d times; want once each (one node uploads, the other adopts)", key, uploads[key], adopted[key])
			}
		}
		// Both nodes read their logs back from the one copy in the bucket
		// (node 1 holds its active segment's records beyond).
		storetest.Equal(t, storetest.ReadAll(t, a.engine, shard, 0), records[shard])
		last := want[shard][len(want[shard])-1].EndOffset
		storetest.Equal(t, storetest.ReadAll(t, b.engine, shard, 0), records[shard][:last+1])
	}
}

// Two nodes tier concurrently: one object per segment, manifests complete.
// Here they hold different offset ranges of one shard (its log split at a
// leadership move: node 1 the offsets before N, node 2 those from N), so
// both write the shard's one manifest at once: it ends with every segment
// of both, and a catalog rebuilt from it alone reads the whole log back.
// Neither node's orphan sweep touches the other's objects, which its own
// catalog does not know.
func TestTwoNodesTierOneShardSplit(t *testing.T) {
	h := newHarness(t)
	bucket := sharedBucket(t)
	a, b := h.tierNode(1, bucket()), h.tierNode(2, bucket())
	ctx := context.Background()
	src, err := segment.Open(segment.Config{Dir: t.TempDir(), Workers: 1, MaxSegmentBytes: 4 << 10, RollCheckInterval: 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	const shard = "orders-7"
	produce(t, src, shard, 40)
	segs := sealed(t, src, shard)
	if len(segs) < 8 {
		t.Fatalf("the log rolled %d times; the test needs several segments on each side", len(segs))
	}
	split := len(segs) / 2
	n := segs[split].StartOffset
	copySegments(t, src, a.engine, shard, segs[:split])
	// Node 2 holds the offsets from n: a copy of the whole log whose
	// segments below n went by retention.
	copySegments(t, src, b.engine, shard, segs)
	if err := b.engine.DeleteBefore(ctx, shard, n); err != nil {
		t.Fatal(err)
	}
	if _, err := b.engine.ApplyRetention(ctx, segment.RetentionPolicy{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := sealed(t, b.engine, shard); len(got) != len(segs)-split || got[0].StartOffset != n {
		t.Fatalf("node 2 holds %d sealed segments from offset %d; want %d from %d", len(got), got[0].StartOffset, len(segs)-split, n)
	}

	for round := 1; ; round++ {
		runTogether(t, a, b)
		if a.remote(t, shard, segs[:split]) && b.remote(t, shard, segs[split:]) && round >= 3 {
			break
		}
		if round == 10 {
			t.Fatalf("after %d concurrent runs not every segment is remote on its node", round)
		}
	}
	checkBucket(t, bucket(), map[string][]segment.SegmentMeta{shard: segs})

	// Each node's orphan sweep, with no grace at all, leaves the other
	// node's objects: the manifest names them.
	for _, node := range []*tierNode{a, b} {
		node.job.OrphanGrace = time.Nanosecond
		if sum, err := node.job.Run(ctx); err != nil || len(sum.Errors) > 0 || sum.OrphansDeleted != 0 {
			t.Fatalf("node %d's sweep: deleted %d, %v %v", node.member.Node().ID, sum.OrphansDeleted, err, sum.Errors)
		}
	}
	checkBucket(t, bucket(), map[string][]segment.SegmentMeta{shard: segs})

	// The manifest alone is the whole log: rebuilt into a fresh catalog
	// and engine, every record reads back.
	dir := t.TempDir()
	cat, err := pebblecat.Open(filepath.Join(dir, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	e, err := segment.Open(segment.Config{Dir: dir, Workers: 1, Logger: quiet, Events: tiering.Listen(cat, nil, "data", quiet)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.SetColdSource(tiering.NewColdReader(cat, bucket(), 0))
	if sum, err := tiering.Rebuild(ctx, bucket(), "data", cat, e, time.Now()); err != nil || sum.Segments != len(segs) {
		t.Fatalf("rebuild from the bucket: %+v, %v; want %d segments", sum, err, len(segs))
	}
	want := storetest.ReadAll(t, src, shard, 0)
	storetest.Equal(t, storetest.ReadAll(t, e, shard, 0), want[:segs[len(segs)-1].EndOffset+1])
}

// A claim held by a node that died (its lease left to expire, no revoke)
// keeps the others off the segment until the lease expires, not longer: the
// job skips it (counted, no error), then tiers it.
func TestDeadClaimantExpires(t *testing.T) {
	h := newHarness(t)
	bucket := sharedBucket(t)
	b := h.tierNode(2, bucket())
	ctx := context.Background()
	const shard = "orders-0"
	produce(t, b.engine, shard, 30)
	segs := sealed(t, b.engine, shard)
	if len(segs) < 2 {
		t.Fatalf("%d sealed segments; the test needs two", len(segs))
	}

	// The dead node's claim: put under its lease, which nothing keeps alive.
	granted := time.Now()
	lease, err := h.cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := takeClaim(ctx, h.cli, b.member.keys.claim(shard, segs[0].StartOffset), `{"node":1}`, lease.ID); !ok || err != nil {
		t.Fatalf("the dead node's claim: %v %v", ok, err)
	}
	sum, err := b.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 || sum.ClaimsLost != 1 || len(sum.Uploaded) != 0 {
		t.Fatalf("run while another node holds the first segment: %d uploaded, %d claims lost, %v %v; want 0, 1 and no error",
			len(sum.Uploaded), sum.ClaimsLost, err, sum.Errors)
	}
	if b.job.ClaimsLost() != 1 {
		t.Fatalf("ClaimsLost() = %d, want 1", b.job.ClaimsLost())
	}
	// Runs every 100ms, as a tight schedule would: the one that tiers the
	// segment starts within the TTL (and etcd's expiry check, every 500ms)
	// of the lease's grant.
	for {
		started := time.Now()
		sum, err = b.job.Run(ctx)
		if err != nil || len(sum.Errors) > 0 {
			t.Fatalf("run: %v %v", err, sum.Errors)
		}
		if len(sum.Uploaded) > 0 {
			waited := started.Sub(granted)
			t.Logf("the run that tiered the segment started %s after the dead node's lease was granted (TTL %s)", waited.Round(10*time.Millisecond), ttl)
			if waited > ttl+time.Second {
				t.Fatalf("the dead node's claim blocked the segment for %s, TTL %s", waited, ttl)
			}
			break
		}
		if time.Since(granted) > ttl+2*time.Second {
			t.Fatalf("the dead node's claim still blocks the segment %s after its lease was granted (TTL %s)", time.Since(granted), ttl)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !b.remote(t, shard, segs) {
		t.Fatal("after the claim expired not every segment was tiered")
	}
	checkBucket(t, bucket(), map[string][]segment.SegmentMeta{shard: segs})
}

// The claims themselves: one holder at a time; a closed node's claims go
// at once (its lease is revoked); a release never deletes a claim that is
// no longer the releaser's; a node that takes its own claim again (a
// release that never reached etcd) gets it.
func TestClaims(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	m1, m2 := h.join(1), h.join(2)
	rel1, ok, err := m1.Claim(ctx, "orders-0", 100, 199)
	if err != nil || !ok {
		t.Fatalf("first claim: %v %v", ok, err)
	}
	if _, ok, err := m2.Claim(ctx, "orders-0", 100, 199); err != nil || ok {
		t.Fatalf("a second node's claim of a held segment: ok %v, %v; want refused", ok, err)
	}
	if rel2, ok, err := m2.Claim(ctx, "orders-0", 200, 299); err != nil || !ok {
		t.Fatalf("another segment: %v %v", ok, err)
	} else {
		rel2()
	}
	if again, ok, err := m1.Claim(ctx, "orders-0", 100, 199); err != nil || !ok {
		t.Fatalf("the holder claiming again: %v %v", ok, err)
	} else {
		again()
	}
	rel1() // already released by again: harmless
	rel2, ok, err := m2.Claim(ctx, "orders-0", 100, 199)
	if err != nil || !ok {
		t.Fatalf("a claim after its holder released it: %v %v", ok, err)
	}
	rel1() // a stale release must not delete node 2's claim
	if _, ok, _ := m1.Claim(ctx, "orders-0", 100, 199); ok {
		t.Fatal("an old release deleted the claim another node holds now")
	}
	m2.Close() // revokes its lease: its claim goes with it, at once
	start := time.Now()
	if _, ok, err := m1.Claim(ctx, "orders-0", 100, 199); err != nil || !ok {
		t.Fatalf("a claim of a closed node's segment: %v %v", ok, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a closed node's claim held the segment for %s", d)
	}
	rel2()
	// The key an operator reads.
	resp, err := h.cli.Get(ctx, h.prefix+"/claims/orders-0/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != h.prefix+"/claims/orders-0/00000000000000000100" ||
		!strings.Contains(string(resp.Kvs[0].Value), `"node":1`) || !strings.Contains(string(resp.Kvs[0].Value), `"end_offset":199`) {
		t.Fatalf("claim keys: %v %v", resp, err)
	}
}
