package kafka

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Consumer groups, the classic protocol (docs/kafka.md): strata is the
// coordinator of every group. Members join (JoinGroup), the leader the
// coordinator picks assigns partitions with the client's own balancer and
// hands the plan back (SyncGroup), members stay alive with Heartbeat and
// commit their positions (OffsetCommit, kept in Offsets). Membership lives
// in memory: after a restart consumers rejoin, as they do when Kafka's
// coordinator moves; committed offsets survive.
//
//	Empty ──join──▶ Preparing ──all joined, or rebalance timeout──▶ AwaitingSync ──leader's SyncGroup──▶ Stable
//	  ▲               ▲  ▲                                              │                                 │
//	  └─last leaves───┘  └──────────── join, leave, session expiry ─────┴─────────────────────────────────┘
//
// The coordinator is a state machine and nothing else: it is told of
// requests (Step) and of the time passing (Tick), and says which requests to
// answer with what, and when it wants the next Tick. A JoinGroup is answered
// when its rebalance completes, a follower's SyncGroup when the leader's
// plan arrives: later Steps or Ticks answer them. It owns no goroutine,
// channel, timer or lock and never reads the clock, so a test drives it
// step by step (testdata/groups); groupserver.go runs it for connections.

type groupState int

const (
	groupEmpty groupState = iota
	groupPreparing
	groupAwaitingSync
	groupStable
)

func (s groupState) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable"}[s]
}

const (
	minSessionTimeout           = 1 * time.Second
	maxSessionTimeout           = 30 * time.Minute
	defaultInitialRebalanceWait = 300 * time.Millisecond
	defaultMaxRebalanceWait     = 5 * time.Minute
)

// A groupInput is a group request (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup, DescribeGroups or ListGroups) named by ID, or, with Gone, the
// news that the client of request ID went away.
type groupInput struct {
	ID           uint64
	Req          kmsg.Request
	Client, Host string // who sent Req: DescribeGroups shows them
	Gone         bool
	// Committed names the groups with committed offsets (the server reads
	// them from its OffsetStore first): Kafka shows such a group, its
	// members gone or never joined, as Empty, and deletes it.
	Committed map[string]bool
}

// groupEffects is what a Step or Tick asks for: answers to send, and when
// to call Tick next (zero: no Tick is due).
type groupEffects struct {
	Answers []groupAnswer
	Wake    time.Time
}

// A groupAnswer answers request ID with Resp.
type groupAnswer struct {
	ID   uint64
	Resp kmsg.Response
}

type member struct {
	id, clientID, host string
	session, rebalance time.Duration
	protocolType       string
	protocols          []kmsg.JoinGroupRequestProtocol
	assignment         []byte
	lastSeen           time.Time
	// The requests waiting for an answer, 0 for none. A member waiting is
	// alive: its heartbeats queue behind that request on its connection.
	join, sync uint64
}

func (m *member) waiting() bool { return m.join != 0 || m.sync != 0 }

type group struct {
	name         string
	state        groupState
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	order        []string             // join order: the first is the next leader
	pending      map[string]time.Time // member ids handed out, not yet joined
	deadline     time.Time            // the rebalance in progress completes then
	initial      bool                 // the rebalance started from Empty: wait out initialWait
}

// coordinator holds every group.
type coordinator struct {
	groups      map[string]*group
	initialWait time.Duration
	maxWait     time.Duration                // caps any rebalance, whatever the members ask
	newID       func(clientID string) string // a fresh member id
	closed      bool
	answers     []groupAnswer // of the Step or Tick in progress
}

func newCoordinator(initialWait, maxWait time.Duration, newID func(string) string) *coordinator {
	if initialWait <= 0 {
		initialWait = defaultInitialRebalanceWait
	}
	if maxWait <= 0 {
		maxWait = defaultMaxRebalanceWait
	}
	return &coordinator{groups: map[string]*group{}, initialWait: initialWait, maxWait: maxWait, newID: newID}
}

// Step takes one input at now.
func (c *coordinator) Step(now time.Time, in groupInput) groupEffects {
	if in.Gone {
		c.gone(now, in.ID)
		return c.effects()
	}
	switch r := in.Req.(type) {
	case *kmsg.JoinGroupRequest:
		c.join(now, in, r)
	case *kmsg.SyncGroupRequest:
		c.sync(now, in.ID, r)
	case *kmsg.HeartbeatRequest:
		c.answer(in.ID, c.heartbeat(now, r))
	case *kmsg.LeaveGroupRequest:
		c.answer(in.ID, c.leave(now, r))
	case *kmsg.DescribeGroupsRequest:
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, name := range r.Groups {
			d := c.describe(name, in.Committed[name])
			if d.State == "Dead" && r.Version >= 6 { // KIP-1043: v6 says so with an error
				msg := fmt.Sprintf("Group %s not found.", name)
				d.ErrorCode, d.ErrorMessage = kerr.GroupIDNotFound.Code, &msg
			}
			resp.Groups = append(resp.Groups, d)
		}
		c.answer(in.ID, resp)
	case *kmsg.ListGroupsRequest:
		c.answer(in.ID, c.list(r, in.Committed))
	case *kmsg.DeleteGroupsRequest:
		c.answer(in.ID, c.deleteGroups(r, in.Committed))
	case *kmsg.OffsetDeleteRequest:
		c.answer(in.ID, c.offsetDelete(r, in.Committed))
	default:
		c.answer(in.ID, in.Req.ResponseKind())
	}
	return c.effects()
}

// Tick completes the rebalances whose time is up and drops the members
// whose session passed without a word. It may be called at any time: what
// is not due yet stays.
func (c *coordinator) Tick(now time.Time) groupEffects {
	for _, name := range slices.Sorted(maps.Keys(c.groups)) {
		g := c.groups[name]
		for id, since := range g.pending { // handed an id, never came back
			if !now.Before(since.Add(maxSessionTimeout)) {
				delete(g.pending, id)
			}
		}
		lost := false
		for _, id := range g.order {
			if m := g.members[id]; !m.waiting() && !now.Before(m.lastSeen.Add(m.session)) {
				c.remove(g, id)
				lost = true
			}
		}
		if lost {
			c.rebalanceAfterLoss(now, g)
		}
		if g.state == groupPreparing && !now.Before(g.deadline) {
			c.complete(now, g)
		}
	}
	return c.effects()
}

// Close answers every waiting JoinGroup and SyncGroup (the coordinator is
// going away, the client will find it again); later ones are refused.
func (c *coordinator) Close() groupEffects {
	c.closed = true
	for _, name := range slices.Sorted(maps.Keys(c.groups)) {
		g := c.groups[name]
		for _, id := range g.order {
			m := g.members[id]
			if m.join != 0 {
				c.answer(m.join, &kmsg.JoinGroupResponse{ErrorCode: kerr.CoordinatorNotAvailable.Code, Generation: -1, MemberID: m.id})
				m.join = 0
			}
			if m.sync != 0 {
				c.answer(m.sync, &kmsg.SyncGroupResponse{ErrorCode: kerr.CoordinatorNotAvailable.Code})
				m.sync = 0
			}
		}
	}
	return c.effects()
}

func (c *coordinator) answer(id uint64, resp kmsg.Response) {
	c.answers = append(c.answers, groupAnswer{ID: id, Resp: resp})
}

// effects hands over the answers gathered and the earliest deadline: a
// rebalance to complete, a session or a handed-out id to expire. Groups are
// few; scanning them is simpler than keeping a heap right.
func (c *coordinator) effects() groupEffects {
	e := groupEffects{Answers: c.answers}
	c.answers = nil
	if c.closed {
		return e
	}
	earlier := func(t time.Time) {
		if e.Wake.IsZero() || t.Before(e.Wake) {
			e.Wake = t
		}
	}
	for _, g := range c.groups {
		if g.state == groupPreparing {
			earlier(g.deadline)
		}
		for _, m := range g.members {
			if !m.waiting() {
				earlier(m.lastSeen.Add(m.session))
			}
		}
		for _, since := range g.pending {
			earlier(since.Add(maxSessionTimeout))
		}
	}
	return e
}

func (c *coordinator) group(name string) *group {
	g := c.groups[name]
	if g == nil {
		g = &group{name: name, members: map[string]*member{}, pending: map[string]time.Time{}}
		c.groups[name] = g
	}
	return g
}

// join takes a JoinGroup; unless refused, it is answered when the
// rebalance completes.
func (c *coordinator) join(now time.Time, in groupInput, r *kmsg.JoinGroupRequest) {
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation, resp.MemberID = -1, r.MemberID
	session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	rebalance := time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	if r.Version == 0 {
		rebalance = session
	}
	switch {
	case c.closed:
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
	case r.Group == "":
		resp.ErrorCode = kerr.InvalidGroupID.Code
	case session < minSessionTimeout || session > maxSessionTimeout:
		resp.ErrorCode = kerr.InvalidSessionTimeout.Code
	case len(r.Protocols) == 0 || r.ProtocolType == "":
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
	}
	if resp.ErrorCode != errNone {
		c.answer(in.ID, resp)
		return
	}
	g := c.group(r.Group)
	id := r.MemberID
	if len(g.members) > 0 && (r.ProtocolType != g.protocolType || !sharesProtocol(g, r.Protocols)) {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		c.answer(in.ID, resp)
		return
	}
	if id == "" {
		id = c.newID(in.Client)
		if r.Version >= 4 { // KIP-394: the client joins again with its id
			g.pending[id] = now
			resp.MemberID, resp.ErrorCode = id, kerr.MemberIDRequired.Code
			c.answer(in.ID, resp)
			return
		}
	} else if _, pending := g.pending[id]; g.members[id] == nil && !pending {
		resp.ErrorCode = kerr.UnknownMemberID.Code
		c.answer(in.ID, resp)
		return
	}
	delete(g.pending, id)
	m := g.members[id]
	if m == nil {
		m = &member{id: id}
		g.members[id] = m
		g.order = append(g.order, id)
	}
	m.clientID, m.host, m.session, m.rebalance = in.Client, in.Host, session, rebalance
	m.protocolType, m.protocols, m.lastSeen = r.ProtocolType, r.Protocols, now
	if m.join != 0 { // a second JoinGroup from the same member replaces the first
		c.answer(m.join, &kmsg.JoinGroupResponse{ErrorCode: kerr.RebalanceInProgress.Code, Generation: -1, MemberID: id})
	}
	m.join = in.ID
	if len(g.members) == 1 {
		g.protocolType = r.ProtocolType
	}
	c.prepare(now, g)
	c.maybeComplete(now, g)
}

func sharesProtocol(g *group, ps []kmsg.JoinGroupRequestProtocol) bool {
	for _, p := range ps {
		if chooseProtocol(g, p.Name) != "" {
			return true
		}
	}
	return false
}

// chooseProtocol returns name if every member supports it ("" otherwise);
// with name "", the leader's first choice every member supports.
func chooseProtocol(g *group, name string) string {
	candidates := []string{name}
	if name == "" && len(g.order) > 0 {
		for _, p := range g.members[g.order[0]].protocols {
			candidates = append(candidates, p.Name)
		}
	}
	for _, cand := range candidates {
		ok := cand != ""
		for _, m := range g.members {
			found := false
			for _, p := range m.protocols {
				found = found || p.Name == cand
			}
			ok = ok && found
		}
		if ok {
			return cand
		}
	}
	return ""
}

// prepare starts a rebalance (or keeps the one in progress): members waiting
// in SyncGroup are told to rejoin, and the rebalance completes when every
// member has rejoined or the longest rebalance timeout has passed.
func (c *coordinator) prepare(now time.Time, g *group) {
	if g.state == groupPreparing {
		return
	}
	g.initial = g.state == groupEmpty
	g.state = groupPreparing
	for _, id := range g.order {
		if m := g.members[id]; m.sync != 0 {
			c.answer(m.sync, &kmsg.SyncGroupResponse{ErrorCode: kerr.RebalanceInProgress.Code})
			m.sync, m.lastSeen = 0, now
		}
	}
	wait := time.Duration(0)
	for _, m := range g.members {
		wait = max(wait, m.rebalance)
	}
	if g.initial {
		wait = c.initialWait // let the other first members arrive
	}
	g.deadline = now.Add(min(wait, c.maxWait))
}

// maybeComplete completes the rebalance once every member has rejoined,
// except a group's first: its members wait out initialWait for the others.
func (c *coordinator) maybeComplete(now time.Time, g *group) {
	if g.state != groupPreparing || g.initial {
		return
	}
	for _, m := range g.members {
		if m.join == 0 {
			return
		}
	}
	c.complete(now, g)
}

// complete ends the join phase: members that did not rejoin are dropped,
// the generation moves on, and every joined member gets its answer (the
// leader with the members and their metadata, to assign from).
func (c *coordinator) complete(now time.Time, g *group) {
	g.deadline = time.Time{}
	for _, id := range g.order {
		if g.members[id].join == 0 {
			c.remove(g, id)
		}
	}
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader = groupEmpty, "", ""
		return
	}
	g.generation++
	g.protocol = chooseProtocol(g, "")
	if g.members[g.leader] == nil {
		g.leader = g.order[0]
	}
	g.state = groupAwaitingSync
	var all []kmsg.JoinGroupResponseMember
	for _, id := range g.order {
		for _, p := range g.members[id].protocols {
			if p.Name == g.protocol {
				all = append(all, kmsg.JoinGroupResponseMember{MemberID: id, ProtocolMetadata: p.Metadata})
			}
		}
	}
	for _, id := range g.order {
		m := g.members[id]
		protocol, ptype := g.protocol, g.protocolType
		resp := &kmsg.JoinGroupResponse{Generation: g.generation, Protocol: &protocol, ProtocolType: &ptype,
			LeaderID: g.leader, MemberID: m.id}
		if m.id == g.leader {
			resp.Members = all
		}
		c.answer(m.join, resp)
		m.join, m.lastSeen, m.assignment = 0, now, nil
	}
}

// remove drops a member, answering what it waits for with UNKNOWN_MEMBER_ID.
func (c *coordinator) remove(g *group, id string) {
	m := g.members[id]
	if m == nil {
		return
	}
	if m.join != 0 {
		c.answer(m.join, &kmsg.JoinGroupResponse{ErrorCode: kerr.UnknownMemberID.Code, Generation: -1, MemberID: id})
	}
	if m.sync != 0 {
		c.answer(m.sync, &kmsg.SyncGroupResponse{ErrorCode: kerr.UnknownMemberID.Code})
	}
	delete(g.members, id)
	for i, o := range g.order {
		if o == id {
			g.order = append(g.order[:i:i], g.order[i+1:]...)
			break
		}
	}
}

// rebalanceAfterLoss starts a rebalance for the members left, or empties
// the group.
func (c *coordinator) rebalanceAfterLoss(now time.Time, g *group) {
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader, g.deadline = groupEmpty, "", "", time.Time{}
		return
	}
	c.prepare(now, g)
	c.maybeComplete(now, g)
}

// gone is told that the client of request id went away. If the request
// waits in JoinGroup or SyncGroup its member is gone too, as if it had left:
// the others need not wait out its timeouts.
func (c *coordinator) gone(now time.Time, id uint64) {
	for _, g := range c.groups {
		for mid, m := range g.members {
			if m.join == id || m.sync == id {
				c.remove(g, mid)
				c.rebalanceAfterLoss(now, g)
				return
			}
		}
	}
}

// check says whether member id of generation may act in the group now.
func (c *coordinator) check(g *group, id string, generation int32) int16 {
	switch {
	case g == nil || g.members[id] == nil:
		return kerr.UnknownMemberID.Code
	case generation != g.generation:
		return kerr.IllegalGeneration.Code
	}
	return errNone
}

// commitCheck says whether a group member may commit offsets now. As
// Kafka: members commit before they rejoin (PreparingRebalance), not while
// the new assignment is being handed out.
func (c *coordinator) commitCheck(group, memberID string, generation int32) int16 {
	g := c.groups[group]
	code := c.check(g, memberID, generation)
	if code == errNone && g.state == groupAwaitingSync {
		code = kerr.RebalanceInProgress.Code
	}
	return code
}

// sync takes a SyncGroup: the leader's is answered with its own share of
// its plan, and answers the followers waiting for theirs.
func (c *coordinator) sync(now time.Time, id uint64, r *kmsg.SyncGroupRequest) {
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	g := c.groups[r.Group]
	if resp.ErrorCode = c.check(g, r.MemberID, r.Generation); resp.ErrorCode != errNone {
		c.answer(id, resp)
		return
	}
	protocol, ptype := g.protocol, g.protocolType
	resp.Protocol, resp.ProtocolType = &protocol, &ptype
	m := g.members[r.MemberID]
	m.lastSeen = now
	switch g.state {
	case groupPreparing:
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	case groupStable:
		resp.MemberAssignment = m.assignment
	case groupAwaitingSync:
		if r.MemberID != g.leader {
			if c.closed {
				resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
				break
			}
			if m.sync != 0 { // a second SyncGroup replaces the first
				c.answer(m.sync, &kmsg.SyncGroupResponse{ErrorCode: kerr.RebalanceInProgress.Code})
			}
			m.sync = id
			return
		}
		plan := map[string][]byte{}
		for _, a := range r.GroupAssignment {
			plan[a.MemberID] = a.MemberAssignment
		}
		for _, oid := range g.order {
			other := g.members[oid]
			other.assignment = plan[oid]
			if other.sync != 0 {
				p, t := g.protocol, g.protocolType
				c.answer(other.sync, &kmsg.SyncGroupResponse{Protocol: &p, ProtocolType: &t, MemberAssignment: other.assignment})
				other.sync, other.lastSeen = 0, now
			}
		}
		g.state = groupStable
		resp.MemberAssignment = m.assignment
	}
	c.answer(id, resp)
}

func (c *coordinator) heartbeat(now time.Time, r *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	g := c.groups[r.Group]
	if resp.ErrorCode = c.check(g, r.MemberID, r.Generation); resp.ErrorCode != errNone {
		return resp
	}
	g.members[r.MemberID].lastSeen = now
	if g.state == groupPreparing {
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	}
	return resp
}

func (c *coordinator) leave(now time.Time, r *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	ids := []string{r.MemberID}
	if r.Version >= 3 {
		ids = ids[:0]
		for _, m := range r.Members {
			ids = append(ids, m.MemberID)
		}
	}
	g := c.groups[r.Group]
	left := false
	for _, id := range ids {
		code := errNone
		if g == nil || g.members[id] == nil {
			code = kerr.UnknownMemberID.Code
		} else {
			c.remove(g, id)
			left = true
		}
		if r.Version >= 3 {
			resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: id, ErrorCode: code})
		} else {
			resp.ErrorCode = code
		}
	}
	if left {
		c.rebalanceAfterLoss(now, g)
	}
	return resp
}

// describe returns what DescribeGroups shows of a group: one with
// committed offsets only is Empty.
func (c *coordinator) describe(name string, committed bool) kmsg.DescribeGroupsResponseGroup {
	d := kmsg.NewDescribeGroupsResponseGroup()
	d.Group = name
	g := c.groups[name]
	if g == nil {
		d.State = "Dead"
		if committed {
			d.State = groupEmpty.String()
		}
		return d
	}
	d.State, d.ProtocolType, d.Protocol = g.state.String(), g.protocolType, g.protocol
	for _, id := range g.order {
		m := g.members[id]
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.ClientID, dm.ClientHost, dm.MemberAssignment = m.id, m.clientID, m.host, m.assignment
		for _, p := range m.protocols {
			if p.Name == g.protocol {
				dm.ProtocolMetadata = p.Metadata
			}
		}
		d.Members = append(d.Members, dm)
	}
	return d
}
