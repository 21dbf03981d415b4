package kafka

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
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

// The coordinator as scripts (testdata/groups): each command sends a
// request, or moves the fake clock, and prints the answers that come of it,
// each as "#N request: answer" (N numbers the requests of the script, as
// an answer may come commands later), then when the next Tick is due.
//
//	join client=C [member=ID] [session=10s] [rebalance=5s] [protocols=range,…] [type=consumer] [version=9]
//	sync member=ID gen=G [assign=ID:X,ID:Y]   the leader's plan, or nothing for a follower
//	heartbeat member=ID gen=G
//	leave member=ID[,ID…] [version=3]
//	commit member=ID gen=G                    may the member commit offsets now
//	describe [committed] | list [committed=G,…] [states=S,…]
//	delete [committed]                        DeleteGroups
//	offsetdelete topics=T,… [committed]       OffsetDelete, partition 0 of each topic
//	gone req=N                                the client of request #N went away
//	tick [+D]                                 the clock moves D (to the next Tick without); every Tick due on the way runs
//	close                                     the server shuts down
//
// Every command takes group=G (g). Member ids are the client id and a
// count: the first id handed to client a is a-1. A join with topics=T,…
// subscribes to them (a consumer's protocol metadata); committed says the
// group has committed offsets (the OffsetStore, which the server reads).
func TestGroupScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/groups", func(t *testing.T, path string) {
		h := &groupHarness{labels: map[uint64]string{}, ids: map[string]int{}}
		h.c = newCoordinator(300*time.Millisecond, time.Minute, func(client string) string {
			h.ids[client]++
			return fmt.Sprintf("%s-%d", client, h.ids[client])
		})
		datadriven.RunTest(t, path, h.run)
	})
}

type groupHarness struct {
	c      *coordinator
	now    time.Duration // since the script began
	wake   time.Duration // when the next Tick is due; -1 for none
	lastID uint64
	labels map[uint64]string // the requests not answered yet
	ids    map[string]int
	out    strings.Builder
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (h *groupHarness) run(t *testing.T, d *datadriven.TestData) string {
	h.out.Reset()
	arg := func(key, def string) string {
		for _, a := range d.CmdArgs {
			if a.Key == key {
				return strings.Join(a.Vals, ",")
			}
		}
		return def
	}
	duration := func(key, def string) time.Duration {
		v, err := time.ParseDuration(strings.TrimPrefix(arg(key, def), "+"))
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		return v
	}
	number := func(key, def string) int {
		n, err := strconv.Atoi(arg(key, def))
		if err != nil {
			t.Fatalf("%s: %s: %v", d.Pos, key, err)
		}
		return n
	}
	group, member := arg("group", "g"), arg("member", "")
	switch d.Cmd {
	case "join":
		r := kmsg.NewPtrJoinGroupRequest()
		r.Version, r.Group, r.MemberID, r.ProtocolType = int16(number("version", "9")), group, member, arg("type", "consumer")
		r.SessionTimeoutMillis = int32(duration("session", "10s") / time.Millisecond)
		r.RebalanceTimeoutMillis = int32(duration("rebalance", "5s") / time.Millisecond)
		for _, p := range strings.Split(arg("protocols", "range"), ",") {
			meta := []byte(p)
			if topics := arg("topics", ""); topics != "" {
				sub := kmsg.NewConsumerMemberMetadata()
				sub.Topics = strings.Split(topics, ",")
				meta = sub.AppendTo(nil)
			}
			r.Protocols = append(r.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: meta})
		}
		client := arg("client", strings.Split(member, "-")[0])
		h.send("join "+cmp.Or(member, client), groupInput{Req: r, Client: client, Host: "/10.0.0.1"})
	case "sync":
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.MemberID, r.Generation = group, member, int32(number("gen", "0"))
		if plan := arg("assign", ""); plan != "" {
			for _, a := range strings.Split(plan, ",") {
				id, x, _ := strings.Cut(a, ":")
				r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte(x)})
			}
		}
		h.send("sync "+member, groupInput{Req: r})
	case "heartbeat":
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.MemberID, r.Generation = group, member, int32(number("gen", "0"))
		h.send("heartbeat "+member, groupInput{Req: r})
	case "leave":
		r := kmsg.NewPtrLeaveGroupRequest()
		r.Version, r.Group = int16(number("version", "3")), group
		ids := strings.Split(member, ",")
		r.MemberID = ids[0]
		for _, id := range ids {
			r.Members = append(r.Members, kmsg.LeaveGroupRequestMember{MemberID: id})
		}
		h.send("leave "+member, groupInput{Req: r})
	case "describe":
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.Groups = []string{group}
		h.send("describe", groupInput{Req: r, Committed: map[string]bool{group: d.HasArg("committed")}})
	case "list":
		r := kmsg.NewPtrListGroupsRequest()
		r.Version = 4
		if states := arg("states", ""); states != "" {
			r.StatesFilter = strings.Split(states, ",")
		}
		committed := map[string]bool{}
		if c := arg("committed", ""); c != "" {
			for _, g := range strings.Split(c, ",") {
				committed[g] = true
			}
		}
		h.send("list", groupInput{Req: r, Committed: committed})
	case "delete":
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Groups = []string{group}
		h.send("delete "+group, groupInput{Req: r, Committed: map[string]bool{group: d.HasArg("committed")}})
	case "offsetdelete":
		r := kmsg.NewPtrOffsetDeleteRequest()
		r.Group = group
		for _, topic := range strings.Split(arg("topics", ""), ",") {
			r.Topics = append(r.Topics, kmsg.OffsetDeleteRequestTopic{Topic: topic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}})
		}
		h.send("offsetdelete "+group, groupInput{Req: r, Committed: map[string]bool{group: d.HasArg("committed")}})
	case "commit":
		fmt.Fprintf(&h.out, "commit %s: %s\n", member, codeName(h.c.commitCheck(group, member, int32(number("gen", "0")))))
	case "gone":
		id := uint64(number("req", "0"))
		label, waiting := h.labels[id]
		h.apply(h.c.Step(epoch.Add(h.now), groupInput{ID: id, Gone: true}))
		if _, still := h.labels[id]; waiting && still {
			t.Fatalf("%s: request #%d (%s) is still unanswered after its client went away", d.Pos, id, label)
		}
	case "tick":
		to := h.wake
		if len(d.CmdArgs) > 0 {
			by, err := time.ParseDuration(strings.TrimPrefix(d.CmdArgs[0].Key, "+"))
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			to = h.now + by
		}
		for h.wake >= 0 && h.wake <= to {
			h.now = h.wake
			fmt.Fprintf(&h.out, "tick at +%s\n", h.now)
			h.apply(h.c.Tick(epoch.Add(h.now)))
		}
		h.now = max(h.now, to)
	case "close":
		h.apply(h.c.Close())
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	if d.Cmd != "commit" {
		if h.wake < 0 {
			h.out.WriteString("no tick due\n")
		} else {
			fmt.Fprintf(&h.out, "next tick at +%s\n", h.wake)
		}
	}
	return h.out.String()
}

// send steps the coordinator with a new request and says when it waits.
func (h *groupHarness) send(label string, in groupInput) {
	h.lastID++
	in.ID = h.lastID
	h.labels[in.ID] = label
	h.apply(h.c.Step(epoch.Add(h.now), in))
	if _, waiting := h.labels[in.ID]; waiting {
		fmt.Fprintf(&h.out, "#%d %s: waits\n", in.ID, label)
	}
}

func (h *groupHarness) apply(e groupEffects) {
	for _, a := range e.Answers {
		label, ok := h.labels[a.ID]
		if !ok {
			panic(fmt.Sprintf("request #%d answered twice, or never asked", a.ID))
		}
		delete(h.labels, a.ID)
		fmt.Fprintf(&h.out, "#%d %s: %s\n", a.ID, label, showAnswer(a.Resp))
	}
	h.wake = -1
	if !e.Wake.IsZero() {
		h.wake = e.Wake.Sub(epoch)
	}
}

func codeName(code int16) string {
	if code == errNone {
		return "ok"
	}
	return kerr.ErrorForCode(code).(*kerr.Error).Message
}

// showAnswer is what a client reads in an answer.
func showAnswer(resp kmsg.Response) string {
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		if r.ErrorCode != errNone {
			if r.MemberID == "" {
				return codeName(r.ErrorCode)
			}
			return codeName(r.ErrorCode) + " member=" + r.MemberID
		}
		s := fmt.Sprintf("gen=%d leader=%s protocol=%s", r.Generation, r.LeaderID, *r.Protocol)
		if len(r.Members) > 0 {
			var ids []string
			for _, m := range r.Members {
				ids = append(ids, fmt.Sprintf("%s(%s)", m.MemberID, showMetadata(m.ProtocolMetadata)))
			}
			s += " members=" + strings.Join(ids, ",")
		}
		return s
	case *kmsg.SyncGroupResponse:
		if r.ErrorCode != errNone {
			return codeName(r.ErrorCode)
		}
		return fmt.Sprintf("assignment=%s", r.MemberAssignment)
	case *kmsg.HeartbeatResponse:
		return codeName(r.ErrorCode)
	case *kmsg.LeaveGroupResponse:
		if len(r.Members) == 0 {
			return codeName(r.ErrorCode)
		}
		var each []string
		for _, m := range r.Members {
			each = append(each, m.MemberID+" "+codeName(m.ErrorCode))
		}
		return strings.Join(each, ", ")
	case *kmsg.DescribeGroupsResponse:
		var each []string
		for _, g := range r.Groups {
			s := fmt.Sprintf("%s %s", g.Group, g.State)
			if g.Protocol != "" {
				s += " protocol=" + g.Protocol
			}
			for _, m := range g.Members {
				s += fmt.Sprintf(" %s(%s)", m.MemberID, m.MemberAssignment)
			}
			each = append(each, s)
		}
		return strings.Join(each, "; ")
	case *kmsg.ListGroupsResponse:
		var each []string
		for _, g := range r.Groups {
			each = append(each, g.Group+" "+g.GroupState+" type="+cmp.Or(g.ProtocolType, `""`))
		}
		return cmp.Or(strings.Join(each, ", "), "no groups")
	case *kmsg.DeleteGroupsResponse:
		var each []string
		for _, g := range r.Groups {
			each = append(each, g.Group+" "+codeName(g.ErrorCode))
		}
		return strings.Join(each, ", ")
	case *kmsg.OffsetDeleteResponse:
		if r.ErrorCode != errNone {
			return codeName(r.ErrorCode)
		}
		var each []string
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				each = append(each, fmt.Sprintf("%s/%d %s", t.Topic, p.Partition, codeName(p.ErrorCode)))
			}
		}
		return strings.Join(each, ", ")
	}
	return fmt.Sprintf("%T", resp)
}

// A consumer whose connection closes while its JoinGroup waits is out of
// the group then, not when the rebalance it waited for completes.
func TestJoinEndsWhenTheClientGoes(t *testing.T) {
	addr, _ := startServer(t, Config{GroupInitialWait: time.Minute})
	c := client(t, addr)
	state := func() (string, int) {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{"quitters"}
		resp, err := req.RequestWith(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Groups[0].State, len(resp.Groups[0].Members)
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = "quitters", "consumer", 10_000, 60_000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	frame := seedFrame(join, 3)
	conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(frame))), frame...))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if s, n := state(); s == "PreparingRebalance" && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the JoinGroup never arrived")
		}
	}
	conn.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s, n := state()
		if s == "Empty" && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after its client went away the group is %s with %d members (the join would wait a minute)", s, n)
		}
	}
}

// showMetadata is a member's protocol metadata: the scripts' own text, or
// a consumer's subscription.
func showMetadata(b []byte) string {
	var sub kmsg.ConsumerMemberMetadata
	if len(b) > 2 && b[0] == 0 && sub.ReadFrom(b) == nil {
		return "topics=" + strings.Join(sub.Topics, ",")
	}
	return string(b)
}
