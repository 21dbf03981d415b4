package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/internal/testsvc"
)

// A SCRAM password set or rotated with AlterUserScramCredentials on one
// node holds on every node: the credentials are the cluster's, in etcd,
// and each node watches them. After a rotation on node 1 the old password
// is refused on nodes 2 and 3 within the watch delay and the new one
// works, also on node 3 restarted; a removed credential stops working on
// every node.
func TestRotatedPasswordHoldsOnEveryNode(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.yaml")
	testsvc.WriteFileAtomic(t, users, []byte(`users:
  - name: root
    password: root-secret
    permissions: [{operation: admin, topic_prefix: ""}]
  - name: app
    permissions: [{operation: consume, topic_prefix: "app."}]
`))
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"kafka.sasl.mechanisms=[SCRAM-SHA-512]", "kafka.sasl.users_file=" + users, "cluster.peer_user=root"},
		opts: []kgo.Opt{kgo.SASL(scram.Auth{User: "root", Pass: "root-secret"}.AsSha512Mechanism())}}
	for id := int32(1); id <= 3; id++ {
		c.add(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.client(1))
	setPassword := func(pass string) {
		t.Helper()
		resp, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "app", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: pass}})
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("setting app's password to %q on node 1: %v", pass, err)
		}
	}
	// login says whether app signs in to node id with pass.
	login := func(id int32, pass string) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.nodes[id].Kafka), kgo.SASL(scram.Auth{User: "app", Pass: pass}.AsSha512Mechanism()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return cl.Ping(pctx)
	}
	// within waits up to the watch delay for every node to answer as want.
	within := func(what, pass string, want bool, ids ...int32) {
		t.Helper()
		for _, id := range ids {
			deadline := time.Now().Add(5 * time.Second)
			for {
				err := login(id, pass)
				if (err == nil) == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: app with password %q on node %d: %v; want ok=%v", what, pass, id, err, want)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	setPassword("old")
	within("set on node 1", "old", true, 1, 2, 3)
	setPassword("new")
	within("rotated on node 1", "old", false, 1, 2, 3)
	within("rotated on node 1", "new", true, 1, 2, 3)

	c.nodes[3].Stop()
	c.nodes[3].Restart()
	within("node 3 restarted", "old", false, 3)
	within("node 3 restarted", "new", true, 3)

	resp, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "app", Mechanism: kadm.ScramSha512}}, nil)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	within("removed on node 1", "new", false, 1, 2, 3)
}
