package kafka

import (
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The coordinator's side of the admin calls on groups: ListGroups,
// DeleteGroups and OffsetDelete. Like the rest of the coordinator they are
// pure: the groups with committed offsets come in with the request
// (groupInput.Committed), and the answers say which offsets the server is
// to delete from its OffsetStore.

// list answers ListGroups: the groups in memory and those with committed
// offsets only (Empty, with no protocol type, as Kafka lists a group made
// by an admin's or a standalone consumer's commit), filtered by state (v4+,
// names compared as Kafka compares them, ignoring case).
func (c *coordinator) list(r *kmsg.ListGroupsRequest, committed map[string]bool) *kmsg.ListGroupsResponse {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	names := map[string]bool{}
	for name := range c.groups {
		names[name] = true
	}
	for name := range committed {
		names[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		lg := kmsg.ListGroupsResponseGroup{Group: name, GroupState: groupEmpty.String()}
		if g := c.groups[name]; g != nil {
			lg.ProtocolType, lg.GroupState = g.protocolType, g.state.String()
		}
		if len(r.StatesFilter) > 0 && !slices.ContainsFunc(r.StatesFilter, func(s string) bool { return strings.EqualFold(s, lg.GroupState) }) {
			continue
		}
		resp.Groups = append(resp.Groups, lg)
	}
	return resp
}

// deleteGroups answers DeleteGroups: a group with members is
// NON_EMPTY_GROUP, one unknown here and without committed offsets
// GROUP_ID_NOT_FOUND; the others are forgotten, and the server deletes
// their offsets.
func (c *coordinator) deleteGroups(r *kmsg.DeleteGroupsRequest, committed map[string]bool) *kmsg.DeleteGroupsResponse {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, name := range r.Groups {
		d := kmsg.NewDeleteGroupsResponseGroup()
		d.Group = name
		g := c.groups[name]
		switch {
		case g != nil && len(g.members) > 0:
			d.ErrorCode = kerr.NonEmptyGroup.Code
		case g == nil && !committed[name]:
			d.ErrorCode = kerr.GroupIDNotFound.Code
		default:
			delete(c.groups, name)
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp
}

// offsetDelete answers OffsetDelete for the topics the server knows: a
// group unknown here and without committed offsets is GROUP_ID_NOT_FOUND;
// a group with members that are not consumers (Kafka cannot tell what
// they read) NON_EMPTY_GROUP; a topic the members subscribe to is
// GROUP_SUBSCRIBED_TO_TOPIC, partition by partition. The partitions
// answered without an error are the server's to delete.
func (c *coordinator) offsetDelete(r *kmsg.OffsetDeleteRequest, committed map[string]bool) *kmsg.OffsetDeleteResponse {
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	g := c.groups[r.Group]
	switch {
	case g == nil && !committed[r.Group]:
		resp.ErrorCode = kerr.GroupIDNotFound.Code
		return resp
	case g != nil && len(g.members) > 0 && g.protocolType != "consumer":
		resp.ErrorCode = kerr.NonEmptyGroup.Code
		return resp
	}
	var subscribed map[string]bool
	if g != nil {
		subscribed = g.subscribedTopics()
	}
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			if subscribed[t.Topic] {
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// subscribedTopics are the topics a consumer group's members subscribe to,
// from the subscriptions they joined with (any protocol they offered).
func (g *group) subscribedTopics() map[string]bool {
	out := map[string]bool{}
	if g.protocolType != "consumer" {
		return out
	}
	for _, m := range g.members {
		for _, p := range m.protocols {
			var meta kmsg.ConsumerMemberMetadata
			if err := meta.ReadFrom(p.Metadata); err != nil {
				continue
			}
			for _, t := range meta.Topics {
				out[t] = true
			}
		}
	}
	return out
}
