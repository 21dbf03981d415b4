package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeGroups is answered by a group's coordinator, whose memory holds
// its members: sent to another node it answers NOT_COORDINATOR, as Kafka
// does (the client asks FindCoordinator again), not a description of a
// group that node knows nothing of. A request naming groups of several
// coordinators gets each answered in the order asked. Admin clients, which
// find the coordinator first, describe the group from any node.
func TestDescribeGroupsAtItsCoordinator(t *testing.T) {
	c := newCluster(t, 3)
	createTopic(t, c.client(1), "events", 3)
	c.leaders(1, "events", func(brokers int, l []int32) bool { return brokers == 3 && allLed(brokers, l) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	coordinator := func(group string) int32 {
		t.Helper()
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = group
		resp, err := req.RequestWith(ctx, c.client(1))
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("find the coordinator of %s: %v %v", group, err, kerr.ErrorForCode(resp.ErrorCode))
		}
		return resp.NodeID
	}
	// Two groups with different coordinators.
	billing, other := "billing", ""
	for i := 0; other == "" && i < 100; i++ {
		if g := fmt.Sprintf("audit-%d", i); coordinator(g) != coordinator(billing) {
			other = g
		}
	}
	if other == "" {
		t.Fatal("every group has the same coordinator")
	}
	member := c.client(2, kgo.ConsumerGroup(billing), kgo.ConsumeTopics("events"))
	adm := kadm.NewClient(c.client(3))
	for {
		d, err := adm.DescribeGroups(ctx, billing)
		if err == nil && d[billing].State == "Stable" && len(d[billing].Members) == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the member never joined %s: %v %+v", billing, err, d)
		}
		poll, stop := context.WithTimeout(ctx, time.Second) // the topic is empty: a poll only joins
		member.PollFetches(poll)
		stop()
	}

	for id := range c.nodes {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{billing, other}
		raw, err := c.client(id).Broker(int(id)).Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := raw.(*kmsg.DescribeGroupsResponse)
		if len(resp.Groups) != 2 || resp.Groups[0].Group != billing || resp.Groups[1].Group != other {
			t.Fatalf("node %d answered for %+v, want %s then %s", id, resp.Groups, billing, other)
		}
		for _, g := range resp.Groups {
			switch mine := coordinator(g.Group) == id; {
			case mine && g.Group == billing && (g.ErrorCode != 0 || g.State != "Stable" || len(g.Members) != 1):
				t.Errorf("node %d coordinates %s: %v %s with %d members, want Stable with its one member", id, g.Group, kerr.ErrorForCode(g.ErrorCode), g.State, len(g.Members))
			case mine && g.Group == other && g.ErrorCode != kerr.GroupIDNotFound.Code: // no such group (v6, KIP-1043)
				t.Errorf("node %d coordinates %s, which has no member and no offsets: %v, want GROUP_ID_NOT_FOUND", id, g.Group, kerr.ErrorForCode(g.ErrorCode))
			case !mine && (g.ErrorCode != kerr.NotCoordinator.Code || g.State != "" || len(g.Members) != 0):
				t.Errorf("node %d does not coordinate %s, and answered %v %q with %d members; want NOT_COORDINATOR", id, g.Group, kerr.ErrorForCode(g.ErrorCode), g.State, len(g.Members))
			}
		}
	}
	// Through any node, an admin client finds the coordinator and describes.
	for id := range c.nodes {
		d, err := kadm.NewClient(c.client(id)).DescribeGroups(ctx, billing)
		if err != nil || d[billing].Err != nil || d[billing].State != "Stable" {
			t.Errorf("kadm through node %d: %v %+v", id, err, d[billing])
		}
	}
}
