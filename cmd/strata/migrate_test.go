package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store/storetest"
	"strata/tiering"
)

// A data folder from before the engine kept its own manifest (only the
// catalog recorded its segments) opens with every record readable and
// appends going on at the next offset.
func TestDataFolderFromBeforeTheManifest(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	open := func() (*segment.Engine, func()) {
		cat, err := openCatalog(dir)
		if err != nil {
			t.Fatal(err)
		}
		adopt := !adopted(dir)
		e, err := segment.Open(segment.Config{Dir: dir, MaxSegmentBytes: 2048, RollCheckInterval: 5, Logger: quiet,
			Events: tiering.Listen(cat, nil, "", quiet)})
		if err != nil {
			t.Fatal(err)
		}
		if adopt {
			if err := adoptCatalog(cat, e, quiet); err != nil {
				t.Fatal(err)
			}
			if err := markAdopted(dir); err != nil {
				t.Fatal(err)
			}
		}
		return e, func() { e.Close(); cat.Close() }
	}
	e, closeAll := open()
	e.CreateShard(ctx, "old-0")
	var want []record.Record
	for i := 0; i < 20; i++ {
		recs := storetest.Records(10, i)
		base, err := e.Append(ctx, "old-0", append([]record.Record(nil), recs...))
		if err != nil {
			t.Fatal(err)
		}
		for j := range recs {
			recs[j].Offset = base + uint64(j)
		}
		want = append(want, recs...)
	}
	segs, _ := e.Segments("old-0")
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test needs several", len(segs))
	}
	closeAll()
	// The old layout: no manifest, no marker. A tool that opened the
	// folder before the service (strata segment verify) made an empty
	// manifest: adoption still runs, as the marker is missing.
	for _, p := range []string{"manifest", adoptedMarker} {
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	if e, err := segment.Open(segment.Config{Dir: dir, Logger: quiet}); err != nil {
		t.Fatal(err)
	} else {
		e.Close()
	}

	e, closeAll = open()
	defer closeAll()
	storetest.Equal(t, storetest.ReadAll(t, e, "old-0", 0), want)
	if got, _ := e.Segments("old-0"); len(got) != len(segs) || got[0].Checksum != segs[0].Checksum {
		t.Fatalf("adopted %d segments, want %d with the same checksums", len(got), len(segs))
	}
	if err := e.Scrub(ctx, "old-0"); err != nil {
		t.Fatal(err)
	}
	base, err := e.Append(ctx, "old-0", storetest.Records(1, 99))
	if err != nil || base != uint64(len(want)) {
		t.Fatalf("append after adoption: base %d, %v; want %d", base, err, len(want))
	}
}
