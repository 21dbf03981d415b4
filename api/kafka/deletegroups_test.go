package kafka

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/catalog/offsets"
	"strata/engine/memory"
)

// pausingOffsets is a real offsets store whose deletes stop, once they are
// asked, until the test lets them go on: the window in which a commit
// could slip between the coordinator's agreement and the delete.
type pausingOffsets struct {
	*offsets.Store
	asked, release chan struct{}
}

func (p *pausingOffsets) pause() {
	p.asked <- struct{}{}
	<-p.release
}

func (p *pausingOffsets) DeleteGroup(group string) error {
	p.pause()
	return p.Store.DeleteGroup(group)
}

func (p *pausingOffsets) Delete(group string, partitions map[string][]int32) error {
	p.pause()
	return p.Store.Delete(group, partitions)
}

// A commit to a group that arrives while DeleteGroups or OffsetDelete is
// deleting that group's offsets waits for the delete and is kept: the
// deletion and the coordinator's agreement to it are one step for the
// group. A commit to another group does not wait.
func TestCommitDuringGroupDeleteIsKept(t *testing.T) {
	for _, tc := range []struct {
		name string
		del  func(group string) kmsg.Request
		ok   func(kmsg.Response) bool
	}{
		{"DeleteGroups", func(g string) kmsg.Request {
			r := kmsg.NewPtrDeleteGroupsRequest()
			r.Groups = []string{g}
			return r
		}, func(resp kmsg.Response) bool {
			gs := resp.(*kmsg.DeleteGroupsResponse).Groups
			return len(gs) == 1 && gs[0].ErrorCode == errNone
		}},
		{"OffsetDelete", func(g string) kmsg.Request {
			r := kmsg.NewPtrOffsetDeleteRequest()
			r.Group = g
			r.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "a", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
			return r
		}, func(resp kmsg.Response) bool {
			r := resp.(*kmsg.OffsetDeleteResponse)
			return r.ErrorCode == errNone && len(r.Topics) == 1 && r.Topics[0].Partitions[0].ErrorCode == errNone
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := offsets.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			po := &pausingOffsets{Store: store, asked: make(chan struct{}), release: make(chan struct{})}
			srv := New(memory.New(100), Config{Logger: quiet, Offsets: po})
			ct := kmsg.NewPtrCreateTopicsRequest()
			ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "a", NumPartitions: 1, ReplicationFactor: 1}}
			if code := srv.handle(ct, clientInfo{}).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != errNone {
				t.Fatalf("create topic a: %s", codeName(code))
			}
			// An admin's commit (no generation), as kafka-consumer-groups
			// --reset-offsets sends.
			commit := func(group string, offset int64) int16 {
				r := kmsg.NewPtrOffsetCommitRequest()
				r.Group, r.Generation = group, -1
				r.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "a", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset}}}}
				return srv.handle(r, clientInfo{}).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
			}
			for _, g := range []string{"g", "other"} {
				if code := commit(g, 1); code != errNone {
					t.Fatalf("commit to %s: %s", g, codeName(code))
				}
			}

			deleted := make(chan kmsg.Response)
			go func() { deleted <- srv.handle(tc.del("g"), clientInfo{}) }()
			<-po.asked // the coordinator agreed; the store is about to delete
			committed := make(chan int16)
			go func() { committed <- commit("g", 5) }()
			if code := commit("other", 7); code != errNone {
				t.Fatalf("commit to another group during the delete: %s", codeName(code))
			}
			select {
			case code := <-committed:
				t.Fatalf("a commit to g answered %s while its offsets were being deleted", codeName(code))
			case <-time.After(100 * time.Millisecond):
			}
			close(po.release)
			if resp := <-deleted; !tc.ok(resp) {
				t.Fatalf("%s answered %+v", tc.name, resp)
			}
			if code := <-committed; code != errNone {
				t.Fatalf("commit after the delete: %s", codeName(code))
			}
			want := map[string]map[int32]offsets.Committed{"a": {0: {Offset: 5}}}
			if got, err := store.Group("g"); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("g after the delete and the commit: %v, %v; want %v", got, err, want)
			}
		})
	}
}

// DeleteGroups takes Kafka's DELETE on the group: admin on it. A user who
// administers the groups orders* may delete orders-only (or one that does
// not exist), not mixed, whatever topics their offsets are of; mixed is
// GROUP_AUTHORIZATION_FAILED, as Kafka answers, and keeps its offsets. A
// user who only consumes in groups deletes none; the cluster's admin
// deletes any.
func TestDeleteGroupsNeedsAdminOnTheGroup(t *testing.T) {
	auth, err := NewAuth(AuthConfig{Mechanisms: []string{MechPlain}, Users: append(authUsers[:len(authUsers):len(authUsers)],
		User{Name: "orders-admin", Password: "oa-pw-4", Permissions: []Permission{{Operation: OpAdmin, TopicPrefix: "orders."}, {Operation: OpAdmin, GroupPrefix: prefix("orders")}}},
		User{Name: "group-reader", Password: "gr-pw-5", Permissions: []Permission{{Operation: OpConsume, GroupPrefix: prefix("")}}})})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startServer(t, Config{Auth: auth})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := kadm.NewClient(saslClient(t, addr, MechPlain, "root", "root-pw-1"))
	for _, topic := range []string{"orders.us", "payroll"} {
		if _, err := root.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatalf("admin creates %s: %v", topic, err)
		}
	}
	for group, topics := range map[string][]string{"mixed": {"orders.us", "payroll"}, "orders-only": {"orders.us"}} {
		os := kadm.Offsets{}
		for _, topic := range topics {
			os.Add(kadm.Offset{Topic: topic, Partition: 0, At: 1, LeaderEpoch: -1})
		}
		r, err := root.CommitOffsets(ctx, group, os)
		if err == nil {
			err = r.Error()
		}
		if err != nil {
			t.Fatalf("admin commits to %s: %v", group, err)
		}
	}
	deleteAs := func(user, password string, groups ...string) map[string]string {
		t.Helper()
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Groups = groups
		// To the broker: franz-go's coordinator lookup is refused first
		// for a group the user may not describe.
		resp, err := req.RequestWith(ctx, saslClient(t, addr, MechPlain, user, password).Broker(0))
		if err != nil {
			t.Fatalf("%s deletes groups: %v", user, err)
		}
		out := map[string]string{}
		for _, g := range resp.Groups {
			out[g.Group] = codeAndMessage(g.ErrorCode, nil)
		}
		return out
	}
	denied := kerr.GroupAuthorizationFailed.Message

	if got, want := deleteAs("group-reader", "gr-pw-5", "orders-only", "mixed"), map[string]string{"orders-only": denied, "mixed": denied}; !reflect.DeepEqual(got, want) {
		t.Errorf("a user who only consumes in groups deletes groups: %v; want %v", got, want)
	}
	got := deleteAs("orders-admin", "oa-pw-4", "mixed", "orders-only", "orders-nobody")
	if want := map[string]string{"mixed": denied, "orders-only": "ok", "orders-nobody": kerr.GroupIDNotFound.Message}; !reflect.DeepEqual(got, want) {
		t.Errorf("orders' admin deletes groups: %v; want %v", got, want)
	}
	left, err := root.FetchOffsets(ctx, "mixed")
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for topic := range left.Offsets() {
		topics = append(topics, topic)
	}
	sort.Strings(topics)
	if !reflect.DeepEqual(topics, []string{"orders.us", "payroll"}) {
		t.Errorf("mixed after a denied delete has offsets of %v; want orders.us and payroll", topics)
	}
	if got := deleteAs("root", "root-pw-1", "mixed"); got["mixed"] != "ok" {
		t.Errorf("the cluster's admin deletes mixed: %v", got)
	}
	if left, err := root.FetchOffsets(ctx, "mixed"); err != nil || len(left.Offsets()) != 0 {
		t.Errorf("mixed after its delete: %v, %v; want no offsets", left.Offsets(), err)
	}
}
