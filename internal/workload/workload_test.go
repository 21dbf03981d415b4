package workload

import (
	"fmt"
	"hash/crc32"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
)

// history builds a model by hand, the way the driver does from answers.
type history struct {
	t    *testing.T
	m    *Model
	n    int
	vios []Violation
}

func newHistory(t *testing.T) *history {
	return &history{t: t, m: NewModel(time.Hour)}
}

func (h *history) create(name string, partitions int32) int {
	l := h.m.BeginLifecycle(name)
	h.vios = append(h.vios, h.m.EndCreate(l, partitions, OK)...)
	return h.m.Live(name).ID
}

func (h *history) delete(name string) {
	l := h.m.BeginLifecycle(name)
	h.vios = append(h.vios, h.m.EndDelete(l, OK)...)
}

func (h *history) rec(ts int64) Rec {
	h.n++
	return Rec{Timestamp: ts, Key: []byte("k"), Value: []byte(fmt.Sprint("value ", h.n)), Headers: []Header{{IDHeader, []byte(fmt.Sprint("r", h.n))}}}
}

// produce sends recs to partition 0; offsets[i] >= 0 acknowledges record i
// there, -1 leaves it unanswered (maybe stored).
func (h *history) produce(topic string, offsets ...int64) []Rec {
	var prs []ProduceRec
	var recs []Rec
	for range offsets {
		r := h.rec(time.Now().UnixMilli())
		recs = append(recs, r)
		prs = append(prs, ProduceRec{Rec: r})
	}
	p := h.m.BeginProduce(topic, prs)
	if p == nil {
		h.t.Fatalf("produce to %s: no live incarnation", topic)
	}
	var res []Result
	for _, off := range offsets {
		if off < 0 {
			res = append(res, Result{Offset: -1, Outcome: Unknown})
		} else {
			res = append(res, Result{Offset: off, Outcome: OK})
		}
	}
	h.vios = append(h.vios, h.m.EndProduce(p, res)...)
	return recs
}

// read is a complete read of partition 0 of incarnation inc serving recs at
// offsets low, low+1, ...
func (h *history) read(topic string, inc int, low int64, recs ...Rec) Observation {
	o := Observation{Topic: topic, Inc: inc, From: low, Low: low, High: low + int64(len(recs)), Complete: true,
		Since: h.m.Tick(), Now: time.Now().UnixMilli()}
	for i, r := range recs {
		o.Records = append(o.Records, Got{Offset: low + int64(i), Rec: r})
	}
	return o
}

type flag struct {
	kind   string
	offset int64
}

func flags(vs []Violation) []flag {
	out := []flag{}
	for _, v := range vs {
		out = append(out, flag{v.Kind, v.Offset})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].kind < out[j].kind || out[i].kind == out[j].kind && out[i].offset < out[j].offset
	})
	return out
}

// The checker flags exactly the bad histories, at the bad records.
func TestWorkloadCheckerFlagsExactlyTheBadHistories(t *testing.T) {
	old := time.Now().Add(-48 * time.Hour).UnixMilli()
	for _, tc := range []struct {
		name string
		run  func(h *history) []Observation
		want []flag
	}{{
		name: "clean",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			r := h.produce("t", 0, 1, 2)
			return []Observation{h.read("t", inc, 0, r...)}
		},
		want: []flag{},
	}, {
		name: "clean: maybe-stored records present once, or absent",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			a := h.produce("t", 0)
			m := h.produce("t", -1, -1) // unanswered: the first stored, the second not
			b := h.produce("t", 2)
			return []Observation{h.read("t", inc, 0, a[0], m[0], b[0])}
		},
		want: []flag{},
	}, {
		name: "clean: DeleteRecords and retention explain a raised low watermark",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			r := h.produce("t", 0, 1)
			d := h.m.BeginDeleteRecords("t", 0, 2)
			h.vios = append(h.vios, h.m.EndDeleteRecords(d, OK, 2)...)
			p := h.m.BeginProduce("t", []ProduceRec{{Rec: h.rec(old)}})
			h.m.EndProduce(p, []Result{{Offset: 2, Outcome: OK}})
			last := h.produce("t", 3)
			_ = r
			return []Observation{h.read("t", inc, 3, last...)} // offset 2 expired
		},
		want: []flag{},
	}, {
		name: "lost acknowledged record",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			r := h.produce("t", 0, 1, 2)
			return []Observation{h.read("t", inc, 0, r[0], r[1])} // high watermark 2: offset 2 is gone
		},
		want: []flag{{KindLost, 2}},
	}, {
		name: "lost acknowledged record below the low watermark, with no DeleteRecords",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			r := h.produce("t", 0, 1)
			return []Observation{h.read("t", inc, 1, r[1])}
		},
		want: []flag{{KindLost, 0}},
	}, {
		name: "duplicated record",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			a := h.produce("t", 0)
			m := h.produce("t", -1) // maybe stored, but at most once
			return []Observation{h.read("t", inc, 0, a[0], m[0], m[0])}
		},
		want: []flag{{KindDuplicate, 2}},
	}, {
		name: "resurrected record of a deleted topic",
		run: func(h *history) []Observation {
			h.create("t", 1)
			old := h.produce("t", 0)
			h.delete("t")
			inc := h.create("t", 1)
			r := h.produce("t", 0)
			return []Observation{h.read("t", inc, 0, r[0], old[0])}
		},
		want: []flag{{KindResurrected, 1}},
	}, {
		name: "deleted topic still listed with its records",
		run: func(h *history) []Observation {
			h.create("t", 1)
			r := h.produce("t", 0)
			h.delete("t")
			return []Observation{h.read("t", 0, 0, r[0])}
		},
		want: []flag{{KindResurrected, 0}},
	}, {
		name: "changed content",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			r := h.produce("t", 0, 1)
			bad := r[1]
			bad.Value = []byte("value X")
			return []Observation{h.read("t", inc, 0, r[0], bad)}
		},
		want: []flag{{KindChanged, 1}},
	}, {
		name: "an offset serves a different record than an earlier read",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			a := h.produce("t", 0)
			m := h.produce("t", -1, -1)
			h.m.Check(h.read("t", inc, 0, a[0], m[0]))
			return []Observation{h.read("t", inc, 0, a[0], m[1])}
		},
		want: []flag{{KindChanged, 1}},
	}, {
		name: "a produce's records out of order",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			m := h.produce("t", -1, -1)
			return []Observation{h.read("t", inc, 0, m[1], m[0])}
		},
		want: []flag{{KindOrder, 0}},
	}, {
		name: "gap between the watermarks",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			m := h.produce("t", -1, -1, -1)
			o := h.read("t", inc, 0, m[0], m[2])
			o.Records[1].Offset = 2
			o.High = 3
			return []Observation{o}
		},
		want: []flag{{KindGap, 1}},
	}, {
		name: "a record never produced",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			r := h.produce("t", 0)
			return []Observation{h.read("t", inc, 0, r[0], Rec{Value: []byte("?")})}
		},
		want: []flag{{KindUnknown, 1}},
	}, {
		name: "DeleteRecords undone",
		run: func(h *history) []Observation {
			inc := h.create("t", 1)
			r := h.produce("t", 0, 1)
			d := h.m.BeginDeleteRecords("t", 0, 1)
			h.vios = append(h.vios, h.m.EndDeleteRecords(d, OK, 1)...)
			return []Observation{h.read("t", inc, 0, r...)}
		},
		want: []flag{{KindLowWatermark, 0}},
	}, {
		name: "over-limit record acknowledged",
		run: func(h *history) []Observation {
			h.create("t", 1)
			p := h.m.BeginProduce("t", []ProduceRec{{Rec: h.rec(1), Oversize: true}})
			h.vios = append(h.vios, h.m.EndProduce(p, []Result{{Offset: 0, Outcome: OK}})...)
			return nil
		},
		want: []flag{{KindOversize, 0}},
	}, {
		name: "a produce racing a delete and re-create may land in the new incarnation",
		run: func(h *history) []Observation {
			h.create("t", 1)
			var prs []ProduceRec
			r := h.rec(time.Now().UnixMilli())
			prs = append(prs, ProduceRec{Rec: r})
			p := h.m.BeginProduce("t", prs)
			h.delete("t")
			inc := h.create("t", 1)
			h.m.EndProduce(p, []Result{{Offset: 0, Outcome: OK}})
			return []Observation{h.read("t", inc, 0, r)}
		},
		want: []flag{},
	}, {
		name: "a produce still under way may have landed in an incarnation made since it began",
		run: func(h *history) []Observation {
			h.create("t", 1)
			r := h.rec(time.Now().UnixMilli())
			h.m.BeginProduce("t", []ProduceRec{{Rec: r}}) // the client retries by name
			h.delete("t")
			inc := h.create("t", 1)
			return []Observation{h.read("t", inc, 0, r)}
		},
		want: []flag{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(t)
			obs := tc.run(h)
			got := flags(append(h.vios, h.m.Check(obs...)...))
			if !reflect.DeepEqual(got, tc.want) {
				var lines []string
				for _, v := range append(h.vios, h.m.Check(obs...)...) {
					lines = append(lines, v.String())
				}
				t.Fatalf("flags %v, want %v\n%s", got, tc.want, strings.Join(lines, "\n"))
			}
		})
	}
}

// A seed names one sequence of operations.
func TestWorkloadGenIsSeeded(t *testing.T) {
	v := View{Live: []TopicView{{Name: "wl-a", Inc: 1, Partitions: 3, Next: []int64{5, 0, 9}, Low: []int64{0, 0, 2}}}, Free: []string{"wl.b"}}
	draw := func(seed uint64) string {
		g := NewGen(seed, 1, DefaultWeights)
		var b strings.Builder
		for range 300 {
			op := g.Next(v, 1_700_000_000_000)
			fmt.Fprintln(&b, op)
			for _, r := range op.Records {
				if r.Partition < 0 || r.Partition >= 3 {
					t.Fatalf("%v: partition %d of 3", op, r.Partition)
				}
				fmt.Fprintf(&b, "%x %d:%08x %v\n", r.Rec.Key, len(r.Rec.Value), crc32.ChecksumIEEE(r.Rec.Value), r.Rec.Headers)
			}
		}
		return b.String()
	}
	if a, b := draw(7), draw(7); a != b {
		t.Fatal("seed 7 drew two different sequences")
	}
	if draw(7) == draw(8) {
		t.Fatal("seeds 7 and 8 drew the same sequence")
	}
}

// The generator's over-limit records are over one of the broker's limits,
// and the sizes it computes match the Kafka and engine encodings.
func TestWorkloadOversizeRecordsAreOverTheLimits(t *testing.T) {
	g := NewGen(1, 1, DefaultWeights)
	tv := TopicView{Name: "t", Partitions: 1, Next: []int64{0}, Low: []int64{0}}
	batch, engine := 0, 0
	for range 20 {
		op := g.oversize(Op{Kind: Produce, Topic: "t", Idempotent: g.rng.IntN(2) == 0}, tv, 1_700_000_000_000)
		r := op.Records[0]
		if !r.Oversize {
			t.Fatalf("value of %d bytes: inflated %d, engine %d; neither over the limit", len(r.Rec.Value), InflatedSize(&r.Rec), EngineSize(&r.Rec, op.Idempotent))
		}
		if InflatedSize(&r.Rec) > MaxBatchInflated {
			batch++
		} else {
			engine++
		}
	}
	if batch == 0 || engine == 0 {
		t.Fatalf("%d over the batch limit, %d over the engine's only: want both kinds", batch, engine)
	}
	// InflatedSize is what a Kafka producer encodes.
	for _, r := range []Rec{
		{},
		{Key: []byte{}, Value: make([]byte, 300), Timestamp: 5},
		{Key: []byte("k"), Headers: []Header{{IDHeader, []byte("w1-1")}, {"h", nil}, {"e", []byte{}}}},
	} {
		kr := kmsg.Record{Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		body := len(kr.AppendTo(nil)) - 1 // without its zero length prefix
		if want := varintLen(int64(body)) + body; InflatedSize(&r) != want {
			t.Errorf("InflatedSize(%+v) = %d, kmsg encodes %d", r, InflatedSize(&r), want)
		}
	}
	if EngineSize(&Rec{}, false) != record.MinSize+record.MetadataSize(&record.Record{}) {
		t.Error("EngineSize of an empty record")
	}
}
