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
//	node add id=N [bytes=B]     a node registers (B: bytes it keeps)
//	node dead id=N              its lease expires
//	topic create name=T partitions=P rf=R
//	topic delete name=T         the topic and its partitions go
//	plan                        Place: the writes and problems
//	roll topic=T partition=P at=O   the leader rolls at offset O: HandOff's record, or "stays"
//	show                        every partition, and what each live node leads
//	holder topic=T partition=P at=O   the node holding offset O, and where its part ends
func TestPlacementScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/placement", func(t *testing.T, path string) {
		h := &placementHarness{st: State{Topics: map[string]Topic{}, Partitions: map[TopicPartition]Partition{}}}
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
		h.st.Live = append(h.st.Live, NodeLoad{ID: int32(num("id")), Bytes: bytes})
	case "node dead":
		id := int32(num("id"))
		h.st.Live = slices.DeleteFunc(h.st.Live, func(n NodeLoad) bool { return n.ID == id })
	case "topic create":
		h.created++
		name := arg("name")
		h.st.Topics[name] = Topic{Name: name, Partitions: int32(num("partitions")), ReplicationFactor: int16(num("rf")),
			Created: time.Date(2026, 1, 1, 0, 0, h.created, 0, time.UTC)}
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
}
