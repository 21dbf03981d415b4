// Package harness holds the pure parts of the cluster fault harness
// (cluster/e2e/harness_test.go, docs/testing.md): a seeded schedule that
// mixes faults with operations, and a checker over the whole history of a
// run. Nothing here does I/O: the e2e test runs the schedule against
// strata nodes on a real etcd and feeds what happened to Check.
package harness

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Fault is a kind of fault, named so a run can switch each one on or off
// (STRATA_HARNESS_FAULTS).
type Fault string

const (
	Kill1       Fault = "kill1"        // SIGKILL one node (often a leader), restart on its folder
	Kill2       Fault = "kill2"        // SIGKILL two nodes at once, restart both
	KillAll     Fault = "killall"      // SIGKILL every node at once, restart all
	Wipe        Fault = "wipe"         // SIGKILL one node, remove its data folder, restart it empty
	KillAllWipe Fault = "killall-wipe" // SIGKILL every node, wipe one, restart that one first
	Truncate    Fault = "truncate"     // stop a node, cut the last 4 KiB of its newest sealed segment, start it again
	Pause       Fault = "pause"        // SIGSTOP a node past its lease, then SIGCONT
	Partition   Fault = "partition"    // cut a node from its peers (both ways), and from etcd or not
	OneWay      Fault = "oneway"       // cut one direction of a node's peer or etcd traffic
	EtcdPause   Fault = "etcd-pause"   // SIGSTOP etcd, then SIGCONT
	EtcdKill    Fault = "etcd-kill"    // SIGKILL etcd, restart it on its data folder
	Throttle    Fault = "throttle"     // a follower restarted with cluster.follower_throttled_rate, a large batch, the leader killed or not
	DeleteKill  Fault = "delete-kill"  // DeleteRecords, then SIGKILL of the partition's leader at once
	// RecreateOp is an operation, not a fault, switched like one: the churn
	// topic deleted and created again under load.
	RecreateOp Fault = "recreate"
	EtcdQuota  Fault = "etcd-quota" // another writer fills etcd to near its quota (or past it), then an operator frees it
)

// AllFaults is every fault kind, in a fixed order (the generator's draws
// depend on it): a new kind goes at the end, so a mix without it draws
// the schedules it drew before.
var AllFaults = []Fault{Kill1, Kill2, KillAll, Wipe, KillAllWipe, Truncate, Pause, Partition, OneWay,
	EtcdPause, EtcdKill, Throttle, DeleteKill, RecreateOp, EtcdQuota}

// DefaultFaults is the mix `make test` runs: the kinds under which the
// checker has held over at least three seeds (docs/testing.md, "Known
// failures"), in AllFaults' order. Since a leader that holds only a
// segment's tail records its followers' whole segment (seeds 11 and 34),
// that is every kind; a new kind joins once it has held.
var DefaultFaults = []Fault{Kill1, Kill2, KillAll, Wipe, KillAllWipe, Truncate, Pause, Partition, OneWay,
	EtcdPause, EtcdKill, Throttle, DeleteKill, RecreateOp, EtcdQuota}

// ParseFaults reads a comma-separated mix: "all", "default", fault names,
// and "-name" to take one out ("all,-wipe").
func ParseFaults(s string) ([]Fault, error) {
	if strings.TrimSpace(s) == "" {
		s = "default"
	}
	on := map[Fault]bool{}
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(w)
		switch {
		case w == "":
		case w == "all":
			for _, f := range AllFaults {
				on[f] = true
			}
		case w == "default":
			for _, f := range DefaultFaults {
				on[f] = true
			}
		case w == "none":
			clear(on)
		case strings.HasPrefix(w, "-"):
			f := Fault(w[1:])
			if !slices.Contains(AllFaults, f) {
				return nil, fmt.Errorf("unknown fault %q (known: %v)", f, AllFaults)
			}
			delete(on, f)
		default:
			f := Fault(w)
			if !slices.Contains(AllFaults, f) {
				return nil, fmt.Errorf("unknown fault %q (known: %v)", f, AllFaults)
			}
			on[f] = true
		}
	}
	var out []Fault
	for _, f := range AllFaults {
		if on[f] {
			out = append(out, f)
		}
	}
	return out, nil
}

// OpKind is a kind of client operation.
type OpKind string

const (
	ProduceLarge     OpKind = "produce-large"     // one idempotent acks=all produce of many records
	ProduceAcks1     OpKind = "produce-acks1"     // a burst of acks=1 records, not idempotent
	Fetch            OpKind = "fetch"             // read a partition from its log start
	DeleteRecords    OpKind = "delete-records"    // move a partition's log start forward
	CreatePartitions OpKind = "create-partitions" // one more partition for the main topic
	Recreate         OpKind = "recreate"          // delete the churn topic and create it again
	TierRun          OpKind = "tier-run"          // ask one node for a tiering run
	GroupCommit      OpKind = "group-commit"      // commit a group offset
	// PasswordChange rotates the SCRAM user's password on one node
	// (AlterUserScramCredentials); drawn from a stream of its own, so the
	// other operations and the faults are what a seed drew before it.
	PasswordChange OpKind = "password"
)

var allOps = []OpKind{ProduceLarge, ProduceAcks1, Fetch, DeleteRecords, CreatePartitions, Recreate, TierRun, GroupCommit}

// Target names the node a fault hits: a fixed node, or whichever node
// leads a partition when the fault starts.
type Target struct {
	Node      int32  // 1..n, or 0: the leader of Topic/Partition
	Topic     string // with Node 0
	Partition int32
}

func (t Target) String() string {
	if t.Node > 0 {
		return fmt.Sprintf("node %d", t.Node)
	}
	return fmt.Sprintf("leader of %s-%d", t.Topic, t.Partition)
}

// Step is one fault of the schedule. Faults run one after another: each
// starts at At (or when the one before has recovered, if later), holds for
// Hold, and is healed; the cluster is then given time to recover.
type Step struct {
	At      time.Duration
	Fault   Fault
	Targets []Target // the nodes hit (kill2: two; killall: none, every node)
	Hold    time.Duration
	// Dirs are the proxied directions for partition and oneway: "peers-in"
	// (what peers send the node), "peers-out" (its answers), "etcd-in",
	// "etcd-out".
	Dirs []string
	// KillLeader: throttle ends by SIGKILL of the leader the throttled
	// follower copies from.
	KillLeader bool
}

func (s Step) String() string {
	var ts []string
	for _, t := range s.Targets {
		ts = append(ts, t.String())
	}
	out := fmt.Sprintf("%6.1fs %s", s.At.Seconds(), s.Fault)
	if len(ts) > 0 {
		out += " " + strings.Join(ts, ", ")
	}
	if len(s.Dirs) > 0 {
		out += " " + strings.Join(s.Dirs, "+")
	}
	if s.KillLeader {
		out += " then kill its leader"
	}
	return out + fmt.Sprintf(" for %s", s.Hold.Round(100*time.Millisecond))
}

// Op is one client operation of the schedule, started at At.
type Op struct {
	At        time.Duration
	Kind      OpKind
	Partition int32 // fetch, delete-records, produce-large: a main topic partition (mod its count)
	Records   int   // produce-large, produce-acks1
	Node      int32 // tier-run: which node; others: the node the client bootstraps from
	// Fraction (0..1): delete-records moves the log start this far towards
	// the high watermark.
	Fraction float64
}

func (o Op) String() string {
	return fmt.Sprintf("%6.1fs %s p%d n=%d via %d", o.At.Seconds(), o.Kind, o.Partition, o.Records, o.Node)
}

// Schedule is a run's faults and operations, in order of At.
type Schedule struct {
	Seed   uint64
	Nodes  int
	Faults []Step
	Ops    []Op
	// Quiet is when the last fault is healed: from then on only
	// operations run, and the checker's bounds start.
	Quiet time.Duration
}

// Config shapes a schedule.
type Config struct {
	Seed     uint64
	Nodes    int           // 3
	Duration time.Duration // how long faults and operations are started
	Mix      []Fault       // the fault kinds to draw from; none: operations only
	// Topic is the main topic faults aim at (leader targets); Partitions
	// its initial partition count.
	Topic      string
	Partitions int32
	// Lease is the nodes' session TTL: a pause must outlast it.
	Lease time.Duration
}

// Generate draws a schedule from cfg.Seed: the same seed and config give
// the same schedule.
func Generate(cfg Config) Schedule {
	r := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	s := Schedule{Seed: cfg.Seed, Nodes: cfg.Nodes}
	node := func() int32 { return 1 + int32(r.IntN(cfg.Nodes)) }
	target := func() Target {
		if r.IntN(3) < 2 { // leaders are where the bugs are
			return Target{Topic: cfg.Topic, Partition: int32(r.IntN(int(cfg.Partitions)))}
		}
		return Target{Node: node()}
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }

	// Faults: the first after a few seconds of load, then one at a time
	// with a gap for recovery; none in the last fifth, so the checker's
	// bounds are measured on a cluster left alone.
	var kinds []Fault
	for _, f := range cfg.Mix {
		if f != RecreateOp {
			kinds = append(kinds, f)
		}
	}
	faultEnd := cfg.Duration * 4 / 5
	t := between(4*time.Second, 8*time.Second)
	for len(kinds) > 0 && t < faultEnd {
		st := Step{At: t, Fault: kinds[r.IntN(len(kinds))]}
		switch st.Fault {
		case Kill1, Wipe, Truncate:
			st.Targets = []Target{target()}
			st.Hold = between(500*time.Millisecond, 4*time.Second)
		case Kill2:
			a := node()
			b := a%int32(cfg.Nodes) + 1
			st.Targets = []Target{{Node: a}, {Node: b}}
			st.Hold = between(time.Second, 5*time.Second)
		case KillAll:
			st.Hold = between(500*time.Millisecond, 3*time.Second)
		case KillAllWipe:
			st.Targets = []Target{{Node: node()}}
			st.Hold = between(500*time.Millisecond, 3*time.Second)
		case Pause:
			st.Targets = []Target{target()}
			st.Hold = cfg.Lease + between(500*time.Millisecond, 3*time.Second)
		case Partition:
			st.Targets = []Target{target()}
			st.Dirs = []string{"peers-in", "peers-out"}
			if r.IntN(2) == 0 {
				st.Dirs = append(st.Dirs, "etcd-in", "etcd-out")
			}
			st.Hold = cfg.Lease + between(time.Second, 4*time.Second)
		case OneWay:
			st.Targets = []Target{target()}
			st.Dirs = []string{[]string{"peers-in", "peers-out", "etcd-in", "etcd-out"}[r.IntN(4)]}
			st.Hold = cfg.Lease + between(time.Second, 4*time.Second)
		case EtcdPause, EtcdKill:
			st.Hold = between(time.Second, 2*cfg.Lease)
		case EtcdQuota:
			st.Hold = between(3*time.Second, 10*time.Second)
		case Throttle:
			st.Targets = []Target{{Node: node()}}
			st.KillLeader = r.IntN(2) == 0
			st.Hold = between(3*time.Second, 8*time.Second)
		case DeleteKill:
			st.Targets = []Target{{Topic: cfg.Topic, Partition: int32(r.IntN(int(cfg.Partitions)))}}
			st.Hold = between(500*time.Millisecond, 3*time.Second)
		}
		s.Faults = append(s.Faults, st)
		// Recovery: restarts, elections and catching up take seconds on a
		// shared machine.
		t += st.Hold + between(6*time.Second, 14*time.Second)
	}
	s.Quiet = faultEnd
	if n := len(s.Faults); n > 0 {
		last := s.Faults[n-1]
		s.Quiet = max(s.Quiet, last.At+last.Hold)
	}

	// Operations, every 0.3-1.5s to the end.
	weights := map[OpKind]int{ProduceLarge: 6, ProduceAcks1: 3, Fetch: 6, DeleteRecords: 2, CreatePartitions: 1,
		Recreate: 1, TierRun: 3, GroupCommit: 3}
	total := 0
	for _, k := range allOps {
		total += weights[k]
	}
	parts := cfg.Partitions
	for t := between(time.Second, 2*time.Second); t < cfg.Duration; t += between(300*time.Millisecond, 1500*time.Millisecond) {
		w := r.IntN(total)
		var k OpKind
		for _, k = range allOps {
			if w -= weights[k]; w < 0 {
				break
			}
		}
		op := Op{At: t, Kind: k, Node: node(), Partition: int32(r.IntN(int(parts)))}
		switch k {
		case ProduceLarge:
			op.Records = []int{200, 500, 2000}[r.IntN(3)]
		case ProduceAcks1:
			op.Records = 1 + r.IntN(50)
		case DeleteRecords:
			op.Fraction = 0.1 + 0.4*r.Float64()
		case Recreate:
			if !slices.Contains(cfg.Mix, RecreateOp) {
				op.Kind = Fetch
			}
		case CreatePartitions:
			if parts >= cfg.Partitions+3 {
				op.Kind = Fetch
			} else {
				parts++
			}
		}
		s.Ops = append(s.Ops, op)
	}
	// Password changes, every 15-30 s from 10 s on, each at a node of its
	// own stream's choosing.
	pr := rand.New(rand.NewPCG(cfg.Seed^0x70617373776f7264, cfg.Seed))
	for t := 10*time.Second + time.Duration(pr.Int64N(int64(5*time.Second))); t < cfg.Duration; t += 15*time.Second + time.Duration(pr.Int64N(int64(15*time.Second))) {
		s.Ops = append(s.Ops, Op{At: t, Kind: PasswordChange, Node: int32(1 + pr.IntN(cfg.Nodes))})
	}
	sort.SliceStable(s.Ops, func(i, j int) bool { return s.Ops[i].At < s.Ops[j].At })
	return s
}

// Summary counts the schedule's faults by kind.
func (s Schedule) Summary() string {
	n := map[Fault]int{}
	for _, f := range s.Faults {
		n[f.Fault]++
	}
	var parts []string
	for f, c := range n {
		parts = append(parts, fmt.Sprintf("%s=%d", f, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
