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
	{why: "the metadata both front ends answer from sits below them and the cluster, which implements it: it calls none of them, nor a database",
		from: []string{"strata/metadata"}, to: []string{"strata/api", "strata/cluster", "strata/replica", "strata/tiering", "strata/cmd",
			"github.com/cockroachdb/pebble", "go.etcd.io/etcd"}},
	{why: "the cluster's membership and placement sit below the front ends and the tiering job: they answer them, never call them",
		from: []string{"strata/cluster"}, to: []string{"strata/api", "strata/tiering"}},
	{why: "the leader's append path sits below replication, the cluster and the front ends: they take its gates and map its errors, it never calls them (it reaches replication through its own interface, and asks the metadata through the part of metadata.Cluster it needs)",
		from: []string{"strata/partition"}, to: []string{"strata/api", "strata/replica", "strata/cluster", "strata/catalog", "strata/tiering"}},
	{why: "the corruption marker sits below every layer that finds damage: it imports nothing of strata's",
		from: []string{"strata/engine/integrity"}, to: []string{"strata/"}},
	{why: "the in-process replication kit is for tests: no package of the service runs on its fakes",
		from: []string{"strata/"}, to: []string{"strata/replica/replicatest"}, except: []string{"strata/replica/replicatest"}},
	{why: "nothing imports the service's wiring",
		from: []string{"strata/"}, to: []string{"strata/cmd"}, except: []string{"strata/cmd"}},
	{why: "the node-to-node protocol (peer) is replication's wire and the front end's helper: it never calls the front ends, the cluster or tiering",
		from: []string{"strata/peer"}, to: []string{"strata/api", "strata/cluster", "strata/tiering"}},
	{why: "replication is a state machine under its transport: it knows neither the wire (peer), the front end nor the cluster; cmd wires them (a test kit may build any of them)",
		from: []string{"strata/replica"}, to: []string{"strata/peer", "strata/api", "strata/cluster"}, except: []string{"strata/replica/replicatest"}},
	{why: "the Kafka front end reaches replication and the cluster only through its interfaces and peer (a marked Fetch handed over, a split log's other parts read)",
		from: []string{"strata/api/kafka"}, to: []string{"strata/replica", "strata/cluster"}},
	{why: "the cluster agrees through etcd; the nodes' own requests to each other are peer's, which cmd wires",
		from: []string{"strata/cluster"}, to: []string{"strata/peer"}},
	{why: "tiering knows the topics' Iceberg tables only as its TableCommitter, which cmd sets",
		from: []string{"strata/tiering"}, to: []string{"strata/icetable"}},
	{why: "a table is planned from the bucket alone (the shards' manifests), never from a node's engine, catalog, front end or cluster",
		from: []string{"strata/icetable"}, to: []string{"strata/engine/segment", "strata/catalog", "strata/api", "strata/cluster", "strata/replica", "strata/peer", "strata/metadata"}},
	{why: "Iceberg's library (and the Arrow it brings) stays in icetable, behind the tables' own interface",
		from: []string{"strata/"}, to: []string{"github.com/apache/iceberg-go", "github.com/apache/arrow-go"}, except: []string{"strata/icetable"}},
	{why: "the schema registry stands beside the admin API: its decisions know no storage engine, tiering, cluster or front end; cmd wires it",
		from: []string{"strata/registry"}, to: []string{"strata/api", "strata/engine", "strata/catalog", "strata/tiering", "strata/cluster",
			"strata/metadata", "strata/partition", "strata/replica", "strata/peer", "strata/icetable", "strata/topicconfig"}},
	{why: "the registry's decisions are pure: only its store backends reach a database",
		from: []string{"strata/registry"}, to: []string{"github.com/cockroachdb/pebble", "go.etcd.io/etcd"}, except: []string{"strata/registry/pebblestore", "strata/registry/etcdstore"}},
	{why: "the registry's decisions are pure: only its REST API speaks HTTP",
		from: []string{"strata/registry"}, to: []string{"net/http"}, except: []string{"strata/registry/httpapi"}},
	{why: "typed columns are pure mapping: a schema in, column types and values out; no store, HTTP, engine, tiering or registry service",
		from: []string{"strata/typed"}, to: []string{"strata/api", "strata/engine", "strata/catalog", "strata/tiering", "strata/cluster",
			"strata/icetable", "strata/registry/pebblestore", "strata/registry/etcdstore", "strata/registry/httpapi", "net/http",
			"github.com/cockroachdb/pebble", "go.etcd.io/etcd"}},
	{why: "the registry knows nothing of the columns made from its schemas",
		from: []string{"strata/registry"}, to: []string{"strata/typed"}},
	{why: "the log cleaner's decisions are pure: the engine scans and rewrites, the cleaner only answers",
		from: []string{"strata/cleaner"}, to: []string{"strata/", "os", "net", "github.com/cockroachdb/pebble", "go.etcd.io/etcd"}},
}

// pending are edges a rule forbids that stay until the named work takes
// them out. The test fails once one is gone, so the list only shrinks.
var pending = []struct{ from, to, until string }{}

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
	pkgs := packages(t)
	seen := map[[2]string]bool{}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			seen[[2]string{p.ImportPath, imp}] = true
		}
	}
	allowed := map[[2]string]bool{}
	for _, e := range pending {
		if !seen[[2]string{e.from, e.to}] {
			broken = append(broken, fmt.Sprintf("%s no longer imports %s: take the edge off the pending list (%s)", e.from, e.to, e.until))
		}
		allowed[[2]string{e.from, e.to}] = true
	}
	for _, p := range pkgs {
		for _, r := range rules {
			if !under(p.ImportPath, r.from) || under(p.ImportPath, r.except) {
				continue
			}
			for _, imp := range p.Imports {
				if !under(imp, r.to) || allowed[[2]string{p.ImportPath, imp}] {
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
