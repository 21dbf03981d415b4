package replica

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// args reads a script command's key=value arguments.
type args struct {
	t *testing.T
	d *datadriven.TestData
}

func (a args) has(key string) bool { return a.d.HasArg(key) }

func (a args) str(key string) string {
	for _, ca := range a.d.CmdArgs {
		if ca.Key == key {
			return strings.Join(ca.Vals, ",")
		}
	}
	a.d.Fatalf(a.t, "%s: missing %s=", a.d.Cmd, key)
	return ""
}

func (a args) int(key string) int64 {
	n, err := strconv.ParseInt(a.str(key), 10, 64)
	if err != nil {
		a.d.Fatalf(a.t, "%s=%q: %v", key, a.str(key), err)
	}
	return n
}

func (a args) intOr(key string, def int64) int64 {
	if !a.has(key) {
		return def
	}
	return a.int(key)
}

func (a args) dur(key string) time.Duration {
	v, err := time.ParseDuration(a.str(key))
	if err != nil {
		a.d.Fatalf(a.t, "%s=%q: %v", key, a.str(key), err)
	}
	return v
}

func (a args) nodes(key string) []int32 {
	var out []int32
	for _, ca := range a.d.CmdArgs {
		if ca.Key != key {
			continue
		}
		for _, v := range strings.Split(strings.Join(ca.Vals, ","), ",") {
			if v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				a.d.Fatalf(a.t, "%s=%q: %v", key, v, err)
			}
			out = append(out, int32(n))
		}
		return out
	}
	a.d.Fatalf(a.t, "%s: missing %s=", a.d.Cmd, key)
	return nil
}

func printOutputs(out []Output, err error) string {
	var b strings.Builder
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
	}
	for _, o := range out {
		fmt.Fprintln(&b, o)
	}
	if b.Len() == 0 {
		return "nothing\n"
	}
	return b.String()
}
