package tiering

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"strata/catalog"
	"strata/engine/integrity"
	"strata/engine/record"
	"strata/engine/store"
	"strata/engine/store/storetest"
	"strata/parquet"
	"strata/tiering/objstore"
)

// readObject reads a whole object straight from the bucket.
func readObject(t *testing.T, b objstore.Bucket, key string) []byte {
	t.Helper()
	a, err := b.Stat(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, a.Size)
	if n, err := b.ReadAt(context.Background(), key, buf, 0); err != nil && !(errors.Is(err, io.EOF) && n == len(buf)) {
		t.Fatal(err)
	}
	return buf
}

// The faults the cold scrub must find, each made on the real backend by
// writing over the object (or deleting it) behind strata's back.
var coldFaults = map[string]func(t *testing.T, b objstore.Bucket, key string){
	"delete": func(t *testing.T, b objstore.Bucket, key string) {
		if err := b.Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	},
	"truncate": func(t *testing.T, b objstore.Bucket, key string) {
		buf := readObject(t, b, key)
		if err := b.Upload(context.Background(), key, bytes.NewReader(buf[:len(buf)/2])); err != nil {
			t.Fatal(err)
		}
	},
	"flip": func(t *testing.T, b objstore.Bucket, key string) {
		buf := readObject(t, b, key)
		buf[len(buf)/3] ^= 0x40 // inside the pages: the footer still describes the segment
		if err := b.Upload(context.Background(), key, bytes.NewReader(buf)); err != nil {
			t.Fatal(err)
		}
	},
}

// The cold scrub finds an object deleted, one cut short and one with a
// byte flipped in its pages, uploads each again from the local copy, and
// reports the one whose local copy is gone; the repaired offsets read back
// through the cold reader and as Parquet, the lost ones answer a
// corruption error naming the object. On the local folder and MinIO.
func TestColdScrubFindsAndRepairs(t *testing.T) {
	for _, name := range []string{"local", "s3"} {
		t.Run(name, func(t *testing.T) { coldScrubFindsAndRepairs(t, backends[name](t)) })
	}
}

// tieredKeepingLocal produces batches to orders-0 and tiers them (at least
// minUploads objects), keeping the local copies: they are what repairs.
func tieredKeepingLocal(t *testing.T, b objstore.Bucket, batches, minUploads int) (*rig, []record.Record) {
	t.Helper()
	r := newRig(t, b, t.TempDir())
	r.job.Policy.LocalRetention = time.Hour
	want := produce(t, r.engine, "orders-0", batches)
	if sum, err := r.job.Run(context.Background()); err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) < minUploads {
		t.Fatalf("run: %d uploaded, %v %v", len(sum.Uploaded), err, sum.Errors)
	}
	return r, want
}

func coldScrubFindsAndRepairs(t *testing.T, b objstore.Bucket) {
	ctx := context.Background()
	r, want := tieredKeepingLocal(t, b, 60, 5)
	segs, _ := r.catalog().Segments("orders-0")
	// Segment 0 loses its local copy: nothing here can replace its object.
	if err := r.job.dropLocal(ctx, "orders-0", segs[0]); err != nil {
		t.Fatal(err)
	}
	before := map[string][]byte{}
	for _, s := range segs[1:4] {
		before[s.ObjectKey] = readObject(t, b, s.ObjectKey)
	}
	cases := []struct {
		seg       catalog.Segment
		fault     string
		problem   ColdProblem
		state     string
		inMessage string
	}{
		{segs[0], "delete", ColdMissing, ColdUnrepairable, "remote: no local copy"},
		{segs[1], "delete", ColdMissing, ColdRepaired, "local copy"},
		{segs[2], "truncate", ColdSize, ColdRepaired, "local copy"},
		{segs[3], "flip", ColdDamaged, ColdRepaired, "local copy"},
	}
	for _, c := range cases {
		coldFaults[c.fault](t, b, c.seg.ObjectKey)
	}

	scrub := &ColdScrubber{Job: r.job, BytesPerSecond: 64 << 20}
	sum, err := scrub.Run(ctx)
	if err != nil || len(sum.Errors) > 0 || !sum.Complete {
		t.Fatalf("scrub: %v %v complete=%v", err, sum.Errors, sum.Complete)
	}
	if sum.Checked != len(segs)-1 || sum.Bytes == 0 {
		t.Fatalf("scrub checked %d objects (%d bytes); %d are tiered", sum.Checked, sum.Bytes, len(segs)-1)
	}
	found := map[string]ColdFinding{}
	for _, f := range sum.Findings {
		found[f.Key] = f
	}
	if len(found) != len(cases) {
		t.Errorf("%d findings, want %d: %+v", len(found), len(cases), sum.Findings)
	}
	for _, c := range cases {
		f, ok := found[c.seg.ObjectKey]
		switch {
		case !ok:
			t.Errorf("%s of segment %d: not found", c.fault, c.seg.No)
		case f.Problem != c.problem || f.State != c.state || !strings.Contains(f.Detail, c.inMessage):
			t.Errorf("%s of segment %d: %s, %s (%s), want %s, %s (%q)", c.fault, c.seg.No, f.Problem, f.State, f.Detail, c.problem, c.state, c.inMessage)
		case f.StartOffset != c.seg.StartOffset || f.EndOffset != c.seg.EndOffset:
			t.Errorf("%s of segment %d: offsets %d to %d, want %d to %d", c.fault, c.seg.No, f.StartOffset, f.EndOffset, c.seg.StartOffset, c.seg.EndOffset)
		}
	}
	// A repaired object is the one uploaded first, byte for byte: the
	// manifest, the catalog and an Iceberg table name it as they did.
	for key, old := range before {
		if got := readObject(t, b, key); !bytes.Equal(got, old) {
			t.Errorf("%s repaired as %d bytes unlike the %d uploaded first", key, len(got), len(old))
		}
	}
	m, _ := readManifest(ctx, b, Location{"orders", 0}.ManifestKey("data"))
	if len(m.Objects) != len(segs)-1 {
		t.Errorf("the manifest lists %d objects after the repairs, want %d", len(m.Objects), len(segs)-1)
	}

	// A second scrub finds only what could not be repaired.
	sum, err = scrub.Run(ctx)
	if err != nil || len(sum.Findings) != 1 || sum.Findings[0].Key != segs[0].ObjectKey || sum.Findings[0].State != ColdUnrepairable {
		t.Fatalf("second scrub: %+v, %v", sum.Findings, err)
	}

	// The repaired offsets read back from the bucket: drop the local copies.
	r.job.Policy.LocalRetention = 0
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 || sum.DroppedLocal != len(segs)-2 {
		t.Fatalf("run: %d local copies dropped, %v %v", sum.DroppedLocal, err, sum.Errors)
	}
	from := segs[1].StartOffset
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "orders-0", from), want[from:])
	for _, s := range segs[1:4] {
		a, err := b.Stat(ctx, s.ObjectKey)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parquet.Open(ObjectReader(ctx, b, s.ObjectKey), a.Size)
		if err != nil {
			t.Fatal(err)
		}
		for gi := range f.Groups() {
			recs, err := f.ReadGroup(gi)
			if err != nil {
				t.Fatalf("%s row group %d: %v", s.ObjectKey, gi, err)
			}
			storetest.Equal(t, recs, want[recs[0].Offset:recs[0].Offset+uint64(len(recs))])
		}
	}
	// The lost offsets answer an error that says so (a Kafka fetch:
	// KAFKA_STORAGE_ERROR), not the bucket's "not found".
	_, err = r.engine.Read(ctx, "orders-0", segs[0].StartOffset, store.Budget{MaxRecords: 1000})
	if !errors.Is(err, ErrColdObjectLost) || !integrity.IsCorruption(err) || !strings.Contains(err.Error(), segs[0].ObjectKey) {
		t.Fatalf("a read of the lost offsets: %v; want a corruption error naming %s", err, segs[0].ObjectKey)
	}
}

// A run stops at its byte budget and the next goes on after the last
// object it checked, so a small budget still covers every object in turn.
func TestColdScrubBudgetResumes(t *testing.T) {
	ctx := context.Background()
	b := backends["local"](t)
	r := newRig(t, b, t.TempDir())
	produce(t, r.engine, "orders-0", 30)
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) < 3 {
		t.Fatalf("run: %d uploaded, %v %v", len(sum.Uploaded), err, sum.Errors)
	}
	segs, _ := r.catalog().Segments("orders-0")
	tiered := len(segs) - 1
	scrub := &ColdScrubber{Job: r.job, BudgetBytes: 1} // one object per run
	for i := range tiered {
		sum, err := scrub.Run(ctx)
		if err != nil || sum.Checked != 1 || len(sum.Findings) > 0 || sum.Complete {
			t.Fatalf("run %d: %d checked, complete %v, %+v, %v", i, sum.Checked, sum.Complete, sum.Findings, err)
		}
	}
	// The last object was checked: the next run starts again at the first.
	if sum, _ := scrub.Run(ctx); sum.Checked != 1 {
		t.Fatalf("after a full round: %d checked", sum.Checked)
	}
	// Without a budget a run checks them all, from the first: complete.
	scrub.BudgetBytes = 0
	if sum, _ := scrub.Run(ctx); sum.Checked != tiered-1 || sum.Complete {
		t.Fatalf("resumed without a budget: %d checked of the %d after the first, complete %v", sum.Checked, tiered-1, sum.Complete)
	}
	if sum, _ := scrub.Run(ctx); sum.Checked != tiered || !sum.Complete {
		t.Fatalf("a whole run: %d checked of %d, complete %v", sum.Checked, tiered, sum.Complete)
	}
}

// An object that retention expires between its check and its repair (the
// check runs beside tiering runs) is no finding: its offsets are gone on
// purpose, and nothing is uploaded again.
func TestColdScrubSkipsWhatRetentionExpired(t *testing.T) {
	ctx := context.Background()
	b := backends["local"](t)
	r, _ := tieredKeepingLocal(t, b, 30, 2)
	scrub := &ColdScrubber{Job: r.job}
	targets, err := scrub.targets(ctx, "orders-0")
	if err != nil || len(targets) < 2 {
		t.Fatalf("targets: %d, %v", len(targets), err)
	}
	segs, _ := r.catalog().Segments("orders-0")
	if err := r.job.expire(ctx, "orders-0", segs[0]); err != nil {
		t.Fatal(err)
	}
	f, _, err := scrub.check(ctx, targets[0], nil)
	if err != nil || f == nil || f.Problem != ColdMissing {
		t.Fatalf("check of the expired object: %+v, %v", f, err)
	}
	if scrub.repair(ctx, targets[0], f, nil) {
		t.Fatalf("the expired object is a finding: %+v", f)
	}
	if _, err := b.Stat(ctx, targets[0].key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the expired object was uploaded again: %v", err)
	}
}

// An object the local copy would rebuild to another size (the topic's
// Parquet options changed since its upload) is not replaced, even damaged:
// readers open it by the size the catalog, the manifest and an Iceberg
// table record. The finding waits for the next scrub.
func TestColdScrubNeverReplacesAnObjectByOneOfAnotherSize(t *testing.T) {
	ctx := context.Background()
	b := backends["local"](t)
	r, _ := tieredKeepingLocal(t, b, 30, 2)
	segs, _ := r.catalog().Segments("orders-0")
	key := segs[0].ObjectKey
	coldFaults["flip"](t, b, key)
	damaged := readObject(t, b, key)
	r.job.Parquet.Codec = map[bool]string{true: "gzip", false: "none"}[r.job.Parquet.Codec != "gzip"]
	sum, err := (&ColdScrubber{Job: r.job}).Run(ctx)
	if err != nil || len(sum.Findings) != 1 || sum.Findings[0].State != ColdRetry || !strings.Contains(sum.Findings[0].Detail, "Parquet options changed") {
		t.Fatalf("scrub: %+v, %v; want the damaged object to wait, its rebuild being another size", sum.Findings, err)
	}
	if got := readObject(t, b, key); !bytes.Equal(got, damaged) {
		t.Fatalf("the object was replaced by one of %d bytes; its manifest entry records %d", len(got), len(damaged))
	}
}
