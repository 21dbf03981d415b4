package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Two franz-go consumers in one group split a topic's partitions, read
// every record once between them, and commit; a third consumer of the same
// group started after a broker restart resumes from the committed offsets.
func TestConsumerGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func() (string, func()) {
		addr, _, stop := serveDir(t, dir, Config{AutoCreateTopics: true, DefaultPartitions: 4, GroupInitialWait: 500 * time.Millisecond})
		return addr, stop
	}
	addr, stop := start()
	p, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("orders"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	for i := 0; i < n; i++ {
		p.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i % 17)), Value: []byte(fmt.Sprint(i))}, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()

	// Two members: between them every record once, each member some partitions.
	var mu sync.Mutex
	seen := map[string]int{}
	byMember := map[int]map[int32]bool{}
	var wg sync.WaitGroup
	members := make([]*kgo.Client, 2)
	for m := range members {
		c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.Balancers(kgo.RangeBalancer()), kgo.HeartbeatInterval(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		members[m] = c
		byMember[m] = map[int32]bool{}
	}
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	for m, c := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for total() < n && ctx.Err() == nil {
				pctx, pcancel := context.WithTimeout(ctx, time.Second)
				fs := c.PollFetches(pctx)
				pcancel()
				fs.EachRecord(func(r *kgo.Record) {
					mu.Lock()
					seen[string(r.Value)]++
					byMember[m][r.Partition] = true
					mu.Unlock()
				})
				if err := c.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("member %d commit: %v", m, err)
				}
			}
		}()
	}
	wg.Wait()
	if total() != n {
		t.Fatalf("the group read %d distinct records of %d", total(), n)
	}
	for v, k := range seen {
		if k != 1 {
			t.Fatalf("record %s read %d times", v, k)
		}
	}
	for m, parts := range byMember {
		if len(parts) == 0 || len(parts) == 4 {
			t.Fatalf("member %d read partitions %v: the group did not split them", m, parts)
		}
	}
	adm := kadm.NewClient(members[0])
	described, err := adm.DescribeGroups(ctx, "billing")
	if err != nil || described["billing"].State != "Stable" || len(described["billing"].Members) != 2 {
		t.Fatalf("DescribeGroups: %v %+v", err, described)
	}
	for _, c := range members {
		c.Close() // leaves the group
	}
	stop()

	// After a restart, more records; a new member of the group reads only those.
	addr, stop = start()
	defer stop()
	p, err = kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	for i := n; i < n+40; i++ {
		p.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var after []string
	for len(after) < 40 && ctx.Err() == nil {
		fs := c.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { after = append(after, string(r.Value)) })
	}
	for _, v := range after {
		var i int
		fmt.Sscan(v, &i)
		if i < n {
			t.Fatalf("after the restart the group read record %d again: committed offsets were lost", i)
		}
	}
	lag, err := kadm.NewClient(c).FetchOffsets(ctx, "billing")
	if err != nil || lag.Error() != nil {
		t.Fatalf("OffsetFetch: %v %v", err, lag.Error())
	}
}

// The coordinator's answers, step by step, as a client sees them.
func TestGroupCoordinator(t *testing.T) {
	c := newCoordinator(50*time.Millisecond, 0)
	defer c.close()
	protocols := []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte("m")}}
	join := func(id string, session time.Duration, ptype string) *kmsg.JoinGroupResponse {
		r := kmsg.NewPtrJoinGroupRequest()
		r.Version, r.Group, r.MemberID, r.ProtocolType, r.Protocols = 7, "g", id, ptype, protocols
		r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = int32(session/time.Millisecond), 5000
		return c.join(r, "client", "127.0.0.1:1")
	}
	async := func(f func() any) chan any {
		ch := make(chan any, 1)
		go func() { ch <- f() }()
		return ch
	}
	heartbeat := func(id string, gen int32) int16 {
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.MemberID, r.Generation = "g", id, gen
		return c.heartbeat(r).ErrorCode
	}
	sync := func(id string, gen int32, plan map[string]string) *kmsg.SyncGroupResponse {
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.MemberID, r.Generation = "g", id, gen
		for m, a := range plan {
			r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m, MemberAssignment: []byte(a)})
		}
		return c.sync(r)
	}
	expect := func(step string, got, want int16) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: error %d, want %d", step, got, want)
		}
	}

	first := join("", 10*time.Second, "consumer")
	expect("join without a member id", first.ErrorCode, kerr.MemberIDRequired.Code)
	a := first.MemberID
	expect("join with an id never handed out", join("someone", 10*time.Second, "consumer").ErrorCode, kerr.UnknownMemberID.Code)
	expect("a 10ms session", join(a, 10*time.Millisecond, "consumer").ErrorCode, kerr.InvalidSessionTimeout.Code)

	ja := join(a, 10*time.Second, "consumer")
	expect("the first member joins", ja.ErrorCode, errNone)
	if ja.Generation != 1 || ja.LeaderID != a || len(ja.Members) != 1 || *ja.Protocol != "range" {
		t.Fatalf("first join: generation %d, leader %s, %d members", ja.Generation, ja.LeaderID, len(ja.Members))
	}
	expect("heartbeat, generation 1", heartbeat(a, 1), errNone)
	expect("heartbeat, generation 0", heartbeat(a, 0), kerr.IllegalGeneration.Code)
	expect("heartbeat, unknown member", heartbeat("nobody", 1), kerr.UnknownMemberID.Code)
	if s := sync(a, 1, map[string]string{a: "p0,p1"}); s.ErrorCode != errNone || string(s.MemberAssignment) != "p0,p1" {
		t.Fatalf("leader's sync: %d %q", s.ErrorCode, s.MemberAssignment)
	}
	if d := c.describe("g"); d.State != "Stable" {
		t.Fatalf("after the sync the group is %s", d.State)
	}

	// A second member: the first learns of the rebalance by heartbeat and rejoins.
	second := join("", 1*time.Second, "consumer")
	b := second.MemberID
	jb := async(func() any { return join(b, 1*time.Second, "consumer") })
	time.Sleep(20 * time.Millisecond)
	expect("heartbeat during a rebalance", heartbeat(a, 1), kerr.RebalanceInProgress.Code)
	expect("a different protocol type", join("", 10*time.Second, "connect").ErrorCode, kerr.InconsistentGroupProtocol.Code)
	ja = join(a, 10*time.Second, "consumer")
	jbr := (<-jb).(*kmsg.JoinGroupResponse)
	if ja.Generation != 2 || jbr.Generation != 2 || ja.LeaderID != a || len(ja.Members) != 2 || len(jbr.Members) != 0 {
		t.Fatalf("rejoin: generations %d/%d, leader %s, members %d/%d", ja.Generation, jbr.Generation, ja.LeaderID, len(ja.Members), len(jbr.Members))
	}
	sb := async(func() any { return sync(b, 2, nil) }) // the follower waits for the leader's plan
	time.Sleep(20 * time.Millisecond)
	sync(a, 2, map[string]string{a: "p0", b: "p1"})
	if s := (<-sb).(*kmsg.SyncGroupResponse); s.ErrorCode != errNone || string(s.MemberAssignment) != "p1" {
		t.Fatalf("follower's sync: %d %q", s.ErrorCode, s.MemberAssignment)
	}

	// The second member stops heartbeating: after its 1s session it is gone.
	deadline := time.Now().Add(5 * time.Second)
	for heartbeat(a, 2) == errNone {
		if time.Now().After(deadline) {
			t.Fatal("the silent member was never expired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	ja = join(a, 10*time.Second, "consumer")
	if ja.Generation != 3 || len(ja.Members) != 1 {
		t.Fatalf("after the expiry: generation %d, %d members", ja.Generation, len(ja.Members))
	}
	expect("the expired member's heartbeat", heartbeat(b, 3), kerr.UnknownMemberID.Code)

	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version, leave.Group = 3, "g"
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: a}}
	if r := c.leave(leave); len(r.Members) != 1 || r.Members[0].ErrorCode != errNone {
		t.Fatalf("leave: %+v", r)
	}
	if d := c.describe("g"); d.State != "Empty" || len(d.Members) != 0 {
		t.Fatalf("after the last member left the group is %s with %d members", d.State, len(d.Members))
	}
}
