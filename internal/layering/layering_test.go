// Package layering holds the test that keeps strata's imports flowing the
// way docs/seams.md's rules say: it reads every package's imports (not
// its tests') with `go list` and fails on an edge the rules forbid.
package layering

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// A rule forbids packages under From (a strata path prefix) from importing
// any path starting with one of To, except packages under Except.
type rule struct {
	why    string
	from   []string
	to     []string
	except []string
}

var rules = []rule{
	{why: "the engine never waits on anything above it: no catalog, tiering, object store or API",
		from: []string{"strata/engine"}, to: []string{"strata/catalog", "strata/tiering", "strata/api", "strata/cmd"}},
	{why: "the API layer translates protocols; storage engines and the meta-service's databases stay below it",
		from: []string{"strata/api"}, to: []string{"github.com/cockroachdb/pebble", "go.etcd.io/etcd"}},
	{why: "only cmd picks concrete object-store backends",
		from: []string{"strata/"}, to: []string{"strata/tiering/objstore/s3", "strata/tiering/objstore/hdfs", "strata/tiering/objstore/local"},
		except: []string{"strata/cmd", "strata/tiering/objstore/", "strata/internal/testsvc", "strata/bench"}},
	{why: "only cmd schedules (cron)",
		from: []string{"strata/"}, to: []string{"github.com/robfig/cron"}, except: []string{"strata/cmd"}},
	{why: "the cluster's membership and placement sit below the front ends and the tiering job: they answer them, never call them",
		from: []string{"strata/cluster"}, to: []string{"strata/api", "strata/tiering"}},
	{why: "nothing imports the service's wiring",
		from: []string{"strata/"}, to: []string{"strata/cmd"}, except: []string{"strata/cmd"}},
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func packages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "strata/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; the test would prove nothing", len(pkgs))
	}
	return pkgs
}

func under(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if path == strings.TrimSuffix(p, "/") || strings.HasPrefix(path, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

func TestImportRules(t *testing.T) {
	var broken []string
	for _, p := range packages(t) {
		for _, r := range rules {
			if !under(p.ImportPath, r.from) || under(p.ImportPath, r.except) {
				continue
			}
			for _, imp := range p.Imports {
				if !under(imp, r.to) {
					continue
				}
				broken = append(broken, fmt.Sprintf("%s imports %s: %s", p.ImportPath, imp, r.why))
			}
		}
	}
	sort.Strings(broken)
	for _, b := range broken {
		t.Error(b)
	}
}
