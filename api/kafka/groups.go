package kafka

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/catalog/offsets"
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

type member struct {
	id, clientID, host string
	session, rebalance time.Duration
	protocolType       string
	protocols          []kmsg.JoinGroupRequestProtocol
	assignment         []byte
	lastSeen           time.Time
	joined             chan *kmsg.JoinGroupResponse // set while its JoinGroup waits
	synced             chan syncAnswer              // set while its SyncGroup waits
}

type syncAnswer struct {
	code       int16
	assignment []byte
}

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
	deadline     *time.Timer          // completes the rebalance in progress
	initial      bool                 // the rebalance started from Empty: wait out initialWait
}

// coordinator holds every group; one lock, since group traffic is light.
type coordinator struct {
	mu          sync.Mutex
	groups      map[string]*group
	initialWait time.Duration
	maxWait     time.Duration // caps any rebalance, whatever the members ask
	now         func() time.Time
	stop        chan struct{}
	closeOnce   sync.Once
}

func newCoordinator(initialWait, maxWait time.Duration) *coordinator {
	if initialWait <= 0 {
		initialWait = defaultInitialRebalanceWait
	}
	if maxWait <= 0 {
		maxWait = defaultMaxRebalanceWait
	}
	c := &coordinator{groups: map[string]*group{}, initialWait: initialWait, maxWait: maxWait, now: time.Now, stop: make(chan struct{})}
	go c.expireLoop()
	return c
}

// close answers every waiting JoinGroup and SyncGroup (the coordinator is
// going away, the client will find it again) and stops the expiry loop.
func (c *coordinator) close() {
	c.closeOnce.Do(c.closeGroups)
}

func (c *coordinator) closeGroups() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.groups {
		if g.deadline != nil {
			g.deadline.Stop()
		}
		for _, m := range g.members {
			if m.joined != nil {
				m.joined <- &kmsg.JoinGroupResponse{ErrorCode: kerr.CoordinatorNotAvailable.Code, Generation: -1, MemberID: m.id}
				m.joined = nil
			}
			if m.synced != nil {
				m.synced <- syncAnswer{code: kerr.CoordinatorNotAvailable.Code}
				m.synced = nil
			}
		}
	}
	close(c.stop)
}

func (c *coordinator) group(name string) *group {
	g := c.groups[name]
	if g == nil {
		g = &group{name: name, members: map[string]*member{}, pending: map[string]time.Time{}}
		c.groups[name] = g
	}
	return g
}

func newMemberID(clientID string) string {
	var b [8]byte
	rand.Read(b[:])
	return clientID + "-" + hex.EncodeToString(b[:])
}

// join answers a JoinGroup; it blocks until the rebalance completes.
func (c *coordinator) join(r *kmsg.JoinGroupRequest, clientID, host string) *kmsg.JoinGroupResponse {
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = -1
	session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	rebalance := time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	if r.Version == 0 {
		rebalance = session
	}
	switch {
	case r.Group == "":
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	case session < minSessionTimeout || session > maxSessionTimeout:
		resp.ErrorCode = kerr.InvalidSessionTimeout.Code
		return resp
	case len(r.Protocols) == 0 || r.ProtocolType == "":
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return resp
	}
	c.mu.Lock()
	g := c.group(r.Group)
	id := r.MemberID
	if len(g.members) > 0 && (r.ProtocolType != g.protocolType || !sharesProtocol(g, r.Protocols)) {
		c.mu.Unlock()
		resp.MemberID, resp.ErrorCode = id, kerr.InconsistentGroupProtocol.Code
		return resp
	}
	if id == "" {
		id = newMemberID(clientID)
		if r.Version >= 4 { // KIP-394: the client joins again with its id
			g.pending[id] = c.now()
			c.mu.Unlock()
			resp.MemberID, resp.ErrorCode = id, kerr.MemberIDRequired.Code
			return resp
		}
	} else if _, pending := g.pending[id]; g.members[id] == nil && !pending {
		c.mu.Unlock()
		resp.MemberID, resp.ErrorCode = id, kerr.UnknownMemberID.Code
		return resp
	}
	delete(g.pending, id)
	m := g.members[id]
	if m == nil {
		m = &member{id: id}
		g.members[id] = m
		g.order = append(g.order, id)
	}
	m.clientID, m.host, m.session, m.rebalance = clientID, host, session, rebalance
	m.protocolType, m.protocols, m.lastSeen = r.ProtocolType, r.Protocols, c.now()
	if m.joined != nil { // a second JoinGroup from the same member replaces the first
		m.joined <- &kmsg.JoinGroupResponse{Version: r.Version, ErrorCode: kerr.RebalanceInProgress.Code, Generation: -1, MemberID: id}
	}
	answer := make(chan *kmsg.JoinGroupResponse, 1)
	m.joined = answer
	if len(g.members) == 1 {
		g.protocolType = r.ProtocolType
	}
	c.prepare(g)
	c.maybeComplete(g)
	c.mu.Unlock()
	return <-answer
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
	if name == "" {
		for _, id := range g.order {
			for _, p := range g.members[id].protocols {
				candidates = append(candidates, p.Name)
			}
			break
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
func (c *coordinator) prepare(g *group) {
	if g.state == groupPreparing {
		return
	}
	g.initial = g.state == groupEmpty
	g.state = groupPreparing
	for _, m := range g.members {
		if m.synced != nil {
			m.synced <- syncAnswer{code: kerr.RebalanceInProgress.Code}
			m.synced = nil
		}
	}
	wait := time.Duration(0)
	for _, m := range g.members {
		wait = max(wait, m.rebalance)
	}
	if g.initial {
		wait = c.initialWait // let the other first members arrive
	}
	wait = min(wait, c.maxWait)
	gen := g.generation
	g.deadline = time.AfterFunc(wait, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if g.state == groupPreparing && g.generation == gen {
			c.complete(g)
		}
	})
}

// maybeComplete completes the rebalance once every member has rejoined,
// except a group's first: its members wait out initialWait for the others.
func (c *coordinator) maybeComplete(g *group) {
	if g.state == groupPreparing && !g.initial && allJoined(g) {
		c.complete(g)
	}
}

func allJoined(g *group) bool {
	for _, m := range g.members {
		if m.joined == nil {
			return false
		}
	}
	return true
}

// complete ends the join phase: members that did not rejoin are dropped,
// the generation moves on, and every joined member gets its answer (the
// leader with the members and their metadata, to assign from).
func (c *coordinator) complete(g *group) {
	if g.deadline != nil {
		g.deadline.Stop()
		g.deadline = nil
	}
	for id, m := range g.members {
		if m.joined == nil {
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
	for _, m := range g.members {
		protocol, ptype := g.protocol, g.protocolType
		resp := &kmsg.JoinGroupResponse{Generation: g.generation, Protocol: &protocol, ProtocolType: &ptype,
			LeaderID: g.leader, MemberID: m.id}
		if m.id == g.leader {
			resp.Members = all
		}
		m.joined <- resp
		m.joined = nil
		m.assignment = nil
	}
}

func (c *coordinator) remove(g *group, id string) {
	m := g.members[id]
	if m == nil {
		return
	}
	if m.joined != nil {
		m.joined <- &kmsg.JoinGroupResponse{ErrorCode: kerr.UnknownMemberID.Code, Generation: -1, MemberID: id}
	}
	if m.synced != nil {
		m.synced <- syncAnswer{code: kerr.UnknownMemberID.Code}
	}
	delete(g.members, id)
	for i, o := range g.order {
		if o == id {
			g.order = append(g.order[:i:i], g.order[i+1:]...)
			break
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

// sync answers a SyncGroup; a follower's blocks until the leader's arrives.
func (c *coordinator) sync(r *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	c.mu.Lock()
	g := c.groups[r.Group]
	if resp.ErrorCode = c.check(g, r.MemberID, r.Generation); resp.ErrorCode != errNone {
		c.mu.Unlock()
		return resp
	}
	protocol, ptype := g.protocol, g.protocolType
	resp.Protocol, resp.ProtocolType = &protocol, &ptype
	m := g.members[r.MemberID]
	m.lastSeen = c.now()
	switch g.state {
	case groupPreparing:
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	case groupStable:
		resp.MemberAssignment = m.assignment
	case groupAwaitingSync:
		if r.MemberID != g.leader {
			answer := make(chan syncAnswer, 1)
			m.synced = answer
			c.mu.Unlock()
			a := <-answer
			resp.ErrorCode, resp.MemberAssignment = a.code, a.assignment
			return resp
		}
		plan := map[string][]byte{}
		for _, a := range r.GroupAssignment {
			plan[a.MemberID] = a.MemberAssignment
		}
		for id, other := range g.members {
			other.assignment = plan[id]
			if other.synced != nil {
				other.synced <- syncAnswer{assignment: other.assignment}
				other.synced = nil
			}
		}
		g.state = groupStable
		resp.MemberAssignment = m.assignment
	}
	c.mu.Unlock()
	return resp
}

func (c *coordinator) heartbeat(r *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[r.Group]
	if resp.ErrorCode = c.check(g, r.MemberID, r.Generation); resp.ErrorCode != errNone {
		return resp
	}
	g.members[r.MemberID].lastSeen = c.now()
	if g.state == groupPreparing {
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	}
	return resp
}

func (c *coordinator) leave(r *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	ids := []string{r.MemberID}
	if r.Version >= 3 {
		ids = ids[:0]
		for _, m := range r.Members {
			ids = append(ids, m.MemberID)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
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
		c.rebalanceAfterLoss(g)
	}
	return resp
}

// rebalanceAfterLoss starts a rebalance for the members left, or empties
// the group.
func (c *coordinator) rebalanceAfterLoss(g *group) {
	if len(g.members) == 0 {
		if g.deadline != nil {
			g.deadline.Stop()
			g.deadline = nil
		}
		g.state, g.protocol, g.leader = groupEmpty, "", ""
		return
	}
	c.prepare(g)
	c.maybeComplete(g)
}

// expireLoop drops members whose session passed without a heartbeat.
func (c *coordinator) expireLoop() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		c.mu.Lock()
		now := c.now()
		for _, g := range c.groups {
			for id, since := range g.pending { // handed an id, never came back
				if now.Sub(since) > maxSessionTimeout {
					delete(g.pending, id)
				}
			}
			lost := false
			for id, m := range g.members {
				// A member waiting in JoinGroup or SyncGroup is alive: its
				// heartbeats queue behind that request on its connection.
				if m.joined == nil && m.synced == nil && now.Sub(m.lastSeen) > m.session {
					c.remove(g, id)
					lost = true
				}
			}
			if lost {
				c.rebalanceAfterLoss(g)
			}
		}
		c.mu.Unlock()
	}
}

// describe returns what DescribeGroups and ListGroups show of a group.
func (c *coordinator) describe(name string) kmsg.DescribeGroupsResponseGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := kmsg.NewDescribeGroupsResponseGroup()
	d.Group = name
	g := c.groups[name]
	if g == nil {
		d.State = "Dead"
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

func (c *coordinator) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name := range c.groups {
		out = append(out, name)
	}
	return out
}

// findCoordinator names this broker for every group.
func (s *Server) findCoordinator(r *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := r.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{r.CoordinatorKey}
	}
	for i, k := range keys {
		c := s.cluster.Coordinator(k)
		if i == 0 { // versions before 4 name one coordinator at the top level
			resp.NodeID, resp.Host, resp.Port = c.NodeID, c.Host, c.Port
		}
		resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{Key: k, NodeID: c.NodeID, Host: c.Host, Port: c.Port})
	}
	return resp
}

func (s *Server) offsetCommit(r *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	code := errNone
	if r.Generation >= 0 || r.MemberID != "" { // a group member's commit; -1 is a consumer without a group
		s.groups.mu.Lock()
		g := s.groups.groups[r.Group]
		code = s.groups.check(g, r.MemberID, r.Generation)
		// As Kafka: members commit before they rejoin (PreparingRebalance),
		// not while the new assignment is being handed out.
		if code == errNone && g.state == groupAwaitingSync {
			code = kerr.RebalanceInProgress.Code
		}
		s.groups.mu.Unlock()
	}
	if r.Group == "" {
		code = kerr.InvalidGroupID.Code
	}
	commit := map[string]map[int32]offsets.Committed{}
	if code == errNone {
		for _, t := range r.Topics {
			commit[t.Topic] = map[int32]offsets.Committed{}
			for _, p := range t.Partitions {
				c := offsets.Committed{Offset: p.Offset, LeaderEpoch: p.LeaderEpoch}
				if p.Metadata != nil {
					c.Metadata = *p.Metadata
				}
				commit[t.Topic][p.Partition] = c
			}
		}
		if err := s.offsets.Commit(r.Group, commit); err != nil {
			s.log.Error("kafka: commit offsets", "group", r.Group, "err", err)
			code = kerr.CoordinatorNotAvailable.Code
		}
	}
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: code})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) offsetFetch(r *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	all, err := s.offsets.Group(r.Group)
	if err != nil {
		s.log.Error("kafka: read committed offsets", "group", r.Group, "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	asked := r.Topics
	if asked == nil { // every partition the group committed
		for topic, parts := range all {
			t := kmsg.OffsetFetchRequestTopic{Topic: topic}
			for p := range parts {
				t.Partitions = append(t.Partitions, p)
			}
			asked = append(asked, t)
		}
	}
	for _, t := range asked {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			if c, ok := all[t.Topic][p]; ok {
				md := c.Metadata
				rp.Offset, rp.LeaderEpoch, rp.Metadata = c.Offset, c.LeaderEpoch, &md
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
