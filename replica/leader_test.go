package replica

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestLeaderScripts drives the leader's state machine with the scripts in
// testdata/leader. Time is the script's: `at=D` (a duration since the start)
// sets the clock before the command, and never goes back.
//
//	leader replicas=1,2,3 isr=1,2,3 min-isr=2 lag=10s [mode=isr|quorum] [pepoch=P] [epoch-start=S] [log-end=E] [hw=H]
//	                            node 1 (the first replica) becomes leader
//	produce id=I n=N timeout=D  acks=all: CheckProduce; if OK, append N records and AwaitAck
//	append n=N                  the leader appends N records (acks=1, nobody waits)
//	await id=I base=B end=E timeout=D   AwaitAck alone, for records appended already
//	fetch node=F offset=O       follower F fetches at O
//	tick                        time passes
//	commit [isr=...] [pepoch=P] etcd took the pending proposal (or the controller wrote isr): ISRCommitted at partition epoch + 1 (or P)
//	refuse                      the pending proposal's compare-and-swap failed
//	deposed                     this node stopped leading
//	state                       hw, log end, committed ISR, pending proposal, followers' log ends
func TestLeaderScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/leader", func(t *testing.T, path string) {
		h := &leaderHarness{t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		h.now = h.t0
		datadriven.RunTest(t, path, h.run)
	})
}

type leaderHarness struct {
	t0, now time.Time
	l       *Leader
}

func (h *leaderHarness) run(t *testing.T, d *datadriven.TestData) string {
	a := args{t, d}
	if a.has("at") {
		at := h.t0.Add(a.dur("at"))
		if at.Before(h.now) {
			d.Fatalf(t, "at=%s is before the script's clock %s", a.str("at"), h.now.Sub(h.t0))
		}
		h.now = at
	}
	if d.Cmd != "leader" && h.l == nil {
		d.Fatalf(t, "%s before leader", d.Cmd)
	}
	switch d.Cmd {
	case "leader":
		mode := ModeISR
		if a.has("mode") {
			m, err := ParseMode(a.str("mode"))
			if err != nil {
				return fmt.Sprintf("error: %v\n", err)
			}
			mode = m
		}
		replicas := a.nodes("replicas")
		cfg := Config{Leader: replicas[0], Replicas: replicas, ISR: a.nodes("isr"), MinISR: int(a.int("min-isr")),
			LagTimeMax: a.dur("lag"), Mode: mode, PartitionEpoch: a.intOr("pepoch", 0),
			EpochStart: a.intOr("epoch-start", 0), LogEnd: a.intOr("log-end", 0), HighWatermark: a.intOr("hw", 0)}
		l, err := NewLeader(cfg, h.now)
		if err != nil {
			return fmt.Sprintf("error: %v\n", err)
		}
		h.l = l
		return h.state()
	case "produce":
		if r := h.l.CheckProduce(); r != OK {
			return fmt.Sprintf("refused before append: %s\n", r)
		}
		base := h.l.LogEnd()
		end := base + a.int("n")
		out, err := h.l.Appended(h.now, end)
		if err != nil {
			return printOutputs(out, err)
		}
		more, err := h.l.AwaitAck(h.now, ProduceID(a.int("id")), base, end, h.now.Add(a.dur("timeout")))
		return fmt.Sprintf("appended [%d, %d)\n", base, end) + printOutputs(append(out, more...), err)
	case "await":
		return printOutputs(h.l.AwaitAck(h.now, ProduceID(a.int("id")), a.int("base"), a.int("end"), h.now.Add(a.dur("timeout"))))
	case "append":
		return printOutputs(h.l.Appended(h.now, h.l.LogEnd()+a.int("n")))
	case "fetch":
		return printOutputs(h.l.FollowerFetched(h.now, int32(a.int("node")), a.int("offset")))
	case "tick":
		return printOutputs(h.l.Tick(h.now), nil)
	case "commit":
		_, pepoch := h.l.ISR()
		var isr []int32
		if a.has("isr") {
			isr = a.nodes("isr")
		} else {
			p, ok := h.l.Pending()
			if !ok {
				d.Fatalf(t, "commit: no pending proposal")
			}
			isr = p.ISR
		}
		return printOutputs(h.l.ISRCommitted(h.now, isr, a.intOr("pepoch", pepoch+1)))
	case "refuse":
		return printOutputs(h.l.ISRRefused(h.now), nil)
	case "deposed":
		return printOutputs(h.l.Deposed(), nil)
	case "state":
		return h.state()
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func (h *leaderHarness) state() string {
	var b strings.Builder
	isr, pepoch := h.l.ISR()
	fmt.Fprintf(&b, "hw=%d log-end=%d isr=%v@%d", h.l.HW(), h.l.LogEnd(), isr, pepoch)
	if p, ok := h.l.Pending(); ok {
		fmt.Fprintf(&b, " pending=%v", p.ISR)
	}
	b.WriteString("\n")
	for _, r := range h.l.cfg.Replicas {
		if r != h.l.cfg.Leader {
			fmt.Fprintf(&b, "follower %d: log-end=%d\n", r, h.l.FollowerLogEnd(r))
		}
	}
	return b.String()
}
