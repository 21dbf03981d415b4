package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupAdmin answers DescribeGroups, ListGroups, DeleteGroups and
// OffsetDelete: it tells the coordinator which groups have committed
// offsets (a group whose members are gone lives on in them, as in Kafka),
// and deletes from the OffsetStore what the coordinator agreed to delete.
func (s *Server) groupAdmin(ctx context.Context, cl clientInfo, req kmsg.Request) kmsg.Response {
	switch r := req.(type) {
	case *kmsg.DescribeGroupsRequest:
		// A group this node does not coordinate is NOT_COORDINATOR, as in
		// Kafka: its members' state is in its coordinator's memory, and
		// this node would describe it as empty or dead.
		ask := *r
		ask.Groups = nil
		committed := map[string]bool{}
		mine := make([]bool, len(r.Groups))
		for i, g := range r.Groups {
			if mine[i] = s.coordinates(g); !mine[i] {
				continue
			}
			ask.Groups = append(ask.Groups, g)
			if pos, err := s.offsets.Group(g); err == nil && len(pos) > 0 {
				committed[g] = true
			}
		}
		if len(ask.Groups) == len(r.Groups) {
			return s.groups.do(ctx, cl, r, committed)
		}
		var described []kmsg.DescribeGroupsResponseGroup
		if len(ask.Groups) > 0 {
			described = s.groups.do(ctx, cl, &ask, committed).(*kmsg.DescribeGroupsResponse).Groups
		}
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for i, g := range r.Groups { // in the order asked
			if mine[i] && len(described) > 0 {
				resp.Groups = append(resp.Groups, described[0])
				described = described[1:]
				continue
			}
			d := kmsg.NewDescribeGroupsResponseGroup()
			d.Group, d.ErrorCode = g, kerr.NotCoordinator.Code
			resp.Groups = append(resp.Groups, d)
		}
		return resp

	case *kmsg.ListGroupsRequest:
		committed := map[string]bool{}
		groups, err := s.offsets.Groups()
		if err != nil {
			s.log.Error("kafka: list groups with committed offsets", "err", err)
			resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			return resp
		}
		for _, g := range groups {
			// In a cluster every node lists the groups it coordinates, and
			// the client merges the lists.
			if s.coordinates(g) {
				committed[g] = true
			}
		}
		return s.groups.do(ctx, cl, r, committed)

	case *kmsg.DeleteGroupsRequest:
		return s.deleteGroups(ctx, cl, r)

	case *kmsg.OffsetDeleteRequest:
		return s.offsetDelete(ctx, cl, r)
	}
	return req.ResponseKind()
}

func (s *Server) deleteGroups(ctx context.Context, cl clientInfo, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, g := range r.Groups {
		resp.Groups = append(resp.Groups, s.deleteGroup(ctx, cl, r.Version, g))
	}
	return resp
}

// deleteGroup deletes one group, holding its lock (groupServer.stripes)
// from reading its offsets to deleting them: a commit waits for the
// delete rather than being wiped by it.
func (s *Server) deleteGroup(ctx context.Context, cl clientInfo, version int16, g string) kmsg.DeleteGroupsResponseGroup {
	if !s.coordinates(g) {
		return kmsg.DeleteGroupsResponseGroup{Group: g, ErrorCode: kerr.NotCoordinator.Code}
	}
	defer s.groups.lockGroup(g)()
	pos, err := s.offsets.Group(g)
	if err != nil {
		s.log.Error("kafka: read committed offsets", "group", g, "err", err)
		return kmsg.DeleteGroupsResponseGroup{Group: g, ErrorCode: kerr.CoordinatorNotAvailable.Code}
	}
	ask := kmsg.NewPtrDeleteGroupsRequest()
	ask.Version, ask.Groups = version, []string{g}
	d := s.groups.do(ctx, cl, ask, map[string]bool{g: len(pos) > 0}).(*kmsg.DeleteGroupsResponse).Groups[0]
	if d.ErrorCode != errNone {
		return d
	}
	if err := s.offsets.DeleteGroup(g); err != nil {
		s.log.Error("kafka: delete a group's committed offsets", "group", g, "err", err)
		d.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return d
	}
	s.log.Info("group deleted", "group", g)
	return d
}

func (s *Server) offsetDelete(ctx context.Context, cl clientInfo, r *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if !s.coordinates(r.Group) {
		resp.ErrorCode = kerr.NotCoordinator.Code
		return resp
	}
	// A topic that does not exist is answered before the coordinator is
	// asked, as Kafka answers it from its metadata.
	topics, err := s.topics(ctx)
	if err != nil {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	// From reading the offsets to deleting them, so a member that joins
	// and commits meanwhile commits after the delete (groupServer.stripes).
	defer s.groups.lockGroup(r.Group)()
	pos, err := s.offsets.Group(r.Group)
	if err != nil {
		s.log.Error("kafka: read committed offsets", "group", r.Group, "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	ask := *r
	ask.Topics = nil
	var unknown []kmsg.OffsetDeleteResponseTopic
	for _, t := range r.Topics {
		if _, ok := topics[t.Topic]; ok {
			ask.Topics = append(ask.Topics, t)
			continue
		}
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetDeleteResponseTopicPartition{Partition: p.Partition, ErrorCode: kerr.UnknownTopicOrPartition.Code})
		}
		unknown = append(unknown, rt)
	}
	answer := s.groups.do(ctx, cl, &ask, map[string]bool{r.Group: len(pos) > 0}).(*kmsg.OffsetDeleteResponse)
	if answer.ErrorCode != errNone {
		resp.ErrorCode = answer.ErrorCode
		return resp
	}
	drop := map[string][]int32{}
	for _, t := range answer.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == errNone {
				drop[t.Topic] = append(drop[t.Topic], p.Partition)
			}
		}
	}
	if len(drop) > 0 {
		if err := s.offsets.Delete(r.Group, drop); err != nil {
			s.log.Error("kafka: delete committed offsets", "group", r.Group, "err", err)
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			return resp
		}
	}
	resp.Topics = append(answer.Topics, unknown...)
	return resp
}
