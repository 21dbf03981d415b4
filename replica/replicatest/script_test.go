package replicatest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"go.uber.org/goleak"

	"strata/engine/store"
	"strata/replica"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScripts runs the scripts in testdata: each starts a kit (cluster)
// and drives it command by command; docs/testing.md lists the commands.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var c *Cluster
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			a := args{t, d}
			if d.Cmd != "cluster" && c == nil {
				d.Fatalf(t, "the first command is cluster")
			}
			shard := func() string {
				return store.ShardName(a.str("topic", "t"), int32(a.int("partition", 0)))
			}
			switch d.Cmd {
			case "cluster":
				c = New(t, Config{FetchBytes: int32(a.int("fetch-bytes", 0)), SegmentBytes: a.int("segment-bytes", 0),
					LagTimeMax: a.dur("lag-time-max", 0)}, a.nodes("nodes")...)
				return "ok\n"
			case "partition":
				mode := replica.ModeISR
				if a.has("quorum") {
					mode = replica.ModeQuorum
				}
				c.CreatePartition(Partition{Topic: a.str("topic", "t"), Partition: int32(a.int("partition", 0)),
					Replicas: a.nodes("replicas"), Leader: int32(a.int("leader", -1)), MinISR: int(a.int("min-isr", 1)),
					Mode: mode, Unclean: a.has("unclean")})
				return c.describeMeta(shard())
			case "produce":
				var values []string
				if a.has("values") {
					values = strings.Split(a.str("values", ""), ",")
				} else {
					for i := range a.int("records", 1) {
						values = append(values, fmt.Sprintf("%s%d", a.str("prefix", "v"), i))
					}
				}
				var prod *Producer
				if a.has("pid") {
					prod = &Producer{ID: int64(a.int("pid", 0)), Epoch: int16(a.int("epoch", 0)), Seq: int32(a.int("seq", 0))}
				}
				out, err := c.ProduceAs(int32(a.int("node", -1)), shard(), values, a.str("acks", "all") == "all", prod)
				if err != nil {
					return fmt.Sprintf("error: %v\n", err)
				}
				return out + "\n"
			case "deliver":
				var b strings.Builder
				for range a.int("n", 1) {
					b.WriteString(c.Deliver(int32(a.int("from", -1))))
				}
				return orNothing(b.String())
			case "stabilize":
				return orNothing(c.Stabilize())
			case "tick":
				return orNothing(c.Tick(a.dur("by", time.Second), a.dur("step", 100*time.Millisecond)))
			case "kill":
				for _, id := range a.nodes("node") {
					c.Kill(id)
				}
				return "ok\n"
			case "restart":
				c.Start(int32(a.int("node", -1)), a.has("wipe"))
				return "ok\n"
			case "failover":
				var isr []int32
				if a.has("isr") {
					isr = a.nodes("isr")
				}
				if err := c.Meta.Elect(shard(), int32(a.int("leader", -1)), isr); err != nil {
					d.Fatalf(t, "%v", err)
				}
				c.Settle()
				return c.describeMeta(shard())
			case "delete":
				if err := c.DeleteRecords(int32(a.int("node", -1)), shard(), uint64(a.int("before", 0))); err != nil {
					return fmt.Sprintf("error: %v\n", err)
				}
				return "ok\n"
			case "results":
				return orNothing(lines(c.Results()))
			case "log":
				var b strings.Builder
				ids := c.IDs()
				if a.has("node") {
					ids = a.nodes("node")
				}
				for _, id := range ids {
					fmt.Fprintln(&b, c.Log(id, shard()))
				}
				return b.String()
			case "meta":
				return c.describeMeta(shard())
			case "seals":
				return c.describeSeals(shard())
			case "trace":
				c.Settle()
				return orNothing(lines(c.Meta.Writes()))
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

func (c *Cluster) describeMeta(shard string) string {
	p, ok := c.Meta.Get(shard)
	if !ok {
		return "no partition\n"
	}
	var leads []string
	for _, id := range c.IDs() {
		if r := c.nodes[id].Repl; r != nil && r.Leads(shard) {
			leads = append(leads, strconv.Itoa(int(id)))
		}
	}
	return fmt.Sprintf("%s: leader %d epoch %d isr %v rev %d; leading: [%s]\n", shard, p.Leader, p.Epoch, sorted(p.ISR), p.Rev, strings.Join(leads, " "))
}

// describeSeals prints the seal records and, for each node up, whether
// its sealed copy agrees with them.
func (c *Cluster) describeSeals(shard string) string {
	var b strings.Builder
	recs := c.Meta.SealsOf(shard)
	for _, r := range recs {
		fmt.Fprintf(&b, "sealed [%d, %d] replicas %v\n", r.Start, r.Last, r.Replicas)
	}
	for _, id := range c.IDs() {
		n := c.nodes[id]
		if n.Engine == nil {
			continue
		}
		segs, err := n.Engine.SealedSegments(context.Background(), shard)
		if err != nil {
			fmt.Fprintf(&b, "node %d: %v\n", id, err)
			continue
		}
		low, _, _ := n.Engine.Watermarks(context.Background(), shard)
		var own []string
		for _, s := range segs {
			state := "no record"
			for _, r := range recs {
				if r.Start == s.Start {
					state = "agrees"
					if r.Last != s.Last || r.CRC != s.CRC {
						state = "differs"
					}
				} else if r.Start < s.Start && r.Last == s.Last && s.Start <= low && low <= s.Last && state == "no record" {
					state = fmt.Sprintf("the tail of [%d, %d]", r.Start, r.Last)
				}
			}
			own = append(own, fmt.Sprintf("[%d, %d] %s", s.Start, s.Last, state))
		}
		fmt.Fprintf(&b, "node %d: %s\n", id, strings.Join(own, ", "))
	}
	return orNothing(b.String())
}

func orNothing(s string) string {
	if s == "" {
		return "nothing\n"
	}
	return s
}

func lines(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	return strings.Join(ss, "\n") + "\n"
}

// args reads a command's key=value arguments.
type args struct {
	t *testing.T
	d *datadriven.TestData
}

func (a args) has(key string) bool { return a.d.HasArg(key) }

func (a args) str(key, def string) string {
	for _, ca := range a.d.CmdArgs {
		if ca.Key == key {
			return strings.Join(ca.Vals, ",")
		}
	}
	if def == "" {
		a.d.Fatalf(a.t, "%s: missing %s=", a.d.Cmd, key)
	}
	return def
}

func (a args) int(key string, def int64) int64 {
	if !a.has(key) {
		if def < 0 {
			a.d.Fatalf(a.t, "%s: missing %s=", a.d.Cmd, key)
		}
		return def
	}
	n, err := strconv.ParseInt(a.str(key, ""), 10, 64)
	if err != nil {
		a.d.Fatalf(a.t, "%s=%q: %v", key, a.str(key, ""), err)
	}
	return n
}

func (a args) dur(key string, def time.Duration) time.Duration {
	if !a.has(key) {
		return def
	}
	v, err := time.ParseDuration(a.str(key, ""))
	if err != nil {
		a.d.Fatalf(a.t, "%s: %v", key, err)
	}
	return v
}

func (a args) nodes(key string) []int32 {
	var out []int32
	for _, v := range strings.Split(a.str(key, ""), ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil {
			a.d.Fatalf(a.t, "%s=%q: %v", key, v, err)
		}
		out = append(out, int32(n))
	}
	return out
}
