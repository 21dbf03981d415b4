package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	topicDenied   = kerr.TopicAuthorizationFailed.Code   // 29
	groupDenied   = kerr.GroupAuthorizationFailed.Code   // 30
	clusterDenied = kerr.ClusterAuthorizationFailed.Code // 31
)

// authorized answers req for an authenticated user. Topics the user may not
// use are taken out of the request and answered TOPIC_AUTHORIZATION_FAILED
// beside the others, as Kafka answers per topic. An API without a rule here
// is refused: a new API must say who may call it.
func (s *Server) authorized(ss *session, req kmsg.Request, cl clientInfo) (kmsg.Response, error) {
	p := ss.auth.permissions(ss.user)
	switch r := req.(type) {
	case *kmsg.MetadataRequest:
		// Metadata answers every topic; it creates one only for a user who
		// may produce to every topic asked for.
		for _, t := range r.Topics {
			if t.Topic == nil || !p.allows(OpProduce, *t.Topic) {
				r.AllowAutoTopicCreation = false
			}
		}
		return s.handle(r, cl), nil

	case *kmsg.ProduceRequest:
		var denied []kmsg.ProduceResponseTopic
		r.Topics = keep(r.Topics, func(t kmsg.ProduceRequestTopic) bool { return p.allows(OpProduce, t.Topic) },
			func(t kmsg.ProduceRequestTopic) {
				rt := kmsg.NewProduceResponseTopic()
				rt.Topic = t.Topic
				for _, tp := range t.Partitions {
					rp := kmsg.NewProduceResponseTopicPartition()
					rp.Partition, rp.ErrorCode = tp.Partition, topicDenied
					rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
					rt.Partitions = append(rt.Partitions, rp)
				}
				denied = append(denied, rt)
			})
		resp := s.handle(r, cl).(*kmsg.ProduceResponse)
		resp.Topics = append(resp.Topics, denied...)
		return resp, nil

	case *kmsg.FetchRequest:
		var denied []kmsg.FetchResponseTopic
		r.Topics = keep(r.Topics, func(t kmsg.FetchRequestTopic) bool { return p.allows(OpConsume, t.Topic) },
			func(t kmsg.FetchRequestTopic) {
				rt := kmsg.NewFetchResponseTopic()
				rt.Topic = t.Topic
				for _, tp := range t.Partitions {
					rp := kmsg.NewFetchResponseTopicPartition()
					rp.Partition, rp.ErrorCode = tp.Partition, topicDenied
					rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
					rp.PreferredReadReplica = -1
					rp.RecordBatches = []byte{}
					rt.Partitions = append(rt.Partitions, rp)
				}
				denied = append(denied, rt)
			})
		if len(r.Topics) == 0 && len(denied) > 0 {
			r.MaxWaitMillis = 0 // nothing to wait for
		}
		resp := s.handle(r, cl).(*kmsg.FetchResponse)
		resp.Topics = append(resp.Topics, denied...)
		return resp, nil

	case *kmsg.ListOffsetsRequest:
		var denied []kmsg.ListOffsetsRequestTopic
		r.Topics = keep(r.Topics, func(t kmsg.ListOffsetsRequestTopic) bool { return p.allows(OpConsume, t.Topic) },
			func(t kmsg.ListOffsetsRequestTopic) { denied = append(denied, t) })
		resp := s.handle(r, cl).(*kmsg.ListOffsetsResponse)
		resp.Topics = append(resp.Topics, eachPartition[kmsg.ListOffsetsResponseTopic](denied, func(_ string, tp kmsg.ListOffsetsRequestTopicPartition) kmsg.ListOffsetsResponseTopicPartition {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.Offset, rp.Timestamp, rp.LeaderEpoch = tp.Partition, topicDenied, -1, -1, -1
			return rp
		})...)
		return resp, nil

	case *kmsg.OffsetForLeaderEpochRequest:
		var denied []kmsg.OffsetForLeaderEpochRequestTopic
		r.Topics = keep(r.Topics, func(t kmsg.OffsetForLeaderEpochRequestTopic) bool { return p.allows(OpConsume, t.Topic) },
			func(t kmsg.OffsetForLeaderEpochRequestTopic) { denied = append(denied, t) })
		resp := s.handle(r, cl).(*kmsg.OffsetForLeaderEpochResponse)
		resp.Topics = append(resp.Topics, eachPartition[kmsg.OffsetForLeaderEpochResponseTopic](denied, func(_ string, tp kmsg.OffsetForLeaderEpochRequestTopicPartition) kmsg.OffsetForLeaderEpochResponseTopicPartition {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset = tp.Partition, topicDenied, -1, -1
			return rp
		})...)
		return resp, nil

	case *kmsg.DeleteRecordsRequest:
		var denied []kmsg.DeleteRecordsRequestTopic
		r.Topics = keep(r.Topics, func(t kmsg.DeleteRecordsRequestTopic) bool { return p.allows(OpAdmin, t.Topic) },
			func(t kmsg.DeleteRecordsRequestTopic) { denied = append(denied, t) })
		s.logDenied(ss, r, len(denied))
		resp := s.handle(r, cl).(*kmsg.DeleteRecordsResponse)
		resp.Topics = append(resp.Topics, eachPartition[kmsg.DeleteRecordsResponseTopic](denied, func(_ string, tp kmsg.DeleteRecordsRequestTopicPartition) kmsg.DeleteRecordsResponseTopicPartition {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.LowWatermark = tp.Partition, topicDenied, -1
			return rp
		})...)
		return resp, nil

	case *kmsg.CreateTopicsRequest:
		var denied []kmsg.CreateTopicsResponseTopic
		r.Topics = keep(r.Topics, func(t kmsg.CreateTopicsRequestTopic) bool { return p.allows(OpAdmin, t.Topic) },
			func(t kmsg.CreateTopicsRequestTopic) {
				rt := kmsg.NewCreateTopicsResponseTopic()
				rt.Topic, rt.ErrorCode, rt.ErrorMessage = t.Topic, topicDenied, deniedMessage(OpAdmin)
				rt.NumPartitions, rt.ReplicationFactor = -1, -1
				denied = append(denied, rt)
			})
		s.logDenied(ss, r, len(denied))
		resp := s.handle(r, cl).(*kmsg.CreateTopicsResponse)
		resp.Topics = append(resp.Topics, denied...)
		return resp, nil

	case *kmsg.DeleteTopicsRequest:
		var denied []kmsg.DeleteTopicsResponseTopic
		r.TopicNames = keep(r.TopicNames, func(t string) bool { return p.allows(OpAdmin, t) },
			func(t string) {
				rt := kmsg.NewDeleteTopicsResponseTopic()
				rt.Topic, rt.ErrorCode, rt.ErrorMessage = &t, topicDenied, deniedMessage(OpAdmin)
				denied = append(denied, rt)
			})
		s.logDenied(ss, r, len(denied))
		resp := s.handle(r, cl).(*kmsg.DeleteTopicsResponse)
		resp.Topics = append(resp.Topics, denied...)
		return resp, nil

	case *kmsg.CreatePartitionsRequest:
		var denied []kmsg.CreatePartitionsResponseTopic
		r.Topics = keep(r.Topics, func(t kmsg.CreatePartitionsRequestTopic) bool { return p.allows(OpAdmin, t.Topic) },
			func(t kmsg.CreatePartitionsRequestTopic) {
				rt := kmsg.NewCreatePartitionsResponseTopic()
				rt.Topic, rt.ErrorCode, rt.ErrorMessage = t.Topic, topicDenied, deniedMessage(OpAdmin)
				denied = append(denied, rt)
			})
		s.logDenied(ss, r, len(denied))
		resp := s.handle(r, cl).(*kmsg.CreatePartitionsResponse)
		resp.Topics = append(resp.Topics, denied...)
		return resp, nil

	case *kmsg.DeleteGroupsRequest:
		// Kafka's DELETE on the group: admin on it.
		var denied []kmsg.DeleteGroupsResponseGroup
		r.Groups = keep(r.Groups, func(g string) bool { return p.group(OpAdmin, g) },
			func(g string) {
				denied = append(denied, kmsg.DeleteGroupsResponseGroup{Group: g, ErrorCode: groupDenied})
			})
		s.logDeniedGroups(ss, r, len(denied))
		resp := s.handle(r, cl).(*kmsg.DeleteGroupsResponse)
		resp.Groups = append(resp.Groups, denied...)
		return resp, nil

	case *kmsg.OffsetDeleteRequest:
		// Kafka's DELETE on the group and READ on each topic.
		if !p.group(OpAdmin, r.Group) {
			s.logDeniedGroups(ss, r, 1)
			resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
			resp.ErrorCode = groupDenied
			return resp, nil
		}
		var denied []kmsg.OffsetDeleteResponseTopic
		r.Topics = keep(r.Topics, func(t kmsg.OffsetDeleteRequestTopic) bool { return p.allows(OpConsume, t.Topic) },
			func(t kmsg.OffsetDeleteRequestTopic) {
				rt := kmsg.NewOffsetDeleteResponseTopic()
				rt.Topic = t.Topic
				for _, tp := range t.Partitions {
					rt.Partitions = append(rt.Partitions, kmsg.OffsetDeleteResponseTopicPartition{Partition: tp.Partition, ErrorCode: topicDenied})
				}
				denied = append(denied, rt)
			})
		s.logDenied(ss, r, len(denied))
		resp := s.handle(r, cl).(*kmsg.OffsetDeleteResponse)
		if resp.ErrorCode == errNone {
			resp.Topics = append(resp.Topics, denied...)
		}
		return resp, nil

	case *kmsg.DescribeLogDirsRequest:
		// Where a node keeps its data and how much is the cluster's view.
		if !p.cluster() {
			resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
			resp.ErrorCode = clusterDenied
			return resp, nil
		}
		return s.handle(r, cl), nil

	case *kmsg.DescribeProducersRequest:
		var denied []kmsg.DescribeProducersRequestTopic
		r.Topics = keep(r.Topics, func(t kmsg.DescribeProducersRequestTopic) bool { return p.allows(OpConsume, t.Topic) },
			func(t kmsg.DescribeProducersRequestTopic) { denied = append(denied, t) })
		resp := s.handle(r, cl).(*kmsg.DescribeProducersResponse)
		resp.Topics = append(resp.Topics, eachPartition[kmsg.DescribeProducersResponseTopic](denied, func(_ string, part int32) kmsg.DescribeProducersResponseTopicPartition {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition, rp.ErrorCode = part, topicDenied
			return rp
		})...)
		return resp, nil

	case *kmsg.DescribeClusterRequest:
		return s.handle(r, cl), nil // what Metadata shows every user

	case *kmsg.InitProducerIDRequest:
		if !p.any(OpProduce) {
			resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
			resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode = -1, -1, clusterDenied
			return resp, nil
		}
		return s.handle(r, cl), nil

	case *kmsg.OffsetCommitRequest:
		// Kafka's READ on the group and on each topic.
		groupOK := p.group(OpConsume, r.Group)
		var denied []kmsg.OffsetCommitResponseTopic
		r.Topics = keep(r.Topics, func(t kmsg.OffsetCommitRequestTopic) bool { return groupOK && p.allows(OpConsume, t.Topic) },
			func(t kmsg.OffsetCommitRequestTopic) {
				rt := kmsg.NewOffsetCommitResponseTopic()
				rt.Topic = t.Topic
				for _, tp := range t.Partitions {
					rp := kmsg.NewOffsetCommitResponseTopicPartition()
					rp.Partition, rp.ErrorCode = tp.Partition, topicDenied
					if !groupOK {
						rp.ErrorCode = groupDenied
					}
					rt.Partitions = append(rt.Partitions, rp)
				}
				denied = append(denied, rt)
			})
		resp := s.handle(r, cl).(*kmsg.OffsetCommitResponse)
		resp.Topics = append(resp.Topics, denied...)
		return resp, nil

	case *kmsg.OffsetFetchRequest:
		// Kafka's DESCRIBE on the group and on each topic.
		if !p.group(OpConsume, r.Group) {
			s.logDeniedGroups(ss, r, 1)
			resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
			resp.ErrorCode = groupDenied
			return resp, nil
		}
		all := r.Topics == nil
		var denied []kmsg.OffsetFetchRequestTopic
		r.Topics = keep(r.Topics, func(t kmsg.OffsetFetchRequestTopic) bool { return p.allows(OpConsume, t.Topic) },
			func(t kmsg.OffsetFetchRequestTopic) { denied = append(denied, t) })
		resp := s.handle(r, cl).(*kmsg.OffsetFetchResponse)
		if all { // only the topics the user may read
			resp.Topics = keep(resp.Topics, func(t kmsg.OffsetFetchResponseTopic) bool { return p.allows(OpConsume, t.Topic) }, nil)
		}
		resp.Topics = append(resp.Topics, eachPartition[kmsg.OffsetFetchResponseTopic](denied, func(_ string, part int32) kmsg.OffsetFetchResponseTopicPartition {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.Offset, rp.LeaderEpoch = part, topicDenied, -1, -1
			return rp
		})...)
		return resp, nil

	case *kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest, *kmsg.HeartbeatRequest, *kmsg.LeaveGroupRequest:
		// Kafka's READ on the group: a member sees the others' ids and
		// subscriptions and takes partitions from them.
		if p.group(OpConsume, requestGroup(r)) {
			return s.handle(r, cl), nil
		}
		s.logDeniedGroups(ss, r, 1)
		return groupDeniedResponse(r), nil

	case *kmsg.FindCoordinatorRequest:
		// Kafka's DESCRIBE on the group; a transactional id's coordinator
		// (strata has no transactions) with any consume permission.
		ok := func(key string) bool {
			if r.CoordinatorType == 0 {
				return p.group(OpConsume, key)
			}
			return p.any(OpConsume)
		}
		if r.Version < 4 {
			if ok(r.CoordinatorKey) {
				return s.handle(r, cl), nil
			}
			s.logDeniedGroups(ss, r, 1)
			return groupDeniedResponse(r), nil
		}
		var denied []string
		r.CoordinatorKeys = keep(r.CoordinatorKeys, ok, func(k string) { denied = append(denied, k) })
		s.logDeniedGroups(ss, r, len(denied))
		resp := s.handle(r, cl).(*kmsg.FindCoordinatorResponse)
		for _, k := range denied {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.ErrorCode, c.NodeID, c.Port = k, groupDenied, -1, -1
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp, nil

	case *kmsg.DescribeGroupsRequest:
		// Kafka's DESCRIBE on each group.
		var denied []kmsg.DescribeGroupsResponseGroup
		r.Groups = keep(r.Groups, func(g string) bool { return p.group(OpConsume, g) }, func(g string) {
			d := kmsg.NewDescribeGroupsResponseGroup()
			d.Group, d.ErrorCode = g, groupDenied
			denied = append(denied, d)
		})
		s.logDeniedGroups(ss, r, len(denied))
		resp := s.handle(r, cl).(*kmsg.DescribeGroupsResponse)
		resp.Groups = append(resp.Groups, denied...)
		return resp, nil

	case *kmsg.ListGroupsRequest:
		// Kafka lists the groups the user may DESCRIBE.
		resp := s.handle(r, cl).(*kmsg.ListGroupsResponse)
		resp.Groups = keep(resp.Groups, func(g kmsg.ListGroupsResponseGroup) bool { return p.group(OpConsume, g.Group) }, nil)
		return resp, nil

	case *kmsg.DescribeUserSCRAMCredentialsRequest, *kmsg.AlterUserSCRAMCredentialsRequest:
		return s.scramAdmin(&p, r), nil

	case *kmsg.DescribeConfigsRequest, *kmsg.AlterConfigsRequest, *kmsg.IncrementalAlterConfigsRequest:
		// A topic's configs: seen by who may consume it, changed by its
		// admins; the broker's: by cluster admins.
		_, describe := r.(*kmsg.DescribeConfigsRequest)
		cl.denyConfigs = func(kind kmsg.ConfigResourceType, name string) int16 {
			switch {
			case kind != kmsg.ConfigResourceTypeTopic:
				if !p.cluster() {
					return clusterDenied
				}
			case describe && !p.allows(OpConsume, name), !describe && !p.allows(OpAdmin, name):
				return topicDenied
			}
			return errNone
		}
		return s.handle(r, cl), nil
	}
	return nil, fmt.Errorf("no authorization rule for API %s", kmsg.NameForKey(req.Key()))
}

// keep returns the elements ok accepts and calls drop (if set) with the others.
func keep[T any](in []T, ok func(T) bool, drop func(T)) []T {
	if in == nil {
		return nil
	}
	out := in[:0:0]
	for _, v := range in {
		if ok(v) {
			out = append(out, v)
		} else if drop != nil {
			drop(v)
		}
	}
	return out
}

func deniedMessage(op Operation) *string {
	m := fmt.Sprintf("the user has no %s permission on this topic", op)
	return &m
}

func (s *Server) logDenied(ss *session, req kmsg.Request, n int) {
	if n > 0 {
		s.log.Info("kafka: request denied", "remote", ss.remote, "user", ss.user, "api", kmsg.NameForKey(req.Key()), "topics", n)
	}
}

func (s *Server) logDeniedGroups(ss *session, req kmsg.Request, n int) {
	if n > 0 {
		s.log.Info("kafka: request denied", "remote", ss.remote, "user", ss.user, "api", kmsg.NameForKey(req.Key()), "groups", n)
	}
}

// requestGroup is the group a member's request names.
func requestGroup(req kmsg.Request) string {
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		return r.Group
	case *kmsg.SyncGroupRequest:
		return r.Group
	case *kmsg.HeartbeatRequest:
		return r.Group
	case *kmsg.LeaveGroupRequest:
		return r.Group
	}
	return ""
}

// groupDeniedResponse answers a request for a group the user may not use.
func groupDeniedResponse(req kmsg.Request) kmsg.Response {
	switch r := req.(type) {
	case *kmsg.FindCoordinatorRequest:
		resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode, resp.NodeID, resp.Port = groupDenied, -1, -1
		for _, k := range r.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.ErrorCode, c.NodeID, c.Port = k, groupDenied, -1, -1
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	case *kmsg.JoinGroupRequest:
		resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode, resp.Generation = groupDenied, -1
		return resp
	case *kmsg.SyncGroupRequest:
		resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = groupDenied
		return resp
	case *kmsg.HeartbeatRequest:
		resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = groupDenied
		return resp
	case *kmsg.LeaveGroupRequest:
		resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
		resp.ErrorCode = groupDenied
		return resp
	case *kmsg.DescribeGroupsRequest:
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range r.Groups {
			d := kmsg.NewDescribeGroupsResponseGroup()
			d.Group, d.ErrorCode = g, groupDenied
			resp.Groups = append(resp.Groups, d)
		}
		return resp
	case *kmsg.ListGroupsRequest:
		return r.ResponseKind() // no group the user may see
	}
	return req.ResponseKind()
}
