// Package catalogtest is the contract every catalog.Catalog implementation
// passes: the lifecycle scripts in testdata, run against a real catalog.
package catalogtest

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"strata/catalog"
)

// testdata is this package's script folder, wherever the test runs.
func testdata(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("catalogtest: cannot find its testdata")
	}
	return filepath.Join(filepath.Dir(file), "testdata")
}

// The catalog's lifecycle as scripts (testdata/*): each command changes or
// prints the catalog; "reopen" closes and opens it again, so every script
// also checks what survives a restart.
//
//	create shard=S                       a shard and its active segment 0
//	roll shard=S no=N end=E [records=R]  seal N at end offset E, start N+1
//	move shard=S no=N from=X to=Y        a lifecycle step (Transition)
//	low shard=S to=L                     raise the low watermark
//	restore shard=S                      restore S from the segments in the input (no state start-end per line)
//	delete shard=S
//	show [shard=S]                       shards, or one shard's segments
//	from shard=S offset=O max=M          the numbers SegmentsFrom lists (checked against Segments)
//	put-topic topic=T version=V          write T's configs (key=value lines) over version V
//	delete-topic topic=T
//	show-topics                          every topic record with its version and configs
//	reopen
//
// Run runs every script against catalogs made by open; reopen must give the
// catalog open made, as a restarted node finds it.
func Run(t *testing.T, open func(t *testing.T) (c catalog.Catalog, reopen func() catalog.Catalog)) {
	datadriven.Walk(t, testdata(t), func(t *testing.T, path string) {
		c, reopen := open(t)
		defer func() { c.Close() }()
		now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var shard, topic string
			var version uint64
			var no, end, records, low, offset uint64
			max := 0
			var from, to string
			var nos []uint64
			for _, a := range d.CmdArgs {
				switch a.Key {
				case "shard":
					d.ScanArgs(t, "shard", &shard)
				case "topic":
					d.ScanArgs(t, "topic", &topic)
				case "version":
					d.ScanArgs(t, "version", &version)
				case "no":
					d.ScanArgs(t, "no", &no)
				case "end":
					d.ScanArgs(t, "end", &end)
				case "records":
					d.ScanArgs(t, "records", &records)
				case "offset":
					d.ScanArgs(t, "offset", &offset)
				case "max":
					d.ScanArgs(t, "max", &max)
				case "from":
					d.ScanArgs(t, "from", &from)
				case "nos":
					for _, v := range a.Vals {
						n, err := strconv.ParseUint(v, 10, 64)
						if err != nil {
							t.Fatalf("nos: %v", err)
						}
						nos = append(nos, n)
					}
				case "to":
					if d.Cmd == "low" {
						d.ScanArgs(t, "to", &low)
					} else {
						d.ScanArgs(t, "to", &to)
					}
				}
			}
			var err error
			switch d.Cmd {
			case "create":
				_, _, err = c.CreateShard(shard, now)
			case "roll": // as the engine does: the segment's record, finished
				segs, _ := c.Segments(shard)
				seg := catalog.Segment{Shard: shard, No: no}
				for _, s := range segs {
					if s.No == no {
						seg = s
					}
				}
				seg.EndOffset, seg.Records = end, records
				_, err = c.Roll(seg, now)
			case "move":
				_, err = c.Transition(shard, no, catalog.State(from), catalog.State(to), nil)
			case "low":
				_, err = c.SetLowWatermark(shard, low)
			case "merge": // as a merge of their objects does
				var m catalog.Segment
				m, err = c.Merge(shard, nos, func(s *catalog.Segment) { s.ObjectKey, s.ObjectSize, s.Checksum = "merged", 7, 42 })
				if err == nil && (m.ObjectKey != "merged" || m.Checksum != 42 || m.State != catalog.Remote) {
					t.Fatalf("merge returned %+v: the change is not applied or the segment not remote", m)
				}
			case "restore":
				var segs []catalog.Segment
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					var s catalog.Segment
					var state string
					if _, err := fmt.Sscanf(line, "%d %s %d-%d", &s.No, &state, &s.StartOffset, &s.EndOffset); err != nil {
						t.Fatalf("restore: %q: %v", line, err)
					}
					s.Shard, s.State = shard, catalog.State(state)
					segs = append(segs, s)
				}
				err = c.Restore(catalog.Shard{Name: shard}, segs)
			case "delete":
				err = c.DeleteShard(shard)
			case "show":
				return show(t, c, shard)
			case "from":
				return segmentsFrom(t, c, shard, offset, max)
			case "put-topic":
				tp := catalog.Topic{Name: topic, Version: version, Created: now}
				for _, line := range strings.Fields(d.Input) {
					k, v, _ := strings.Cut(line, "=")
					if tp.Configs == nil {
						tp.Configs = map[string]string{}
					}
					tp.Configs[k] = v
				}
				written, err := c.PutTopic(tp)
				if err != nil {
					return "error: " + err.Error()
				}
				if got, err := c.Topic(topic); err != nil || showTopic(got) != showTopic(written) {
					t.Fatalf("put-topic wrote %s, reads back %s (%v)", showTopic(written), showTopic(got), err)
				}
				return showTopic(written) + "\n"
			case "delete-topic":
				err = c.DeleteTopic(topic)
			case "show-topics":
				topics, err := c.Topics()
				if err != nil {
					return "error: " + err.Error()
				}
				var b strings.Builder
				for _, tp := range topics {
					b.WriteString(showTopic(tp) + "\n")
				}
				return b.String()
			case "reopen":
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				c = reopen()
				return "ok"
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			if err != nil {
				return "error: " + err.Error()
			}
			return "ok"
		})
	})
}

func showTopic(tp catalog.Topic) string {
	out := fmt.Sprintf("%s v%d", tp.Name, tp.Version)
	keys := make([]string, 0, len(tp.Configs))
	for k := range tp.Configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out += " " + k + "=" + tp.Configs[k]
	}
	return out
}

func show(t *testing.T, c catalog.Catalog, shard string) string {
	var b strings.Builder
	if shard == "" {
		shards, err := c.Shards()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range shards {
			fmt.Fprintf(&b, "%s low=%d\n", s.Name, s.LowWatermark)
		}
		return b.String()
	}
	segs, err := c.Segments(shard)
	if err != nil {
		return "error: " + err.Error()
	}
	for _, s := range segs {
		fmt.Fprintf(&b, "%d %s %d-", s.No, s.State, s.StartOffset)
		if s.State != catalog.Active {
			fmt.Fprintf(&b, "%d", s.EndOffset)
		}
		fmt.Fprintf(&b, " local=%t\n", s.State.Local())
	}
	return b.String()
}

// segmentsFrom prints the numbers SegmentsFrom lists, after checking them
// against what a walk of Segments gives.
func segmentsFrom(t *testing.T, c catalog.Catalog, shard string, offset uint64, max int) string {
	got, err := c.SegmentsFrom(shard, offset, max)
	if err != nil {
		return "error: " + err.Error()
	}
	all, err := c.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	at := 0
	for i, s := range all {
		if s.StartOffset <= offset {
			at = i
		}
	}
	want := all[at:min(len(all), at+max)]
	if len(all) == 0 {
		want = nil
	}
	var b strings.Builder
	for i, s := range got {
		if i >= len(want) || s.No != want[i].No || s.StartOffset != want[i].StartOffset {
			t.Fatalf("SegmentsFrom(%s, %d, %d) = %v, walking Segments gives %v", shard, offset, max, got, want)
		}
		fmt.Fprintf(&b, "%d ", s.No)
	}
	if len(got) != len(want) {
		t.Fatalf("SegmentsFrom(%s, %d, %d) listed %d segments, walking Segments gives %d", shard, offset, max, len(got), len(want))
	}
	if len(got) == 0 {
		return "none\n"
	}
	return strings.TrimSpace(b.String()) + "\n"
}
