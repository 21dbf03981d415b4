package tiering

import (
	"testing"
	"time"

	"strata/catalog"
)

func TestPlanShard(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	seg := func(no uint64, st catalog.State, sealed, tiered time.Duration, size int64) catalog.Segment {
		return catalog.Segment{No: no, State: st, SealedAt: ago(sealed), TieredAt: ago(tiered), UploadStarted: ago(sealed), Size: size}
	}
	// old is a segment whose newest record is age old, sealed and tiered then.
	old := func(no uint64, st catalog.State, age time.Duration, size int64) catalog.Segment {
		return catalog.Segment{No: no, State: st, SealedAt: ago(age), TieredAt: ago(age), UploadStarted: now, Size: size, MaxTimestamp: ago(age).UnixMilli()}
	}
	// at is a segment of offsets start to end, sealed an hour ago, an
	// upload of it begun now.
	at := func(no uint64, st catalog.State, start, end uint64) catalog.Segment {
		return catalog.Segment{No: no, State: st, StartOffset: start, EndOffset: end, SealedAt: ago(time.Hour), UploadStarted: now, Size: 5}
	}
	nos := func(segs []catalog.Segment) []uint64 {
		var out []uint64
		for _, s := range segs {
			out = append(out, s.No)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		segs      []catalog.Segment
		p         Policy
		upload    []uint64
		dropLocal []uint64
		expire    []uint64
	}{
		{"nothing sealed", []catalog.Segment{seg(0, catalog.Active, 0, 0, 10)}, Policy{}, nil, nil, nil},
		{"sealed and old enough",
			[]catalog.Segment{seg(0, catalog.Sealed, time.Hour, 0, 10), seg(1, catalog.Sealed, time.Minute, 0, 10), seg(2, catalog.Active, 0, 0, 5)},
			Policy{MinSealedAge: 30 * time.Minute}, []uint64{0}, nil, nil},
		{"over the local byte budget, young segments go too",
			[]catalog.Segment{seg(0, catalog.Sealed, time.Minute, 0, 100), seg(1, catalog.Sealed, time.Minute, 0, 100), seg(2, catalog.Sealed, time.Minute, 0, 100), seg(3, catalog.Active, 0, 0, 5)},
			Policy{MinSealedAge: time.Hour, LocalBytes: 150}, []uint64{0, 1}, nil, nil},
		{"a crashed upload is resumed once stale",
			[]catalog.Segment{seg(0, catalog.Uploading, time.Hour, 0, 10), seg(1, catalog.Uploading, time.Second, 0, 10), seg(2, catalog.Active, 0, 0, 5)},
			Policy{StaleUpload: time.Minute}, []uint64{0}, nil, nil},
		{"on one node an upload recorded before the run began is resumed at once",
			[]catalog.Segment{seg(0, catalog.Uploading, time.Second, 0, 10), seg(1, catalog.Sealed, time.Hour, 0, 10), seg(2, catalog.Active, 0, 0, 5)},
			Policy{StaleUpload: time.Minute, StaleBefore: now}, []uint64{0, 1}, nil, nil},
		{"an upload begun since the run began is not",
			[]catalog.Segment{seg(0, catalog.Uploading, time.Second, 0, 10), seg(1, catalog.Active, 0, 0, 5)},
			Policy{StaleUpload: time.Minute, StaleBefore: ago(time.Minute)}, nil, nil, nil},
		{"local copies drop oldest first after retention",
			[]catalog.Segment{seg(0, catalog.Remote, 0, 0, 10), seg(1, catalog.Cold, 0, 2*time.Hour, 10), seg(2, catalog.Cold, 0, 2*time.Hour, 10), seg(3, catalog.Cold, 0, time.Minute, 10), seg(4, catalog.Active, 0, 0, 5)},
			Policy{LocalRetention: time.Hour}, nil, []uint64{1, 2}, nil},
		{"a sealed segment ahead stops the drop",
			[]catalog.Segment{seg(0, catalog.Sealed, time.Minute, 0, 10), seg(1, catalog.Cold, 0, 2*time.Hour, 10), seg(2, catalog.Active, 0, 0, 5)},
			Policy{MinSealedAge: time.Hour}, nil, nil, nil},
		{"remote retention expires the oldest remote segments",
			[]catalog.Segment{{No: 0, State: catalog.Deleted}, {No: 1, State: catalog.Remote, MaxTimestamp: ago(72 * time.Hour).UnixMilli()},
				{No: 2, State: catalog.Remote, MaxTimestamp: ago(time.Hour).UnixMilli()}, seg(3, catalog.Active, 0, 0, 5)},
			Policy{RemoteRetention: 24 * time.Hour}, nil, nil, []uint64{1}},
		// Retention bounds the whole log, local and cold (KIP-405).
		{"tiering behind: untiered segments within total retention wait for their upload",
			[]catalog.Segment{old(0, catalog.Sealed, 2*time.Hour, 100), old(1, catalog.Sealed, time.Hour, 100), seg(2, catalog.Active, 0, 0, 5)},
			Policy{MinSealedAge: 24 * time.Hour, RetentionMaxAge: 7 * 24 * time.Hour, RetentionMaxBytes: 1000}, nil, nil, nil},
		{"past total age: every tier goes, oldest first, uploaded or not",
			[]catalog.Segment{old(0, catalog.Remote, 9*24*time.Hour, 100), old(1, catalog.Cold, 8*24*time.Hour, 100), old(2, catalog.Sealed, 8*24*time.Hour, 100),
				old(3, catalog.Sealed, time.Hour, 100), seg(4, catalog.Active, 0, 0, 5)},
			Policy{RetentionMaxAge: 7 * 24 * time.Hour}, []uint64{3}, nil, []uint64{0, 1, 2}},
		{"past total bytes: the oldest go until the log fits, remote first",
			[]catalog.Segment{old(0, catalog.Remote, 3*time.Hour, 100), old(1, catalog.Remote, 2*time.Hour, 100), old(2, catalog.Cold, time.Hour, 100),
				old(3, catalog.Sealed, time.Minute, 100), seg(4, catalog.Active, 0, 0, 0)},
			Policy{RetentionMaxBytes: 250, LocalRetention: 2 * time.Hour}, []uint64{3}, nil, []uint64{0, 1}},
		{"an expiring local segment holds back the drops behind it until it is gone",
			[]catalog.Segment{old(0, catalog.Sealed, 9*24*time.Hour, 100), old(1, catalog.Cold, time.Hour, 100), seg(2, catalog.Active, 0, 0, 5)},
			Policy{RetentionMaxAge: 24 * time.Hour}, nil, nil, []uint64{0}},
		// A node runs one job at a time: an upload the planner sees is one a
		// dead run left, and stopping at it kept everything behind it.
		{"an interrupted upload past retention expires, and those behind it",
			[]catalog.Segment{old(0, catalog.Uploading, 9*24*time.Hour, 100), old(1, catalog.Sealed, 9*24*time.Hour, 100), seg(2, catalog.Active, 0, 0, 5)},
			Policy{RetentionMaxAge: 24 * time.Hour, StaleUpload: 1000 * time.Hour}, nil, nil, []uint64{0, 1}},
		{"an interrupted upload below the log start expires, and those behind it",
			[]catalog.Segment{at(0, catalog.Uploading, 0, 99), at(1, catalog.Sealed, 100, 199), at(2, catalog.Sealed, 200, 299), at(3, catalog.Active, 300, 0)},
			Policy{LogStart: 250, StaleUpload: 1000 * time.Hour}, []uint64{2}, nil, []uint64{0, 1}},
		// A topic's remote.storage.enable=false: nothing is uploaded,
		// retention still applies.
		{"remote storage off: nothing uploads, retention still expires",
			[]catalog.Segment{old(0, catalog.Sealed, 9*24*time.Hour, 100), old(1, catalog.Sealed, 2*time.Hour, 100), seg(2, catalog.Active, 0, 0, 5)},
			Policy{NoUpload: true, RetentionMaxAge: 24 * time.Hour}, nil, nil, []uint64{0}},
		// local.retention.bytes: uploaded copies go, oldest first, while the
		// local segments are over it, however recent their upload.
		{"local bytes over local.retention.bytes: the oldest uploaded copies go",
			[]catalog.Segment{seg(0, catalog.Cold, 0, time.Minute, 100), seg(1, catalog.Cold, 0, time.Minute, 100), seg(2, catalog.Cold, 0, time.Minute, 100), seg(3, catalog.Active, 0, 0, 50)},
			Policy{LocalRetention: 24 * time.Hour, LocalRetentionBytes: 200}, nil, []uint64{0, 1}, nil},
		{"local bytes over, but only an un-uploaded copy is left to go: it stays",
			[]catalog.Segment{seg(0, catalog.Sealed, time.Minute, 0, 500), seg(1, catalog.Active, 0, 0, 50)},
			Policy{MinSealedAge: time.Hour, LocalRetentionBytes: 100}, nil, nil, nil},
	} {
		plan := PlanShard(now, tc.segs, tc.p)
		if got := nos(plan.Upload); !equal(got, tc.upload) {
			t.Errorf("%s: upload %v, want %v", tc.name, got, tc.upload)
		}
		if got := nos(plan.DropLocal); !equal(got, tc.dropLocal) {
			t.Errorf("%s: drop local %v, want %v", tc.name, got, tc.dropLocal)
		}
		if got := nos(plan.Expire); !equal(got, tc.expire) {
			t.Errorf("%s: expire %v, want %v", tc.name, got, tc.expire)
		}
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLayout(t *testing.T) {
	l, err := LocationOf("clicks.v2-17")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.ObjectKey("strata", 0, 999); got != "strata/topic=clicks.v2/partition=17/00000000000000000000-00000000000000000999.parquet" {
		t.Fatalf("object key %q", got)
	}
	if got := l.ManifestKey(""); got != "topic=clicks.v2/partition=17/_strata_manifest.json" {
		t.Fatalf("manifest key %q", got)
	}
	for _, bad := range []string{"nopartition", "t-x", "-3"} {
		if _, err := LocationOf(bad); err == nil {
			t.Errorf("LocationOf(%q) succeeded", bad)
		}
	}
}
