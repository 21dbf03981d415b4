package e2e

import (
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"strata/engine/record"
	"strata/internal/testsvc"
	"strata/parquet"
	"strata/tiering"
)

// A node whose copy of a sealed segment did not agree at the seal (left
// out of the segment's replicas in sealed/) tiers it, once no verified
// replica has within tiering.replica_grace, from a verified replica's copy
// read over the Kafka listener: the object in the bucket holds the sealed
// bytes, never the damaged node's, and every record reads back from the
// bucket through the leader.
func TestTieringFromARemoteReplicaCopy(t *testing.T) {
	shared := t.TempDir()
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"tiering.enabled=true", "tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s",
			"tiering.orphan_grace=1h", "tiering.replica_grace=2s", "segment.max_bytes=4KiB", "segment.roll_check_interval=5",
			"cold.local.dir=" + shared, "cluster.replica_lag_time_max=2s"}}
	for id := int32(1); id <= 3; id++ {
		c.add(id)
	}
	two := "2"
	createReplicated(t, c, "remote", 1, 3, map[string]*string{"min.insync.replicas": &two})
	c.waitISR(1, "remote", 3)
	leaders, _ := c.isrs(1, "remote")
	leader := leaders[0]
	victim := leader%3 + 1
	want := c.produce(leader, "remote", []int32{0}, 40, "a")[0]

	// Damage the victim's active segment in the middle of what it holds:
	// its copy of that segment no longer agrees when it is sealed.
	// A segment that has just rolled holds too little: write more.
	dir := filepath.Join(c.nodes[victim].Dir(), "remote-0")
	var f *os.File
	var fi os.FileInfo
	for try := 0; ; try++ {
		active := lastSegmentFile(t, dir)
		var err error
		if f, err = os.OpenFile(active, os.O_RDWR, 0); err != nil {
			t.Fatal(err)
		}
		if fi, _ = f.Stat(); fi.Size() >= 100 {
			break
		}
		f.Close()
		if try == 5 {
			t.Fatalf("node %d's active segment %s holds %d bytes; want some to damage", victim, active, fi.Size())
		}
		want = append(want, c.produce(leader, "remote", []int32{0}, 5, fmt.Sprintf("more%d", try))[0]...)
	}
	b := make([]byte, 1)
	f.ReadAt(b, fi.Size()/2)
	b[0] ^= 0xff
	f.WriteAt(b, fi.Size()/2)
	f.Close()
	for round := range 4 {
		want = append(want, c.produce(leader, "remote", []int32{0}, 50, fmt.Sprintf("b%d", round))[0]...)
	}

	// Every segment the leader sealed is recorded; at least one leaves
	// the victim out.
	var seals map[uint64]sealRecord
	deadline := time.Now().Add(30 * time.Second)
	for {
		seals = c.seals("remote", 0)
		mine := c.sealedHere(leader, "remote")
		done := len(mine) >= 2
		for s := range mine {
			if _, ok := seals[s]; !ok {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader sealed %d segments, %d are recorded in etcd", len(mine), len(seals))
		}
		time.Sleep(200 * time.Millisecond)
	}
	here := c.sealedHere(victim, "remote")
	var damaged []sealRecord
	for _, s := range seals {
		if !slices.Contains(s.Replicas, victim) {
			if cp, ok := here[s.Start]; !ok || cp.CRC == s.CRC {
				t.Fatalf("segment at %d leaves node %d out of its replicas %v, but its copy is %+v (sealed crc %08x)", s.Start, victim, s.Replicas, cp, s.CRC)
			}
			damaged = append(damaged, s)
		}
	}
	if len(damaged) == 0 {
		t.Fatalf("no sealed segment left node %d out after its copy was damaged: %v", victim, seals)
	}

	// Only the victim tiers, once the grace is over: it uploads every
	// segment, the damaged ones from a verified replica's copy.
	time.Sleep(3 * time.Second)
	run := c.tierRun(victim)
	uploaded := map[string]bool{}
	for _, u := range run.Uploaded {
		uploaded[u.Key] = true
	}
	for _, s := range damaged {
		key := fmt.Sprintf("topic=remote/partition=0/%020d-%020d.parquet", s.Start, s.Last)
		if !uploaded[key] {
			t.Fatalf("node %d's run uploaded %v, not %s (its copy damaged, sealed without it)", victim, run.Uploaded, key)
		}
		// The object holds the sealed bytes: its records, encoded as
		// stored, have the sealed checksum, not the victim's copy's.
		path := filepath.Join(shared, filepath.FromSlash(key))
		crc, n, meta := objectChecksum(t, path)
		if crc != s.CRC || meta != strconv.FormatUint(uint64(s.CRC), 10) {
			t.Errorf("%s: its %d records have crc32c %08x and its footer says %s; the segment was sealed with %08x (node %d's damaged copy: %08x)",
				key, n, crc, meta, s.CRC, victim, here[s.Start].CRC)
		}
		if n != s.Last-s.Start+1 {
			t.Errorf("%s holds %d records, the segment %d", key, n, s.Last-s.Start+1)
		}
	}
	if n := c.metric(victim, `strata_tiering_remote_copies_total{result="done"}`); n != float64(len(damaged)) {
		t.Errorf("node %d counts %v remote copies done, want %d", victim, n, len(damaged))
	}
	if left, _ := os.ReadDir(filepath.Join(c.nodes[victim].Dir(), "tiering-copies")); len(left) > 0 {
		t.Errorf("node %d left %d rebuilt copies behind after the upload", victim, len(left))
	}

	// The leader finds every segment in the bucket (adopted, not uploaded
	// again), drops its local copies, and reads them back from the bucket.
	lrun := c.tierRun(leader)
	if len(lrun.Uploaded) > 0 {
		t.Fatalf("the leader uploaded %v after node %d tiered every sealed segment", lrun.Uploaded, victim)
	}
	still := c.sealedHere(leader, "remote")
	for _, s := range damaged {
		if _, ok := still[s.Start]; ok {
			t.Errorf("the leader still holds its local copy of the segment at %d after adopting the object", s.Start)
		}
	}
	got := c.consume(leader, "remote", len(want))
	if !slices.Equal(got[0], want) {
		t.Fatalf("read back %d records through the leader, want the %d produced", len(got[0]), len(want))
	}
	t.Logf("node %d's copies of %d segments were damaged; it tiered them from verified replicas' copies", victim, len(damaged))
}

// lastSegmentFile is the highest numbered segment file in a shard folder.
func lastSegmentFile(t *testing.T, dir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.msg"))
	if len(files) == 0 {
		t.Fatalf("%s holds no segment files", dir)
	}
	no := func(p string) uint64 {
		n, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".msg"), 10, 64)
		return n
	}
	slices.SortFunc(files, func(a, b string) int { return int(no(a)) - int(no(b)) })
	return files[len(files)-1]
}

// objectChecksum reads a Parquet object's records and gives the CRC-32C of
// them encoded as a segment file holds them, their count, and the segment
// checksum its footer records.
func objectChecksum(t *testing.T, path string) (uint32, uint64, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	pf, err := parquet.Open(f, fi.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var n uint64
	for i := range pf.Groups() {
		recs, err := pf.ReadGroup(i)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for j := range recs {
			b, err := record.Append(nil, &recs[j])
			if err != nil {
				t.Fatal(err)
			}
			crc.Write(b)
			n++
		}
	}
	meta, _ := pf.Lookup(tiering.MetaSegmentCRC32C)
	return crc.Sum32(), n, meta
}
