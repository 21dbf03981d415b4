package replica

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestEpochScripts drives EpochHistory with the scripts in testdata/epoch.
//
//	history name=A        append each input line "epoch@start" to history A (created empty)
//	end-offset name=A log-end=N epochs=E,...   OffsetForLeaderEpoch for each epoch
//	truncate follower=A follower-end=N leader=B leader-end=M   where A must truncate before fetching from B
//	truncate-from-end name=A end=N
//	truncate-from-start name=A start=N
func TestEpochScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/epoch", func(t *testing.T, path string) {
		hs := map[string]*EpochHistory{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			a := args{t, d}
			get := func(key string) *EpochHistory {
				h := hs[a.str(key)]
				if h == nil {
					d.Fatalf(t, "no history %q", a.str(key))
				}
				return h
			}
			var out strings.Builder
			switch d.Cmd {
			case "history":
				h := &EpochHistory{}
				hs[a.str("name")] = h
				for _, line := range strings.Fields(d.Input) {
					e, s, ok := strings.Cut(line, "@")
					epoch, err1 := strconv.ParseInt(e, 10, 32)
					start, err2 := strconv.ParseInt(s, 10, 64)
					if !ok || err1 != nil || err2 != nil {
						d.Fatalf(t, "%q: want epoch@start", line)
					}
					if err := h.Append(int32(epoch), start); err != nil {
						fmt.Fprintf(&out, "error: %v\n", err)
					}
				}
			case "end-offset":
				h := get("name")
				for _, e := range a.nodes("epochs") {
					epoch, off := h.EndOffsetFor(e, a.int("log-end"))
					fmt.Fprintf(&out, "epoch %d: epoch %d, end offset %d\n", e, epoch, off)
				}
				return out.String()
			case "truncate":
				at, err := get("follower").TruncationPoint(a.int("follower-end"), get("leader"), a.int("leader-end"))
				if err != nil {
					return fmt.Sprintf("error: %v\n", err)
				}
				return fmt.Sprintf("truncate to %d\n", at)
			case "truncate-from-end":
				get("name").TruncateFromEnd(a.int("end"))
			case "truncate-from-start":
				get("name").TruncateFromStart(a.int("start"))
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			name := a.str("name")
			fmt.Fprintf(&out, "%s\n", hs[name])
			return out.String()
		})
	})
}

// historyOf builds the history of a log given as each offset's epoch, plus a
// current epoch that may have written nothing yet.
func historyOf(t *testing.T, log []int32, current int32) *EpochHistory {
	h := &EpochHistory{}
	for o, e := range log {
		if err := h.Append(e, int64(o)); err != nil {
			t.Fatalf("history of %v: %v", log, err)
		}
	}
	if err := h.Append(current, int64(len(log))); err != nil {
		t.Fatalf("history of %v: current epoch %d: %v", log, current, err)
	}
	return h
}

// TestTruncationPointRandom checks TruncationPoint against logs where a
// record is known by its epoch and offset: with one leader per epoch, two
// replicas hold the same record at an offset exactly when their epochs
// there are equal, and then agree on everything before it. A follower's log
// shares a prefix with the leader's, may continue the last shared epoch
// past where the leader's ended, then has epochs the leader never had. The
// truncation point must be the longest common prefix: no shorter (it would
// throw away committed records for nothing) and no longer (two records at
// one offset).
func TestTruncationPointRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 101))
	for i := range 20000 {
		var leader []int32
		epoch := int32(0)
		used := map[int32]bool{}
		for range r.IntN(5) {
			epoch += 1 + int32(r.IntN(3))
			used[epoch] = true
			for range 1 + r.IntN(4) {
				leader = append(leader, epoch)
			}
		}
		k := r.IntN(len(leader) + 1)
		follower := slices.Clone(leader[:k])
		next := int32(0)
		if k > 0 {
			next = leader[k-1]
			// The leader of the last shared epoch may have written more that
			// this leader never got, if this leader's copy of it ends at k.
			if k == len(leader) || leader[k] != next {
				for range r.IntN(3) {
					follower = append(follower, next)
				}
			}
		}
		for range r.IntN(3) {
			next++
			for used[next] {
				next++
			}
			used[next] = true
			for range 1 + r.IntN(3) {
				follower = append(follower, next)
			}
		}
		maxEpoch := epoch
		for e := range used {
			maxEpoch = max(maxEpoch, e)
		}
		lh := historyOf(t, leader, maxEpoch+1)
		fh := &EpochHistory{}
		for o, e := range follower {
			if err := fh.Append(e, int64(o)); err != nil {
				t.Fatal(err)
			}
		}
		lcp := 0
		for lcp < min(len(leader), len(follower)) && leader[lcp] == follower[lcp] {
			lcp++
		}
		got, err := fh.TruncationPoint(int64(len(follower)), lh, int64(len(leader)))
		if err != nil || got != int64(lcp) {
			t.Fatalf("case %d: leader %v (history %v), follower %v (history %v): truncate to %d, %v; want %d",
				i, leader, lh, follower, fh, got, err, lcp)
		}
	}
}

func TestEpochHistoryRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []EpochEntry
	}{
		{"empty", nil},
		{"one", []EpochEntry{{0, 0}}},
		{"several", []EpochEntry{{0, 0}, {1, 40}, {4, 41}, {9, 1000}}},
		{"retention moved the start", []EpochEntry{{3, 1 << 40}, {7, 1<<40 + 5}}},
		{"largest", []EpochEntry{{2147483646, 9223372036854775806}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &EpochHistory{}
			for _, e := range tc.entries {
				if err := h.Append(e.Epoch, e.Start); err != nil {
					t.Fatal(err)
				}
			}
			b := h.Encode()
			got, err := DecodeEpochHistory(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !slices.Equal(got.Entries(), h.Entries()) {
				t.Fatalf("round trip: %v, want %v", got, h)
			}
			if again := got.Encode(); !bytes.Equal(again, b) {
				t.Fatalf("re-encoding changed the bytes: %x, want %x", again, b)
			}
		})
	}
}
