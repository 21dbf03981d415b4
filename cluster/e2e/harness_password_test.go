package e2e

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/internal/testsvc"
	"strata/internal/workload/harness"
)

// Password changes in the harness (docs/testing.md, "Password changes"):
// the nodes run with SASL (SCRAM-SHA-512) on their one Kafka listener, the
// harness's own clients and the nodes' replication as the administrator
// root; the user rotor's password is changed now and then on one node
// (AlterUserScramCredentials), and every node is then asked to log rotor
// in with the replaced password and with the new one.
const (
	rootUser, rootPass = "root", "root-secret"
	rotor              = "rotor"
	// adminToken: with SASL on, the admin API serves only health and
	// metrics without one (docs/kafka.md); the harness asks it for
	// tiering runs and segment views.
	adminToken = "harness-admin-token"
	// checkIP is the address the login checks come from. A failed login
	// mutes its client's IP on that node until a login from it succeeds
	// (docs/kafka.md); on 127.0.0.1 that would stall the producers and the
	// nodes' replication, on 127.0.0.2 only the checks themselves.
	checkIP = "127.0.0.2"
)

// harnessSASL writes the users file into dir and returns the nodes'
// settings for SASL.
func harnessSASL(t testing.TB, dir string) []string {
	users := filepath.Join(dir, "users.yaml")
	testsvc.WriteFileAtomic(t, users, []byte(`users:
  - name: `+rootUser+`
    password: `+rootPass+`
    permissions: [{operation: admin, topic_prefix: ""}]
  - name: `+rotor+`
    permissions: [{operation: consume, topic_prefix: "`+mainTopic+`"}]
`))
	return []string{"kafka.sasl.mechanisms=[SCRAM-SHA-512]", "kafka.sasl.users_file=" + users, "cluster.peer_user=" + rootUser,
		"admin_token=" + adminToken}
}

func rootSASL() kgo.Opt {
	return kgo.SASL(scram.Auth{User: rootUser, Pass: rootPass}.AsSha512Mechanism())
}

// passwordOf is generation gen's password: each change sets another.
func passwordOf(gen int) string { return fmt.Sprintf("rotor-pass-%d", gen) }

// passwords is the state of the rotations: the generation last sent, and
// the checks in flight.
type passwords struct {
	// changing orders the changes: the last write wins in etcd, so two at
	// once could leave the older generation in place.
	changing sync.Mutex
	mu       sync.Mutex
	gen      int
	checks   sync.WaitGroup
	// faults are the spans [from, to) the faults were in play, each with
	// the time after it that the nodes take to recover.
	faults [][2]time.Duration
}

// faultRecovery is how long after a fault ends its nodes may still be
// starting, rejoining or catching up on etcd's watch.
const faultRecovery = 15 * time.Second

func (hc *harnessCluster) faultBegins() time.Duration {
	t := hc.now()
	hc.pw.mu.Lock()
	hc.pw.faults = append(hc.pw.faults, [2]time.Duration{t, 1 << 62})
	hc.pw.mu.Unlock()
	return t
}

func (hc *harnessCluster) faultEnds() {
	t := hc.now()
	hc.pw.mu.Lock()
	hc.pw.faults[len(hc.pw.faults)-1][1] = t + faultRecovery
	hc.pw.mu.Unlock()
}

// faulted: a fault was in play, or recovering, at some time in [from, to].
func (hc *harnessCluster) faulted(from, to time.Duration) bool {
	hc.pw.mu.Lock()
	defer hc.pw.mu.Unlock()
	for _, f := range hc.pw.faults {
		if f[0] <= to && from < f[1] {
			return true
		}
	}
	return false
}

// changePassword sets rotor's next password through node id alone (the
// request goes to that node, not to any broker the client picks) and,
// once it is acknowledged, checks every node after harness.PasswordBound.
func (hc *harnessCluster) changePassword(id int32, check bool) {
	hc.pw.changing.Lock()
	defer hc.pw.changing.Unlock()
	hc.pw.mu.Lock()
	hc.pw.gen++
	gen := hc.pw.gen - 1 // the first change sets generation 0
	hc.pw.mu.Unlock()
	t0 := hc.now()
	err := hc.alterPassword(id, passwordOf(gen))
	t1 := hc.now()
	hc.h.AddPassword(harness.PasswordSet{Gen: gen, Node: id, OK: err == nil, T0: t0, T1: t1})
	if err != nil {
		hc.note("password %d on node %d: %v", gen, id, err)
		return
	}
	if !check {
		return
	}
	hc.pw.checks.Add(1)
	go func() {
		defer hc.pw.checks.Done()
		time.Sleep(time.Until(hc.start.Add(t1 + harness.PasswordBound)))
		hc.checkLogins(t0, gen, id, false)
	}()
}

// checkLogins asks every node to log rotor in with generation gen's
// password and with the one before (from checkIP), and through each node
// other than the one it was changed on, lists main's end offsets as a
// consumer with the new one (from 127.0.0.1, as the harness's clients).
func (hc *harnessCluster) checkLogins(since time.Duration, gen int, via int32, final bool) {
	record := func(id int32, g int, fromCheckIP bool) {
		t := hc.now()
		err := hc.login(id, passwordOf(g), fromCheckIP)
		l := harness.Login{Node: id, Gen: g, T: t, OK: err == nil, Final: final, Faulted: !final && hc.faulted(since, hc.now())}
		if err != nil {
			l.Err = err.Error()
		}
		hc.h.AddLogin(l)
	}
	for _, id := range hc.all() {
		// The replaced one first: its failure mutes checkIP on the node
		// until the new one's login succeeds.
		if gen > 0 {
			record(id, gen-1, true)
		}
		record(id, gen, true)
	}
	for _, id := range hc.all() {
		if id != via {
			record(id, gen, false)
		}
	}
}

// finalLogins checks the last password on every node once it is
// harness.PasswordBound old: the cluster is healed, nothing excuses a
// node.
func (hc *harnessCluster) finalLogins() {
	hc.pw.checks.Wait()
	var last *harness.PasswordSet
	hc.h.EachPassword(func(p harness.PasswordSet) {
		if p.OK && (last == nil || p.Gen > last.Gen) {
			last = &p
		}
	})
	if last == nil {
		hc.note("no password change was acknowledged")
		return
	}
	time.Sleep(time.Until(hc.start.Add(last.T1 + harness.PasswordBound)))
	hc.pw.mu.Lock()
	sent := hc.pw.gen - 1
	hc.pw.mu.Unlock()
	if sent != last.Gen {
		// A later change failed and may have applied: check that one's
		// password, which the checker then judges as the newest sent.
		hc.note("password %d's change failed; the final logins check it and %d", sent, sent-1)
	}
	hc.checkLogins(last.T1, sent, 0, true)
}

// login logs rotor in to node id with pass: from checkIP (a ping, which
// logs in first), or from 127.0.0.1 as a consumer listing main's end
// offsets through that node.
func (hc *harnessCluster) login(id int32, pass string, fromCheckIP bool) error {
	hc.mu.Lock()
	addr := hc.kafka[id]
	hc.mu.Unlock()
	d := net.Dialer{Timeout: 5 * time.Second}
	if fromCheckIP {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(checkIP)}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.Dialer(d.DialContext),
		kgo.SASL(scram.Auth{User: rotor, Pass: pass}.AsSha512Mechanism()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if fromCheckIP {
		return cl.Ping(ctx)
	}
	_, err = kadm.NewClient(cl).ListEndOffsets(ctx, mainTopic)
	return err
}

// alterPassword sends AlterUserScramCredentials for rotor to node id, as
// kafka-configs does: a fresh salt and the salted password.
func (hc *harnessCluster) alterPassword(id int32, pass string) error {
	hc.mu.Lock()
	addr := hc.kafka[id]
	hc.mu.Unlock()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), rootSASL())
	if err != nil {
		return err
	}
	defer cl.Close()
	salt := make([]byte, 24)
	rand.Read(salt)
	const iterations = 4096
	salted, err := pbkdf2.Key(sha512.New, pass, salt, iterations, sha512.Size)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	up.Name, up.Mechanism, up.Iterations, up.Salt, up.SaltedPassword = rotor, 2, iterations, salt, salted // 2: SCRAM-SHA-512
	req.Upsertions = append(req.Upsertions, up)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		return fmt.Errorf("node %d: %w", id, err)
	}
	for _, r := range resp.Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = *r.ErrorMessage
			}
			return fmt.Errorf("node %d: %w %s", id, err, msg)
		}
	}
	if len(resp.Results) != 1 {
		return errors.New("node " + fmt.Sprint(id) + ": no result for " + rotor)
	}
	return nil
}
