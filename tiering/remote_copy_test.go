package tiering

import (
	"context"
	"errors"
	"testing"

	"strata/catalog"
	"strata/engine/record"
	"strata/engine/store/storetest"
	"strata/tiering/objstore/local"
)

// remoteCopy stands for another node's copy of segment 0 (cmd rebuilds it
// from a peer's records; here it is that node's file): the one copy the
// job must read, checked against the checksum the cluster sealed.
type remoteCopy struct {
	local    LocalReplica
	path     string
	checksum uint32
	size     int64
	records  uint64
	opened   int
	removed  int
}

func (r *remoteCopy) SegmentCopy(ctx context.Context, shard string, s catalog.Segment) (Copy, error) {
	if s.No != 0 {
		return r.local.SegmentCopy(ctx, shard, s)
	}
	return Copy{Checksum: r.checksum, Remote: true, Open: func(context.Context) (CopyFile, error) {
		r.opened++
		return CopyFile{Path: r.path, Size: r.size, Records: r.records, Remove: func() { r.removed++ }}, nil
	}}, nil
}

// A node whose own copy of segment 0 differs from the sealed one tiers it
// from a remote copy: uploaded when the remote bytes have the sealed
// checksum (the object, its manifest entry and the node's catalog then
// describe the sealed segment, not the node's copy), refused with nothing
// uploaded when they do not, and adopted without fetching when a verified
// node tiered it first. The fetched file is removed either way.
func TestRemoteCopyIsCheckedAgainstTheSeal(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		verifiedFirst, wrongCopy bool
		uploaded, adopted, errs  int
		opened                   int
	}{
		{name: "remote copy agrees with the seal", uploaded: 1, opened: 1},
		{name: "remote copy differs from the seal", wrongCopy: true, errs: 1, opened: 1},
		{name: "a verified node tiered it first", verifiedFirst: true, adopted: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			lb, _ := local.New(t.TempDir())
			verified, damaged := newRig(t, lb, t.TempDir()), newRig(t, lb, t.TempDir())
			want := produce(t, verified.engine, "orders-0", 30)
			segs := copySealed(t, verified, damaged, "orders-0", func(no int, recs []record.Record) {
				if no == 0 {
					recs[3].Value = []byte("not the sealed bytes")
				}
			})
			own, _ := damaged.catalog().Segments("orders-0")
			if own[0].Checksum == segs[0].Checksum {
				t.Fatal("the damaged node's copy has the sealed checksum")
			}
			rc := &remoteCopy{local: LocalReplica{damaged.engine}, path: verified.engine.SegmentPath("orders-0", 0),
				checksum: segs[0].Checksum, size: segs[0].Size, records: segs[0].Records}
			if tc.wrongCopy {
				rc.path = damaged.engine.SegmentPath("orders-0", 0)
			}
			damaged.job.Replicas = rc
			if tc.verifiedFirst {
				verified.job.Policy.LocalRetention = 1 << 62 // it keeps its copy
				if sum, err := verified.job.Run(ctx); err != nil || len(sum.Errors) > 0 {
					t.Fatal(err, sum.Errors)
				}
			}
			sum, err := damaged.job.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var up0, ad0 int
			for _, u := range sum.Uploaded {
				if u.Segment == 0 {
					up0++
				}
			}
			for _, u := range sum.Adopted {
				if u.Segment == 0 {
					ad0++
				}
			}
			if up0 != tc.uploaded || ad0 != tc.adopted || len(sum.Errors) != tc.errs || rc.opened != tc.opened || rc.removed != tc.opened {
				t.Fatalf("segment 0: %d uploaded, %d adopted, errors %v; remote copy opened %d, removed %d times; want %d, %d, %d errors, %d",
					up0, ad0, sum.Errors, rc.opened, rc.removed, tc.uploaded, tc.adopted, tc.errs, tc.opened)
			}
			got, _ := damaged.catalog().Segments("orders-0")
			m, _ := readManifest(ctx, lb, Location{"orders", 0}.ManifestKey("data"))
			if tc.errs > 0 {
				if !errors.Is(sum.Errors[0], record.ErrCorrupt) || got[0].State != catalog.Sealed || countObjects(t, lb) != 0 || len(m.Objects) != 0 {
					t.Fatalf("a refused copy: %v; segment 0 %s; %d objects, manifest %+v", sum.Errors[0], got[0].State, countObjects(t, lb), m.Objects)
				}
				return
			}
			if got[0].State != catalog.Remote || got[0].Checksum != segs[0].Checksum {
				t.Fatalf("damaged node's segment 0: %s, crc32c %08x; want remote with the sealed %08x", got[0].State, got[0].Checksum, segs[0].Checksum)
			}
			if e, ok := m.entry(segs[0].StartOffset, segs[0].EndOffset); !ok || e.SegmentChecksum != segs[0].Checksum {
				t.Fatalf("manifest entry for segment 0: %+v, want crc32c %08x", e, segs[0].Checksum)
			}
			if _, err := damaged.job.verify(ctx, got[0].ObjectKey, segs[0]); err != nil {
				t.Fatalf("the object does not describe the sealed segment: %v", err)
			}
			end := segs[0].EndOffset + 1
			storetest.Equal(t, storetest.ReadAll(t, damaged.engine, "orders-0", 0)[:end], want[:end])
		})
	}
}
