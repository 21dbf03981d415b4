package replica

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestSealScripts drives the pure seal decisions (DecideSeal, SettleSeals,
// SealReports) from the scripts in testdata/seal. A seal is written
// start-last/crc, the checksum in hex.
func TestSealScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/seal", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			a := args{t, d}
			switch d.Cmd {
			case "decide", "whole":
				own := parseSeal(t, d, a.str("own"))
				reports := map[int32]Seal{}
				for _, line := range lines(d) {
					node, s, ok := strings.Cut(line, ":")
					n, err := strconv.ParseInt(strings.TrimSpace(node), 10, 32)
					if !ok || err != nil {
						d.Fatalf(t, "want node: seal, got %q", line)
					}
					reports[int32(n)] = parseSeal(t, d, strings.TrimSpace(s))
				}
				var overdue []int32
				if a.has("overdue") {
					overdue = a.nodes("overdue")
				}
				if d.Cmd == "whole" {
					whole, v, ok := DecideWhole(int32(a.int("leader")), own, a.nodes("isr"), reports, overdue)
					switch {
					case !ok:
						return "no whole reported\n"
					case v.Wait:
						return "wait\n"
					case len(v.Replicas) == 0:
						return fmt.Sprintf("no record: differ %v overdue %v\n", v.Differ, v.Overdue)
					}
					return fmt.Sprintf("record %s replicas %v differ %v overdue %v\n", whole, v.Replicas, v.Differ, v.Overdue)
				}
				v := DecideSeal(int32(a.int("leader")), own, a.nodes("isr"), reports, overdue)
				if v.Wait {
					return "wait\n"
				}
				return fmt.Sprintf("replicas %v differ %v overdue %v\n", v.Replicas, v.Differ, v.Overdue)
			case "settle":
				var local []Seal
				records := map[uint64]SealRecord{}
				for _, line := range lines(d) {
					f := strings.Fields(line)
					switch {
					case len(f) == 2 && f[0] == "local":
						local = append(local, parseSeal(t, d, f[1]))
					case len(f) == 3 && f[0] == "record":
						s := parseSeal(t, d, f[1])
						records[s.Start] = SealRecord{Seal: s, Replicas: parseNodes(t, d, f[2])}
					default:
						d.Fatalf(t, "want local SEAL or record SEAL NODES, got %q", line)
					}
				}
				var logStart uint64
				if a.has("log-start") {
					logStart = uint64(a.int("log-start"))
				}
				return printStates(SettleSeals(int32(a.int("self")), a.nodes("replicas"), logStart, local, records))
			case "reports":
				var seals []SealState
				for _, line := range lines(d) {
					f := strings.Fields(line)
					s := SealState{Seal: parseSeal(t, d, f[0])}
					if len(f) == 2 {
						s.Recorded = parseNodes(t, d, f[1])
					}
					seals = append(seals, s)
				}
				var b strings.Builder
				for _, s := range SealReports(int32(a.int("self")), seals, int(a.int("max"))) {
					fmt.Fprintln(&b, s)
				}
				if b.Len() == 0 {
					return "nothing\n"
				}
				return b.String()
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

func lines(d *datadriven.TestData) []string {
	var out []string
	for _, l := range strings.Split(d.Input, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func parseSeal(t *testing.T, d *datadriven.TestData, s string) Seal {
	span, crc, ok1 := strings.Cut(s, "/")
	first, last, ok2 := strings.Cut(span, "-")
	a, err1 := strconv.ParseUint(first, 10, 64)
	b, err2 := strconv.ParseUint(last, 10, 64)
	c, err3 := strconv.ParseUint(crc, 16, 32)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil {
		d.Fatalf(t, "seal %q: want start-last/crc", s)
	}
	return Seal{Start: a, Last: b, CRC: uint32(c)}
}

// parseNodes reads "[1,2]" or "1,2"; "[]" is an empty list.
func parseNodes(t *testing.T, d *datadriven.TestData, s string) []int32 {
	out := []int32{}
	for _, v := range strings.Split(strings.Trim(s, "[]"), ",") {
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			d.Fatalf(t, "nodes %q: %v", s, err)
		}
		out = append(out, int32(n))
	}
	return out
}

func printStates(ss []SealState) string {
	var b strings.Builder
	for _, s := range ss {
		if s.Whole != nil {
			fmt.Fprintf(&b, "%s: the tail of %s recorded %v\n", s.Seal, s.Whole.Seal, s.Whole.Replicas)
		} else if s.Recorded == nil {
			fmt.Fprintf(&b, "%s: no record\n", s.Seal)
		} else {
			fmt.Fprintf(&b, "%s: recorded %v\n", s.Seal, s.Recorded)
		}
	}
	if b.Len() == 0 {
		return "all settled\n"
	}
	return b.String()
}
