package tiering

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"strata/catalog"
	"strata/catalog/pebblecat"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/engine/store/storetest"
	"strata/internal/testsvc"
	"strata/parquet"
	"strata/tiering/objstore"
	"strata/tiering/objstore/hdfs"
	"strata/tiering/objstore/local"
	"strata/tiering/objstore/s3"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// backends opens a fresh, empty bucket on each real backend.
var backends = map[string]func(t *testing.T) objstore.Bucket{
	"local": func(t *testing.T) objstore.Bucket {
		b, err := local.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	},
	"s3": func(t *testing.T) objstore.Bucket {
		m := testsvc.StartMinIO(t)
		b, err := s3.New(s3.Config{Endpoint: m.Endpoint, Bucket: m.Bucket(t, "strata-tiering-test"), Prefix: testsvc.UniquePrefix(t),
			AccessKey: m.AccessKey, SecretKey: m.SecretKey})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	},
	"hdfs": func(t *testing.T) objstore.Bucket {
		b, err := hdfs.New(hdfs.Config{NameNodes: []string{testsvc.StartHDFS(t)}, Root: "/" + testsvc.UniquePrefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	},
}

type rig struct {
	dir    string
	engine *segment.Engine
	cat    catalog.Catalog
	bucket objstore.Bucket
	job    *Job
	cold   *ColdReader
	closed bool
}

// shared puts every shard of the rig's engine in the shared files
// (strata.file.model=shared).
func shared(c *segment.Config) { c.FileModel = func(string) string { return segment.ModelShared } }

// modelOpts are the rig options of a file model.
func modelOpts(model string) []func(*segment.Config) {
	if model == segment.ModelShared {
		return []func(*segment.Config){shared}
	}
	return nil
}

// segmentBytes is a rig option: segments of n bytes.
func segmentBytes(n int64) func(*segment.Config) {
	return func(c *segment.Config) { c.MaxSegmentBytes = n }
}

// newRig opens the engine in dir with the catalog in dir/catalog listening
// to it, as cmd wires them; opts change the engine's config.
func newRig(t *testing.T, bucket objstore.Bucket, dir string, opts ...func(*segment.Config)) *rig {
	cat, err := pebblecat.Open(filepath.Join(dir, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := segment.Config{Dir: dir, Workers: 2, MaxSegmentBytes: 16 << 10, RollCheckInterval: 10, Logger: quiet,
		Events: Listen(cat, bucket, "data", quiet)}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := segment.Open(cfg)
	if err != nil {
		cat.Close()
		t.Fatal(err)
	}
	r := &rig{dir: dir, engine: e, cat: cat, bucket: bucket}
	r.job = &Job{Engine: e, Catalog: cat, Bucket: bucket, Prefix: "data", Log: quiet,
		Parquet: parquet.Options{RowGroupBytes: 4 << 10}}
	r.cold = NewColdReader(cat, bucket, 0)
	e.SetColdSource(r.cold)
	t.Cleanup(r.close)
	return r
}

// catalog returns the catalog once it has heard of everything the engine did.
func (r *rig) catalog() catalog.Catalog {
	r.engine.SyncEvents()
	return r.cat
}

func (r *rig) close() {
	if !r.closed {
		r.closed = true
		r.engine.Close()
		r.cat.Close()
	}
}

func produce(t *testing.T, e *segment.Engine, shard string, batches int) []record.Record {
	ctx := context.Background()
	if err := e.CreateShard(ctx, shard); err != nil && !errors.Is(err, store.ErrShardExists) {
		t.Fatal(err)
	}
	var all []record.Record
	for i := 0; i < batches; i++ {
		recs := storetest.Records(20, i)
		base, err := e.Append(ctx, shard, append([]record.Record(nil), recs...))
		if err != nil {
			t.Fatal(err)
		}
		for j := range recs {
			recs[j].Offset = base + uint64(j)
		}
		all = append(all, recs...)
	}
	return all
}

// Produce, seal, tier, drop the local copies, and read every offset back
// byte-identical through the engine's ordinary read, on every backend.
func TestTierAndReadBack(t *testing.T) {
	for name, open := range backends {
		for _, model := range []string{"partition", segment.ModelShared} {
			t.Run(name+"/"+model, func(t *testing.T) { tierAndReadBack(t, open, model) })
		}
	}
}

// tierAndReadBack is TestTierAndReadBack on one backend, for one file
// model: a shard in the shared files tiers to the same objects.
func tierAndReadBack(t *testing.T, open func(t *testing.T) objstore.Bucket, model string) {
	opts := modelOpts(model)
	ctx := context.Background()
	r := newRig(t, open(t), t.TempDir(), opts...)
	want := produce(t, r.engine, "orders-3", 40)
	sum, err := r.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 {
		t.Fatalf("run: %v %v", err, sum.Errors)
	}
	segs, _ := r.catalog().Segments("orders-3")
	sealed := len(segs) - 1
	if sealed < 3 || len(sum.Uploaded) != sealed || sum.DroppedLocal != sealed {
		t.Fatalf("%d segments sealed; run uploaded %d, dropped %d local copies", sealed, len(sum.Uploaded), sum.DroppedLocal)
	}
	for _, s := range segs[:sealed] {
		if s.State != catalog.Remote || !strings.HasPrefix(s.ObjectKey, "data/topic=orders/partition=3/") {
			t.Fatalf("segment %d: %s at %q", s.No, s.State, s.ObjectKey)
		}
	}
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "orders-3", 0), want)
	mid := segs[1].StartOffset + 3
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "orders-3", mid), want[mid:])
	// Point reads decode just their rows; across row groups and segments too.
	for _, off := range []uint64{0, 1, 57, segs[1].StartOffset - 1, segs[1].StartOffset, segs[sealed].StartOffset - 2} {
		got, err := r.engine.Read(ctx, "orders-3", off, store.Budget{MaxRecords: 3})
		if err != nil {
			t.Fatalf("point read at %d: %v", off, err)
		}
		storetest.Equal(t, got, want[off:off+3])
	}
	// Read by time crosses from cold to local exactly as it did while hot.
	for _, i := range []int{0, 17, int(segs[1].StartOffset) + 5, len(want) - 1} {
		got, err := r.engine.OffsetForTime(ctx, "orders-3", want[i].Timestamp)
		expect := uint64(0)
		for expect < uint64(len(want)) && want[expect].Timestamp < want[i].Timestamp {
			expect++
		}
		if err != nil || got != expect {
			t.Fatalf("OffsetForTime(%d) = %d, %v; want %d", want[i].Timestamp, got, err, expect)
		}
	}
	if r.cold.Fetches.Load() == 0 {
		t.Fatal("no ranged reads reached the bucket: the reads did not go to the cold tier")
	}

	// The objects are plain Parquet, readable straight from the bucket.
	var rows int64
	err = r.bucket.List(ctx, "data/", func(a objstore.Attrs) error {
		if !strings.HasSuffix(a.Name, ".parquet") {
			return nil
		}
		f, err := parquet.Open(ObjectReader(ctx, r.bucket, a.Name), a.Size)
		if err != nil {
			return err
		}
		rows += f.Rows()
		return nil
	})
	if err != nil || rows != int64(segs[sealed].StartOffset) {
		t.Fatalf("objects in the bucket hold %d rows (%v), want %d", rows, err, segs[sealed].StartOffset)
	}
	m, err := readManifest(ctx, r.bucket, Location{"orders", 3}.ManifestKey("data"))
	if err != nil || len(m.Objects) != sealed || m.Objects[0].StartOffset != 0 {
		t.Fatalf("manifest: %+v, %v", m, err)
	}

	// After a restart the cold tier still answers.
	r.close()
	r2 := newRig(t, r.bucket, r.dir, opts...)
	storetest.Equal(t, storetest.ReadAll(t, r2.engine, "orders-3", 0), want)
	if model == segment.ModelShared {
		if m, _ := filepath.Glob(filepath.Join(r.dir, "orders-3", "*.msg")); len(m) > 0 {
			t.Fatalf("the shared shard has segment files of its own: %v", m)
		}
	}
}

// A point read with the footer cached fetches the pages holding its
// record, not its row group; a scan reads the same records in whole runs.
func TestColdPointReadFetchesItsPages(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, backends["local"](t), t.TempDir(), segmentBytes(1<<20))
	r.job.Parquet = parquet.Options{RowGroupBytes: 16 << 10, PageBytes: 2 << 10}
	want := produce(t, r.engine, "orders-1", 600)
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 {
		t.Fatalf("run: %v %v", err, sum.Errors)
	}
	segs, _ := r.catalog().Segments("orders-1")
	s := segs[0]
	if s.State != catalog.Remote {
		t.Fatalf("segment 0 is %s", s.State)
	}
	cold := NewColdReader(r.cat, r.bucket, 1) // no row group fits the cache
	r.engine.SetColdSource(cold)
	if _, err := r.engine.Read(ctx, "orders-1", s.StartOffset, store.Budget{MaxRecords: 1}); err != nil {
		t.Fatal(err)
	}
	for _, off := range []uint64{s.StartOffset + 1, (s.StartOffset + s.EndOffset) / 2, s.EndOffset} {
		f0, b0 := cold.Fetches.Load(), cold.FetchedBytes.Load()
		got, err := r.engine.Read(ctx, "orders-1", off, store.Budget{MaxRecords: 1})
		if err != nil {
			t.Fatal(err)
		}
		storetest.Equal(t, got, want[off:off+1])
		fetches, fetched := cold.Fetches.Load()-f0, cold.FetchedBytes.Load()-b0
		if fetches < 1 || fetches > 2 || fetched*2 > 16<<10 { // format 2: the small columns, then the value page
			t.Fatalf("point read at %d fetched %d bytes in %d reads (16 KiB row groups)", off, fetched, fetches)
		}
	}
	// A scan whose cache makes runs of a few row groups, read ahead in order.
	scan := NewColdReader(r.cat, r.bucket, 1<<20)
	r.engine.SetColdSource(scan)
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "orders-1", 0), want)
	if groups := s.ObjectSize / (16 << 10); scan.Fetches.Load() > int64(len(segs))*2+groups/2 {
		t.Fatalf("the scan made %d ranged reads; row groups of segment 0 alone: %d", scan.Fetches.Load(), groups)
	}
}

// A cold read lists the catalog a window of segments at a time: one read
// with room for everything crosses many windows, in order, and a read by
// time finds a record far past the first window.
func TestColdReadAcrossManySegments(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, backends["local"](t), t.TempDir(), segmentBytes(2<<10))
	defer r.close()
	want := produce(t, r.engine, "clicks-0", 60)
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 {
		t.Fatalf("run: %v %v", err, sum.Errors)
	}
	segs, _ := r.catalog().Segments("clicks-0")
	remote := 0
	for _, s := range segs {
		if s.State == catalog.Remote {
			remote++
		}
	}
	if remote < 3*segmentWindow {
		t.Fatalf("%d segments in the cold tier, want at least %d to cross windows", remote, 3*segmentWindow)
	}
	cold := segs[remote-1].EndOffset + 1 // every offset below is only in the bucket
	got, err := r.cold.Read(ctx, "clicks-0", 0, store.Budget{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Equal(t, got, want[:cold])
	mid := segs[segmentWindow+3].StartOffset + 1
	got, err = r.cold.Read(ctx, "clicks-0", mid, store.Budget{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Equal(t, got, want[mid:cold])
	for _, i := range []uint64{1, mid, cold - 1} {
		off, ok, err := r.cold.OffsetForTime(ctx, "clicks-0", 0, want[i].Timestamp)
		expect := uint64(0)
		for want[expect].Timestamp < want[i].Timestamp {
			expect++
		}
		if err != nil || !ok || off != expect {
			t.Fatalf("OffsetForTime(%d) = %d, %v, %v; want %d", want[i].Timestamp, off, ok, err, expect)
		}
	}
}
