package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/catalog"
	"strata/catalog/offsets"
	"strata/metadata"
)

// groupServer runs the coordinator (groups.go) for the connections: it
// feeds their requests in under one lock, hands each answer to the request
// waiting for it, and keeps one timer for the coordinator's next Tick.
//
//	connection ──request, ctx──▶ groupServer.do ──Step──▶ coordinator
//	                                  ▲                       │
//	timer ──────────────Tick──────────┤                       ▼
//	                                  └──── answers, Wake ◀── effects
type groupServer struct {
	mu      sync.Mutex
	sm      *coordinator
	waiting map[uint64]chan kmsg.Response // request id -> where its answer goes
	lastID  uint64
	timer   *time.Timer
	wake    time.Time // when timer fires; zero when stopped

	// stripes serialize what a group's committed offsets go through
	// outside mu, which is held only while the coordinator steps: a
	// DeleteGroups or OffsetDelete from the coordinator's agreement to the
	// OffsetStore's delete, and an OffsetCommit from its check to its
	// write. Without it a member that joins and commits in between has
	// its commit wiped. A group hashes to one stripe, so the lock of a
	// group with slow storage holds up few others, and nothing is left
	// behind per group.
	stripes [64]sync.Mutex
}

func newGroupServer(initialWait, maxWait time.Duration) *groupServer {
	g := &groupServer{sm: newCoordinator(initialWait, maxWait, newMemberID), waiting: map[uint64]chan kmsg.Response{}}
	g.timer = time.AfterFunc(time.Hour, g.tick)
	g.timer.Stop()
	return g
}

func newMemberID(clientID string) string {
	var b [8]byte
	rand.Read(b[:])
	return clientID + "-" + hex.EncodeToString(b[:])
}

// do answers a group request, when the coordinator does: a JoinGroup once
// its rebalance completes. If ctx ends first (the client went away), the
// coordinator is told, and answers the request itself.
// committed names the groups with committed offsets, for the requests
// that show or delete groups (groupInput.Committed).
func (g *groupServer) do(ctx context.Context, cl clientInfo, req kmsg.Request, committed map[string]bool) kmsg.Response {
	answer := make(chan kmsg.Response, 1)
	g.mu.Lock()
	g.lastID++
	id := g.lastID
	g.waiting[id] = answer
	g.apply(g.sm.Step(time.Now(), groupInput{ID: id, Req: req, Client: cl.id, Host: cl.host, Committed: committed}))
	g.mu.Unlock()
	select {
	case resp := <-answer:
		return resp
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.apply(g.sm.Step(time.Now(), groupInput{ID: id, Gone: true}))
	g.mu.Unlock()
	return <-answer
}

// apply delivers the answers and sets the timer for the next Tick. Under mu.
func (g *groupServer) apply(e groupEffects) {
	for _, a := range e.Answers {
		if ch := g.waiting[a.ID]; ch != nil {
			ch <- a.Resp
			delete(g.waiting, a.ID)
		}
	}
	if e.Wake.Equal(g.wake) {
		return
	}
	g.wake = e.Wake
	if e.Wake.IsZero() {
		g.timer.Stop()
	} else {
		g.timer.Reset(time.Until(e.Wake))
	}
}

// tick runs when the timer fires. A tick that raced with a Step resetting
// the timer is harmless: Tick leaves what is not due.
func (g *groupServer) tick() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wake = time.Time{}
	g.apply(g.sm.Tick(time.Now()))
}

// close answers the requests waiting (the client will find the
// coordinator again) and stops the timer.
func (g *groupServer) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.apply(g.sm.Close())
	g.timer.Stop()
}

// lockGroup takes group's stripe (see stripes) and returns its unlock.
// Taken before mu, never while holding another stripe.
func (g *groupServer) lockGroup(group string) (unlock func()) {
	h := fnv.New32a()
	h.Write([]byte(group))
	m := &g.stripes[h.Sum32()%uint32(len(g.stripes))]
	m.Lock()
	return m.Unlock
}

func (g *groupServer) hasMembers(group string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := g.sm.groups[group]
	return gr != nil && len(gr.members) > 0
}

func (g *groupServer) commitCheck(group, memberID string, generation int32) int16 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sm.commitCheck(group, memberID, generation)
}

// coordinatorTransaction is FindCoordinator's key type for a
// transactional id (0 is a group).
const coordinatorTransaction = 1

// noTransactions is the message of every refusal of a transactional
// producer: strata has no transaction coordinator yet.
var noTransactions = "strata does not support transactions yet: unset transactional.id (an idempotent producer, enable.idempotence, needs none)"

// findCoordinator names each group's coordinator: this broker on a single
// node; COORDINATOR_NOT_AVAILABLE (retriable) while a cluster knows none.
func (s *Server) findCoordinator(r *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := r.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{r.CoordinatorKey}
	}
	for i, k := range keys {
		c := s.cluster.Coordinator(k)
		code := errNone
		var msg *string
		switch {
		case r.CoordinatorType == coordinatorTransaction:
			// A non-retriable error with a message: the Java producer's
			// initTransactions fails at once, saying why, instead of
			// failing at its first send or retrying to its timeout.
			c = metadata.Broker{NodeID: -1, Port: -1}
			code, msg = kerr.InvalidRequest.Code, &noTransactions
		case c.NodeID < 0:
			code = kerr.CoordinatorNotAvailable.Code
		}
		if i == 0 { // versions before 4 name one coordinator at the top level
			resp.NodeID, resp.Host, resp.Port, resp.ErrorCode, resp.ErrorMessage = c.NodeID, c.Host, c.Port, code, msg
		}
		resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{Key: k, NodeID: c.NodeID, Host: c.Host, Port: c.Port, ErrorCode: code, ErrorMessage: msg})
	}
	return resp
}

func (s *Server) offsetCommit(r *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	// From the check to the write, so a DeleteGroups or OffsetDelete of
	// the group agreed meanwhile does not wipe this commit after it is
	// acknowledged.
	defer s.groups.lockGroup(r.Group)()
	code := errNone
	// A group member's commit, or one from outside the group (generation
	// -1: an admin, or a consumer without a group), which Kafka takes only
	// while the group has no members.
	if r.Generation >= 0 || r.MemberID != "" || s.groups.hasMembers(r.Group) {
		code = s.groups.commitCheck(r.Group, r.MemberID, r.Generation)
		if !s.coordinates(r.Group) {
			code = kerr.NotCoordinator.Code
		}
	}
	if r.Group == "" {
		code = kerr.InvalidGroupID.Code
	}
	// Kafka checks each partition on its own: metadata over
	// offset.metadata.max.bytes, or a partition that does not exist, is
	// refused and the rest are committed (so no client stores what no
	// consumer will read).
	codes := map[string]map[int32]int16{}
	commit := map[string]map[int32]offsets.Committed{}
	if code == errNone {
		topics, err := s.topics(context.Background())
		if err != nil {
			s.log.Error("kafka: commit offsets: listing topics", "group", r.Group, "err", err)
			code = kerr.CoordinatorNotAvailable.Code
		}
		for _, t := range r.Topics {
			codes[t.Topic] = map[int32]int16{}
			for _, p := range t.Partitions {
				switch n, ok := topics[t.Topic]; {
				case !ok || p.Partition < 0 || p.Partition >= n:
					codes[t.Topic][p.Partition] = kerr.UnknownTopicOrPartition.Code
					continue
				case p.Metadata != nil && len(*p.Metadata) > s.cfg.OffsetMetadataMaxBytes:
					codes[t.Topic][p.Partition] = kerr.OffsetMetadataTooLarge.Code
					continue
				}
				c := offsets.Committed{Offset: p.Offset, LeaderEpoch: p.LeaderEpoch}
				if p.Metadata != nil {
					c.Metadata = *p.Metadata
				}
				if commit[t.Topic] == nil {
					commit[t.Topic] = map[int32]offsets.Committed{}
				}
				commit[t.Topic][p.Partition] = c
			}
		}
	}
	if code == errNone && len(commit) > 0 {
		err := s.offsets.Commit(r.Group, commit)
		switch {
		case errors.Is(err, catalog.ErrMetadataFull):
			s.log.Error("kafka: commit offsets refused: etcd is full; free space as docs/cluster.md says (compact, defrag, alarm disarm)", "group", r.Group, "err", err)
			code = kerr.KafkaStorageError.Code
		case errors.Is(err, offsets.ErrGroupTooLong):
			code = kerr.InvalidGroupID.Code
		case err != nil:
			s.log.Error("kafka: commit offsets", "group", r.Group, "err", err)
			code = kerr.CoordinatorNotAvailable.Code
		}
	}
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			c, refused := codes[t.Topic][p.Partition]
			if !refused {
				c = code
			}
			rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: c})
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
	resp.Topics = eachPartition[kmsg.OffsetFetchResponseTopic](asked, func(topic string, p int32) kmsg.OffsetFetchResponseTopicPartition {
		rp := kmsg.NewOffsetFetchResponseTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
		if c, ok := all[topic][p]; ok {
			md := c.Metadata
			rp.Offset, rp.LeaderEpoch, rp.Metadata = c.Offset, c.LeaderEpoch, &md
		}
		return rp
	})
	return resp
}

// coordinates says whether this node coordinates group: in a cluster each
// group has one coordinator, whose members' state lives in its memory.
func (s *Server) coordinates(group string) bool {
	return s.cluster.Coordinator(group).NodeID == s.cluster.Self()
}

// notCoordinator answers a group request sent to a node that does not
// coordinate its group with NOT_COORDINATOR (the client asks
// FindCoordinator again), or returns nil.
func (s *Server) notCoordinator(r kmsg.Request) kmsg.Response {
	var group string
	switch r := r.(type) {
	case *kmsg.JoinGroupRequest:
		group = r.Group
	case *kmsg.SyncGroupRequest:
		group = r.Group
	case *kmsg.HeartbeatRequest:
		group = r.Group
	case *kmsg.LeaveGroupRequest:
		group = r.Group
	}
	if s.coordinates(group) {
		return nil
	}
	resp := r.ResponseKind()
	switch resp := resp.(type) {
	case *kmsg.JoinGroupResponse:
		resp.ErrorCode = kerr.NotCoordinator.Code
	case *kmsg.SyncGroupResponse:
		resp.ErrorCode = kerr.NotCoordinator.Code
	case *kmsg.HeartbeatResponse:
		resp.ErrorCode = kerr.NotCoordinator.Code
	case *kmsg.LeaveGroupResponse:
		resp.ErrorCode = kerr.NotCoordinator.Code
	}
	return resp
}
