package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// sealRecord is a sealed/ record in etcd, as docs/cluster.md gives it.
type sealRecord struct {
	Start    uint64  `json:"start"`
	Last     uint64  `json:"last"`
	CRC      uint32  `json:"crc32c"`
	Replicas []int32 `json:"replicas"`
}

// seals reads the sealed/ records of topic's partition p.
func (c *cluster) seals(topic string, p int32) map[uint64]sealRecord {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, fmt.Sprintf("%s/sealed/%s/%010d/", c.pfx, topic, p), clientv3.WithPrefix())
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[uint64]sealRecord{}
	for _, kv := range resp.Kvs {
		var s sealRecord
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			c.t.Fatalf("sealed record %s: %v", kv.Key, err)
		}
		slices.Sort(s.Replicas)
		out[s.Start] = s
	}
	return out
}

// sealedHere is node id's sealed segments of topic's partition 0, by start:
// [start, end) from GET /v1/cluster, and its file's checksum.
func (c *cluster) sealedHere(id int32, topic string) map[uint64]sealRecord {
	c.t.Helper()
	a, err := c.adminView(id)
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	out := map[uint64]sealRecord{}
	for _, p := range a.Partitions {
		if p.Topic != topic || p.Partition != 0 {
			continue
		}
		for _, s := range p.Segments {
			if s.State != "sealed" {
				continue
			}
			// The file as it is on disk, not the checksum kept while it
			// was written.
			b, err := os.ReadFile(filepath.Join(c.nodes[id].Dir(), topic+"-0", fmt.Sprintf("%d.msg", s.No)))
			if err != nil {
				c.t.Fatalf("node %d's sealed segment %d: %v", id, s.No, err)
			}
			out[s.Start] = sealRecord{Start: s.Start, Last: s.End, CRC: crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))}
		}
	}
	return out
}

// Every replica's sealed copy of a segment is the same bytes (followers
// roll where the leader rolled and append byte-identical records), and
// the leader records each segment in etcd once every ISR member's copy
// agrees. A follower whose copy was damaged on disk before the roll is
// left out of that segment's replicas, so nothing is read or tiered from it.
func TestSealAgreement(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=2s", "segment.max_bytes=64KiB", "segment.roll_check_interval=1")
	createReplicated(t, c, "sealed", 1, 3, nil)
	c.waitISR(1, "sealed", 3)
	leaders, _ := c.isrs(1, "sealed")
	leader := leaders[0]
	h := newHistory()
	stop := c.startLoad(h, "sealed", []int32{0}, 300, leader)
	time.Sleep(4 * time.Second)

	// Damage a follower's active segment in the middle of what it holds
	// (one that has just rolled holds nothing yet: wait for some).
	victim := leader%3 + 1
	damage := func() bool {
		files, _ := filepath.Glob(filepath.Join(c.nodes[victim].Dir(), "sealed-0", "*.msg"))
		no := func(f string) int {
			n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".msg"))
			return n
		}
		slices.SortFunc(files, func(a, b string) int { return no(a) - no(b) })
		if len(files) == 0 {
			return false
		}
		f, err := os.OpenFile(files[len(files)-1], os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fi, _ := f.Stat()
		if fi.Size() < 1024 {
			return false
		}
		b := make([]byte, 1)
		f.ReadAt(b, fi.Size()/2)
		b[0] ^= 0xff
		_, err = f.WriteAt(b, fi.Size()/2)
		return err == nil
	}
	for deadline := time.Now().Add(10 * time.Second); !damage(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node %d holds no active segment of sealed-0 with bytes to damage", victim)
		}
	}
	time.Sleep(4 * time.Second)
	stop()

	// Wait until every segment the leader sealed is recorded.
	var seals map[uint64]sealRecord
	deadline := time.Now().Add(30 * time.Second)
	for {
		seals = c.seals("sealed", 0)
		mine := c.sealedHere(leader, "sealed")
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
	copies := map[int32]map[uint64]sealRecord{}
	for id := range c.nodes {
		copies[id] = c.sealedHere(id, "sealed")
	}
	left := 0
	for start, rec := range seals {
		for id := range c.nodes {
			cp, ok := copies[id][start]
			switch {
			case slices.Contains(rec.Replicas, id) && (!ok || cp.CRC != rec.CRC || cp.Last != rec.Last):
				t.Errorf("segment at %d recorded with node %d among its replicas (crc %08x), but its copy is %+v", start, id, rec.CRC, cp)
			case ok && !slices.Contains(rec.Replicas, id) && cp.CRC == rec.CRC:
				t.Errorf("segment at %d: node %d's copy agrees (crc %08x) but it is not among the replicas %v", start, id, cp.CRC, rec.Replicas)
			case !slices.Contains(rec.Replicas, id):
				left++
				if id != victim {
					t.Errorf("segment at %d: node %d left out of its replicas %v; only node %d's copy was damaged", start, id, rec.Replicas, victim)
				}
			}
		}
	}
	if left == 0 {
		t.Errorf("no segment left node %d out of its replicas after its copy was damaged: %v", victim, seals)
	}
	c.readAll(h, leader, "sealed")
	h.check(t)
	t.Logf("%d segments sealed for the cluster, node %d left out of %d", len(seals), victim, left)
}
