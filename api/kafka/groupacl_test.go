package kafka

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func prefix(s string) *string { return &s }

// Two tenants on one cluster, each with consume on its own topics and
// groups: mallory, who may consume only m.*, cannot find, join, describe,
// list, read the offsets of or commit to alice's group, as Kafka answers a
// user without READ or DESCRIBE on a GROUP resource; in her own group she
// consumes her own topic.
func TestGroupsNeedGroupPermissions(t *testing.T) {
	auth, err := NewAuth(AuthConfig{Mechanisms: []string{MechPlain}, Users: []User{
		{Name: "root", Password: "root-pw-1", Permissions: []Permission{{Operation: OpAdmin}}},
		{Name: "alice", Password: "alice-pw-2", Permissions: []Permission{{Operation: OpConsume, TopicPrefix: "a."}, {Operation: OpConsume, GroupPrefix: prefix("a.")}}},
		{Name: "mallory", Password: "mallory-pw-3", Permissions: []Permission{{Operation: OpConsume, TopicPrefix: "m."}, {Operation: OpConsume, GroupPrefix: prefix("m.")}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startServer(t, Config{Auth: auth})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := saslClient(t, addr, MechPlain, "root", "root-pw-1")
	for _, topic := range []string{"a.orders", "m.logs"} {
		if _, err := kadm.NewClient(root).CreateTopic(ctx, 2, 1, nil, topic); err != nil {
			t.Fatalf("admin creates %s: %v", topic, err)
		}
		if err := root.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("r")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	consume := func(user, password, group, topic string) *kgo.Client {
		t.Helper()
		cl := saslClient(t, addr, MechPlain, user, password, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if fs := cl.PollFetches(ctx); fs.Err0() != nil || fs.NumRecords() != 1 {
			t.Fatalf("%s consumes %s in %s: %v, %d records", user, topic, group, fs.Err0(), fs.NumRecords())
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("%s commits in %s: %v", user, group, err)
		}
		return cl
	}
	consume("alice", "alice-pw-2", "a.billing", "a.orders")
	consume("mallory", "mallory-pw-3", "m.audit", "m.logs")

	// Straight to the broker: franz-go's own coordinator lookup would
	// answer first.
	mallory := saslClient(t, addr, MechPlain, "mallory", "mallory-pw-3").Broker(0)
	denied := kerr.GroupAuthorizationFailed.Code
	check := func(what string, got int16) {
		t.Helper()
		if got != denied {
			t.Errorf("mallory %s of alice's group: %s, want GROUP_AUTHORIZATION_FAILED", what, codeAndMessage(got, nil))
		}
	}

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKeys = []string{"a.billing", "m.audit"}
	if resp, err := fc.RequestWith(ctx, mallory); err != nil {
		t.Fatal(err)
	} else {
		for _, c := range resp.Coordinators {
			if want := map[string]int16{"a.billing": denied, "m.audit": errNone}[c.Key]; c.ErrorCode != want {
				t.Errorf("mallory finds the coordinator of %s: %s, want %s", c.Key, codeAndMessage(c.ErrorCode, nil), codeAndMessage(want, nil))
			}
		}
	}

	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.ProtocolType, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = "a.billing", "consumer", 10000, 10000
	jg.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: (&kmsg.ConsumerMemberMetadata{Topics: []string{"a.orders"}}).AppendTo(nil)}}
	if resp, err := jg.RequestWith(ctx, mallory); err != nil {
		t.Fatal(err)
	} else {
		check("joins", resp.ErrorCode)
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "a.billing", "x", 1
	if resp, err := hb.RequestWith(ctx, mallory); err != nil {
		t.Fatal(err)
	} else {
		check("heartbeats", resp.ErrorCode)
	}

	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"a.billing", "m.audit"}
	if resp, err := dg.RequestWith(ctx, mallory); err != nil {
		t.Fatal(err)
	} else {
		for _, g := range resp.Groups {
			switch {
			case g.Group == "a.billing":
				check("describes", g.ErrorCode)
				if len(g.Members) > 0 {
					t.Errorf("mallory reads the members of alice's group: %+v", g.Members)
				}
			case g.ErrorCode != errNone:
				t.Errorf("mallory describes her own group: %s", codeAndMessage(g.ErrorCode, nil))
			}
		}
	}

	if resp, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, mallory); err != nil {
		t.Fatal(err)
	} else {
		var names []string
		for _, g := range resp.Groups {
			names = append(names, g.Group)
		}
		if !slices.Equal(names, []string{"m.audit"}) {
			t.Errorf("mallory lists groups %v, want only m.audit", names)
		}
	}

	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = "a.billing"
	if resp, err := of.RequestWith(ctx, mallory); err != nil {
		t.Fatal(err)
	} else {
		check("reads the offsets", resp.ErrorCode)
		if len(resp.Topics) > 0 {
			t.Errorf("mallory reads the offsets of alice's group: %+v", resp.Topics)
		}
	}

	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation = "a.billing", -1
	oc.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "m.logs", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 0, LeaderEpoch: -1}}}}
	if resp, err := oc.RequestWith(ctx, mallory); err != nil {
		t.Fatal(err)
	} else if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Errorf("mallory commits to alice's group: %+v", resp)
	} else {
		check("commits", resp.Topics[0].Partitions[0].ErrorCode)
	}

	// Alice's group is as she left it: her offset and nothing of mallory's.
	got, err := kadm.NewClient(root).FetchOffsets(ctx, "a.billing")
	if err != nil {
		t.Fatal(err)
	}
	offs := got.Offsets()
	if len(offs) != 1 || len(offs["a.orders"]) != 1 {
		t.Errorf("alice's group after mallory: %v, want alice's one commit to a.orders only", offs)
	}
	for _, o := range offs["a.orders"] {
		if o.At != 1 {
			t.Errorf("alice's group after mallory: %v, want alice's commit at 1", offs)
		}
	}
}
