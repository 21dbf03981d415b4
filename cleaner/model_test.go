package cleaner

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The model test runs the cleaner's decisions over a log held in memory,
// as the engine will over segment files: records are produced over
// simulated time, segments roll, and cleanings come at random, each
// planned, mapped (with a map small enough to fill) and rewritten with
// Keep. After every step a consumer reading from offset 0 must end with
// each key's newest state, and the log must be a subsequence of what was
// produced.

type modelRecord struct {
	Record
	value string
	at    time.Time
}

type modelSegment struct {
	Segment
	records []modelRecord
}

type modelLog struct {
	segs       []*modelSegment
	next       uint64
	firstDirty uint64
	produced   map[uint64]modelRecord
	newest     map[string]modelRecord
}

// produce appends a record; a nil key is a keyless one (written before
// the topic became compacted), which no consumer's state is made of.
func (l *modelLog) produce(now time.Time, key []byte, value string, tombstone bool) {
	act := l.segs[len(l.segs)-1]
	r := modelRecord{Record: Record{Offset: l.next, Key: key, Tombstone: tombstone}, value: value, at: now}
	if len(act.records) == 0 {
		act.MinTimestamp = now
	}
	act.records = append(act.records, r)
	act.End, act.Bytes, act.MaxTimestamp = l.next+1, act.Bytes+int64(len(key)+len(value)+10), now
	l.produced[l.next] = r
	if key != nil {
		l.newest[string(key)] = r
	}
	l.next++
}

func (l *modelLog) roll() {
	act := l.segs[len(l.segs)-1]
	if len(act.records) == 0 {
		return
	}
	act.Active = false
	l.segs = append(l.segs, &modelSegment{Segment: Segment{No: act.No + 1, Start: l.next, End: l.next, Active: true}})
}

// freeze uploads the oldest segment still local: the cold tier has it
// as it is now, and the cleaner may no longer rewrite it.
func (l *modelLog) freeze() {
	for _, s := range l.segs {
		if !s.Frozen && !s.Active {
			s.Frozen = true
			return
		}
	}
}

func (l *modelLog) partition() Partition {
	p := Partition{FirstDirty: l.firstDirty}
	for _, s := range l.segs {
		p.Segments = append(p.Segments, s.Segment)
	}
	return p
}

// clean is one cleaning as the engine runs it.
func (l *modelLog) clean(t *testing.T, now time.Time, c Config, mapBytes int) string {
	plan := PlanPartition(now, l.partition(), c)
	if !plan.Clean {
		return plan.Why
	}
	m := NewOffsetMap(mapBytes)
	mapped := plan.End
scan:
	for _, s := range l.segs {
		for _, r := range s.records {
			if r.Offset < plan.FirstDirty || r.Offset >= plan.End {
				continue
			}
			if !m.Put(r.Key, r.Offset) {
				mapped = r.Offset
				break scan
			}
		}
	}
	plan, err := plan.Mapped(mapped)
	if err != nil {
		return err.Error()
	}
	for _, rw := range plan.Rewrite {
		var s *modelSegment
		for _, x := range l.segs {
			if x.No == rw.No {
				s = x
			}
		}
		var kept []modelRecord
		var bytes int64
		for _, r := range s.records {
			if Keep(m, rw, r.Record) {
				kept = append(kept, r)
				bytes += int64(len(r.Key) + len(r.value) + 10)
			}
		}
		s.records, s.Bytes = kept, bytes
		if s.FirstCleaned.IsZero() {
			s.FirstCleaned = now
		}
	}
	l.firstDirty = plan.End
	return fmt.Sprintf("cleaned [%d, %d) in %d segments", plan.FirstDirty, plan.End, len(plan.Rewrite))
}

// check is what a consumer reading from offset 0 sees.
func (l *modelLog) check(t *testing.T, now time.Time, c Config) {
	t.Helper()
	last := map[string]modelRecord{}
	prev := int64(-1)
	for _, s := range l.segs {
		for _, r := range s.records {
			if int64(r.Offset) <= prev || r.Offset < s.Start || r.Offset >= s.End {
				t.Fatalf("segment %d [%d, %d): offset %d after %d", s.No, s.Start, s.End, r.Offset, prev)
			}
			prev = int64(r.Offset)
			if p := l.produced[r.Offset]; p.value != r.value || string(p.Key) != string(r.Key) || (p.Key == nil) != (r.Key == nil) || p.Tombstone != r.Tombstone {
				t.Fatalf("offset %d reads %q=%q; %q=%q was produced there", r.Offset, r.Key, r.value, p.Key, p.value)
			}
			if r.Key != nil {
				last[string(r.Key)] = r
			}
		}
	}
	for k, want := range l.newest {
		got, ok := last[k]
		switch {
		case ok && got.Offset == want.Offset:
		case !ok && want.Tombstone && l.tombstoneMayGo(now, want, c):
		default:
			t.Fatalf("key %s: a consumer from 0 ends at offset %d (%v); its newest record is offset %d (tombstone %v)", k, got.Offset, ok, want.Offset, want.Tombstone)
		}
	}
}

func (l *modelLog) tombstoneMayGo(now time.Time, r modelRecord, c Config) bool {
	for _, s := range l.segs {
		if r.Offset >= s.Start && r.Offset < s.End {
			return !s.FirstCleaned.IsZero() && now.Sub(s.FirstCleaned) >= c.DeleteRetention
		}
	}
	return false
}

func TestModelConsumerSeesEachKeysNewest(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 28))
			c := Config{MinDirtyRatio: []float64{0, 0.3, 0.5, 0.9}[rnd.IntN(4)], DeleteRetention: time.Duration(rnd.IntN(4)) * time.Hour,
				MinLag: time.Duration(rnd.IntN(3)) * 30 * time.Minute, MaxLag: time.Duration(rnd.IntN(3)) * 3 * time.Hour}
			mapBytes := (5 + rnd.IntN(60)) * slotBytes
			keys := 3 + rnd.IntN(40)
			freezes := seed%2 == 1
			l := &modelLog{segs: []*modelSegment{{Segment: Segment{No: 1, Active: true}}}, produced: map[uint64]modelRecord{}, newest: map[string]modelRecord{}}
			now := t0
			cleanings := 0
			for step := range 3000 {
				switch n := rnd.IntN(100); {
				case n < 75:
					var k []byte
					switch n := rnd.IntN(keys + 2); n {
					case keys: // keyless
					case keys + 1:
						k = []byte{}
					default:
						k = fmt.Appendf(nil, "k%d", n)
					}
					l.produce(now, k, fmt.Sprintf("v%d", step), rnd.IntN(10) == 0)
				case n < 85:
					l.roll()
				case n < 87 && freezes:
					l.freeze()
				case n < 95:
					now = now.Add(time.Duration(rnd.IntN(40)) * time.Minute)
				default:
					if why := l.clean(t, now, c, mapBytes); len(why) > 7 && why[:7] == "cleaned" {
						cleanings++
					}
				}
				l.check(t, now, c)
			}
			if cleanings == 0 {
				t.Errorf("no cleaning ran in 3000 steps (config %+v)", c)
			}
			var left int
			for _, s := range l.segs {
				left += len(s.records)
			}
			t.Logf("%d records produced over %d keys, %d left after %d cleanings", l.next, keys, left, cleanings)
		})
	}
}
