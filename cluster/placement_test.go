package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestPlacementScripts drives Place and HandOff with the scripts in
// testdata/placement. The harness keeps what etcd would: the live nodes,
// the topics and the partition records; `plan` prints the writes and
// applies them, as the controller's transactions would, and `roll` the
// record a leader writes when it hands a partition over at a roll.
//
//	node add id=N [bytes=B] [dir=D]  a node registers (B: bytes it keeps,
//	                            D: its data folder's identity)
//	node dead id=N              its lease expires
//	node damaged id=N topic=T partition=P [refilled=true]
//	                            N reports its copy of T-P damaged (refilled: no more)
//	topic create name=T partitions=P rf=R [unclean=true] [acks=quorum]
//	topic set name=T unclean=B   alters unclean.leader.election.enable
//	topic delete name=T         the topic and its partitions go
//	broker unclean=B            the broker's unclean.leader.election.enable
//	isr topic=T partition=P isr=(A,B)  the leader's ChangeISR
//	report topic=T partition=P node=N epoch=E end=O [leader_epoch=L]
//	                            N's ReportCandidate, at the record's current
//	                            epoch or L (gone when N dies or the leader
//	                            changes, as its key is)
//	plan                        Place: the writes and problems
//	roll topic=T partition=P at=O   the leader rolls at offset O: HandOff's record, or "stays"
//	show                        every partition, and what each live node leads
//	holder topic=T partition=P at=O   the node holding offset O, and where its part ends
func TestPlacementScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/placement", func(t *testing.T, path string) {
		h := &placementHarness{st: State{Topics: map[string]Topic{}, Partitions: map[TopicPartition]Partition{},
			Candidates: map[TopicPartition][]Candidate{}}}
		datadriven.RunTest(t, path, h.run)
	})
}

type placementHarness struct {
	st      State
	created int // topics created so far, their creation order
}

func (h *placementHarness) run(t *testing.T, d *datadriven.TestData) string {
	arg := func(key string) string {
		for _, a := range d.CmdArgs {
			if a.Key == key {
				return strings.Join(a.Vals, ",")
			}
		}
		return ""
	}
	num := func(key string) int {
		n, err := strconv.Atoi(arg(key))
		if err != nil {
			d.Fatalf(t, "%s=%q: %v", key, arg(key), err)
		}
		return n
	}
	cmd := d.Cmd
	nums := func(key string) []int32 {
		var out []int32
		for _, v := range strings.Split(arg(key), ",") {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				d.Fatalf(t, "%s=%q: %v", key, arg(key), err)
			}
			out = append(out, int32(n))
		}
		return out
	}
	if (cmd == "node" || cmd == "topic") && len(d.CmdArgs) > 0 {
		cmd += " " + d.CmdArgs[0].Key
	}
	var out strings.Builder
	switch cmd {
	case "node add":
		var bytes int64
		if arg("bytes") != "" {
			bytes = int64(num("bytes"))
		}
		h.st.Live = append(h.st.Live, NodeLoad{ID: int32(num("id")), Bytes: bytes, Dir: arg("dir")})
	case "node damaged":
		id, tp := int32(num("id")), TopicPartition{arg("topic"), int32(num("partition"))}
		for i := range h.st.Live {
			if h.st.Live[i].ID == id {
				h.st.Live[i].Damaged = slices.DeleteFunc(h.st.Live[i].Damaged, func(o TopicPartition) bool { return o == tp })
				if arg("refilled") != "true" {
					h.st.Live[i].Damaged = append(h.st.Live[i].Damaged, tp)
				}
			}
		}
	case "node dead":
		id := int32(num("id"))
		h.st.Live = slices.DeleteFunc(h.st.Live, func(n NodeLoad) bool { return n.ID == id })
		for tp, cs := range h.st.Candidates {
			h.st.Candidates[tp] = slices.DeleteFunc(cs, func(c Candidate) bool { return c.Node == id })
		}
	case "topic create":
		h.created++
		name := arg("name")
		cfg := map[string]string{}
		if v := arg("unclean"); v != "" {
			cfg["unclean.leader.election.enable"] = v
		}
		if v := arg("acks"); v != "" {
			cfg["strata.acks.all"] = v
		}
		h.st.Topics[name] = Topic{Name: name, Partitions: int32(num("partitions")), ReplicationFactor: int16(num("rf")),
			Created: time.Date(2026, 1, 1, 0, 0, h.created, 0, time.UTC), Configs: cfg}
	case "topic set":
		tp := h.st.Topics[arg("name")]
		tp.Configs["unclean.leader.election.enable"] = arg("unclean")
	case "broker":
		h.st.Defaults = map[string]string{"unclean.leader.election.enable": arg("unclean")}
	case "isr":
		tp := TopicPartition{arg("topic"), int32(num("partition"))}
		p := h.st.Partitions[tp]
		if err := checkISR(p, nums("isr")); err != nil {
			fmt.Fprintln(&out, "refused:", err)
			break
		}
		next := p.clone()
		next.ISR = nums("isr")
		live := map[int32]string{}
		for _, n := range h.st.Live {
			live[n.ID] = n.Dir
		}
		next.Dirs = joinDirs(p, next.ISR, live)
		w := Write{Partition: next, Prev: &p, Why: "the leader's ChangeISR"}
		fmt.Fprintln(&out, w)
		h.apply(w)
	case "report":
		tp := TopicPartition{arg("topic"), int32(num("partition"))}
		c := Candidate{Node: int32(num("node")), LeaderEpoch: h.st.Partitions[tp].Epoch, Epoch: int32(num("epoch")), End: int64(num("end"))}
		if arg("leader_epoch") != "" {
			c.LeaderEpoch = int32(num("leader_epoch")) // a stale report the view still holds
		}
		cs := slices.DeleteFunc(h.st.Candidates[tp], func(o Candidate) bool { return o.Node == c.Node })
		h.st.Candidates[tp] = append(cs, c)
	case "topic delete":
		name := arg("name")
		delete(h.st.Topics, name)
		for tp := range h.st.Partitions {
			if tp.Topic == name {
				delete(h.st.Partitions, tp)
			}
		}
	case "plan":
		dec := Place(h.st)
		for _, w := range dec.Writes {
			fmt.Fprintln(&out, w)
			h.apply(w)
		}
		for _, p := range dec.Problems {
			fmt.Fprintln(&out, "problem:", p)
		}
		if len(dec.Writes)+len(dec.Problems) == 0 {
			out.WriteString("nothing to do\n")
		}
	case "roll":
		tp := TopicPartition{arg("topic"), int32(num("partition"))}
		p := h.st.Partitions[tp]
		next, ok := HandOff(p, int64(num("at")))
		if !ok {
			out.WriteString("stays\n")
			break
		}
		w := Write{Partition: next, Prev: &p, Why: "handed over at the roll"}
		fmt.Fprintln(&out, w)
		h.apply(w)
	case "holder":
		p := h.st.Partitions[TopicPartition{arg("topic"), int32(num("partition"))}]
		node, end := p.Holder(int64(num("at")))
		fmt.Fprintf(&out, "node %d, up to %d\n", node, end)
	case "show":
		leads := map[int32]int{}
		for _, tp := range sortedPartitions(h.st.Partitions) {
			p := h.st.Partitions[tp]
			fmt.Fprintf(&out, "%s leader=%d epoch=%d replicas=%v isr=%v spans=%v", tp, p.Leader, p.Epoch, p.Replicas, p.ISR, p.Spans)
			if p.Next != 0 {
				fmt.Fprintf(&out, " next=%d", p.Next)
			}
			if len(p.Dirs) > 0 {
				fmt.Fprintf(&out, " dirs=%v", p.Dirs)
			}
			out.WriteString("\n")
			leads[p.Leader]++
		}
		for _, n := range h.st.Live {
			fmt.Fprintf(&out, "node %d leads %d\n", n.ID, leads[n.ID])
		}
	default:
		d.Fatalf(t, "unknown command %q", cmd)
	}
	return out.String()
}

// apply is what etcd does with a write the controller's transaction made,
// after checking the record is still the one the plan saw.
func (h *placementHarness) apply(w Write) {
	tp := TopicPartition{w.Partition.Topic, w.Partition.Partition}
	cur, ok := h.st.Partitions[tp]
	if ok != (w.Prev != nil) || (ok && (cur.Leader != w.Prev.Leader || cur.Epoch != w.Prev.Epoch || cur.Next != w.Prev.Next)) {
		panic(fmt.Sprintf("write %v planned from a record that is not the current one (%+v)", w, cur))
	}
	h.st.Partitions[tp] = w.Partition
	if w.Prev != nil && w.Prev.Epoch != w.Partition.Epoch {
		delete(h.st.Candidates, tp) // in the same transaction
	}
}
