package e2e

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A follower killed (SIGKILL) whose sealed segment then loses its last
// 4 KiB on disk restarts: it finds the damage at start, copies its
// leader's log again, and only then rejoins the ISR. When the leader and
// the other follower die, it is elected and serves every acknowledged
// offset.
func TestDamagedSealedSegmentRefilled(t *testing.T) {
	damagedFollowerElected(t, func(files []string) string { return files[0] })
}

// damagedFollowerElected damages the segment pick chooses of a killed
// follower's copy, restarts it, waits for it to be in sync again, kills
// the others and reads every acknowledged record from it.
func damagedFollowerElected(t *testing.T, pick func(files []string) string) {
	c, h := rolledCopies(t, "dmg")
	leaders, _ := c.isrs(1, "dmg")
	leader := leaders[0]
	damaged := leader%3 + 1
	other := 6 - leader - damaged
	c.waitISR(leader, "dmg", 3)
	c.nodes[damaged].Kill()
	files := segmentFiles(t, c.nodes[damaged].Dir(), "dmg-0")
	if len(files) < 3 {
		t.Fatalf("node %d holds %d segment files of dmg-0: the test needs sealed ones", damaged, len(files))
	}
	path := pick(files)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := min(int64(4096), st.Size()/2) // a file may be shorter than 4 KiB: half of it then
	os.Chmod(path, 0o644)
	if err := os.Truncate(path, st.Size()-cut); err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %d; node %d killed and %s cut from %d to %d bytes", leader, damaged, path, st.Size(), st.Size()-cut)
	c.restart(damaged)
	c.waitISR(leader, "dmg", 3)
	if n := c.metric(damaged, "strata_replica_damaged_refills_total"); n == 0 {
		t.Errorf("node %d rejoined the ISR without refilling its damaged copy", damaged)
	}
	c.nodes[leader].Kill()
	c.nodes[other].Kill()
	if got := c.newLeader(damaged, "dmg", 0, leader); got != damaged {
		t.Fatalf("dmg-0 is led by node %d, want node %d, the only one live", got, damaged)
	}
	c.readAll(h, damaged, "dmg")
	checkByValue(t, h)
}

// segmentFiles are the segment files of shard under a node's data folder,
// oldest first: the last is the active one.
func segmentFiles(t *testing.T, dir, shard string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".msg") && filepath.Base(filepath.Dir(path)) == shard {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	no := func(p string) int {
		n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(p), ".msg"))
		return n
	}
	sort.Slice(files, func(i, j int) bool { return no(files[i]) < no(files[j]) })
	return files
}

// The scrubber, on its schedule, finds a follower's sealed segment damaged
// in place (a flipped byte, same size: nothing at start would see it),
// and the follower refills its copy from the leader: GET /v1/scrub reports
// the finding repaired, the metrics count it, and the refilled node, left
// alone, serves every acknowledged record.
func TestScrubberRepairsDamagedCopy(t *testing.T) {
	c, h := rolledCopies(t, "scrub", "engine.scrub_schedule=@every 1s")
	leaders, _ := c.isrs(1, "scrub")
	leader := leaders[0]
	damaged := leader%3 + 1
	other := 6 - leader - damaged
	files := segmentFiles(t, c.nodes[damaged].Dir(), "scrub-0")
	if len(files) < 3 {
		t.Fatalf("node %d holds %d segment files of scrub-0: the test needs sealed ones", damaged, len(files))
	}
	data, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	os.Chmod(files[1], 0o644)
	if err := os.WriteFile(files[1], data, 0o444); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	var rep scrubReport
	for {
		rep = c.scrubReport(damaged)
		if len(rep.Findings) > 0 && rep.Findings[0].State == "repaired" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d's scrub report 60s after its copy was damaged: %+v", damaged, rep)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if f := rep.Findings[0]; f.Shard != "scrub-0" || f.Segment != 1 {
		t.Errorf("the scrubber found %+v, want segment 1 of scrub-0", f)
	}
	if found, fixed := c.metric(damaged, "strata_scrub_damaged_total"), c.metric(damaged, "strata_scrub_repaired_total"); found != 1 || fixed != 1 {
		t.Errorf("scrub metrics: %v found, %v repaired; want 1 and 1", found, fixed)
	}
	c.waitISR(leader, "scrub", 3)
	c.nodes[leader].Kill()
	c.nodes[other].Kill()
	if got := c.newLeader(damaged, "scrub", 0, leader); got != damaged {
		t.Fatalf("scrub-0 is led by node %d, want node %d, the only one live", got, damaged)
	}
	c.readAll(h, damaged, "scrub")
	checkByValue(t, h)
}

type scrubReport struct {
	Findings []struct {
		Shard   string `json:"shard"`
		Segment uint64 `json:"segment"`
		State   string `json:"state"`
	} `json:"findings"`
}

// scrubReport is node id's GET /v1/scrub.
func (c *cluster) scrubReport(id int32) scrubReport {
	c.t.Helper()
	resp, err := http.Get("http://" + c.nodes[id].Admin + "/v1/scrub")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r scrubReport
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		c.t.Fatalf("node %d GET /v1/scrub: %v", id, err)
	}
	return r
}

// A power cut, and a follower's sealed segment loses its last 4 KiB: that
// node comes back first, alone, still in the ISR etcd holds. It registers
// its copy as damaged, so it is not elected and leaves the ISR; once the
// others are back it refills from the new leader, and every acknowledged
// record is read from it.
func TestDamagedReplicaNotElectedAfterPowerCut(t *testing.T) {
	c, h := rolledCopies(t, "pc")
	leaders, _ := c.isrs(1, "pc")
	damaged := leaders[0]%3 + 1
	c.waitISR(1, "pc", 3)
	for id := int32(1); id <= 3; id++ {
		c.nodes[id].Kill()
	}
	files := segmentFiles(t, c.nodes[damaged].Dir(), "pc-0")
	st, err := os.Stat(files[0])
	if err != nil || len(files) < 3 {
		t.Fatalf("node %d's segment files of pc-0: %v, %v", damaged, files, err)
	}
	os.Chmod(files[0], 0o644)
	if err := os.Truncate(files[0], st.Size()-min(4096, st.Size()/2)); err != nil {
		t.Fatal(err)
	}
	c.restart(damaged)
	c.waitAlone(damaged, "pc", "with a damaged copy")
	for id := int32(1); id <= 3; id++ {
		if id != damaged {
			c.restart(id)
		}
	}
	c.waitISR(damaged%3+1, "pc", 3)
	c.readAll(h, damaged, "pc")
	checkByValue(t, h)
}
