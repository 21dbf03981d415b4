package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"strata/engine/memory"
	"strata/metadata"
	"strata/topicconfig"
)

func single() *metadata.Single {
	return metadata.NewSingle(memory.New(1000), nil, func() metadata.Broker {
		return metadata.Broker{NodeID: 0, Host: "127.0.0.1", Port: 9092}
	})
}

// A single node's topics are its store's shards, created, grown and
// deleted with the errors every metadata.Cluster returns.
func TestSingleNodeTopics(t *testing.T) {
	ctx := context.Background()
	n := single()
	if err := n.CreateTopic(ctx, "orders", 2, 1, map[string]string{"retention.ms": "3600000"}); err != nil {
		t.Fatal(err)
	}
	if topics, err := n.Topics(ctx); err != nil || !maps.Equal(topics, map[string]int32{"orders": 2}) {
		t.Fatalf("topics: %v %v, want orders with 2 partitions", topics, err)
	}
	if got := n.TopicConfigs("orders"); !maps.Equal(got, map[string]string{"retention.ms": "3600000"}) {
		t.Fatalf("configs: %v", got)
	}
	if err := n.CreateTopic(ctx, "orders", 1, 1, nil); !errors.Is(err, metadata.ErrTopicExists) {
		t.Fatalf("creating it again: %v, want ErrTopicExists", err)
	}
	var rerr *metadata.InvalidReplicationError
	if err := n.CreateTopic(ctx, "copies", 1, 3, nil); !errors.As(err, &rerr) || !errors.Is(err, metadata.ErrInvalidReplicationFactor) {
		t.Fatalf("3 replicas on one node: %v, want an InvalidReplicationError", err)
	}
	var perr *metadata.InvalidPartitionsError
	if err := n.CreatePartitions(ctx, "orders", 2); !errors.As(err, &perr) || perr.Error() != "Topic already has 2 partition(s)." {
		t.Fatalf("growing to what it has: %v", err)
	}
	if err := n.CreatePartitions(ctx, "orders", 5); err != nil {
		t.Fatal(err)
	}
	if p, ok := n.Partition("orders", 4); !ok || p.Leader != 0 || p.LeaderEpoch != -1 {
		t.Fatalf("partition 4: %+v %v: want led by this node, no epoch", p, ok)
	}
	if err := n.CreatePartitions(ctx, "nosuch", 5); !errors.Is(err, metadata.ErrUnknownTopic) {
		t.Fatalf("growing a topic that does not exist: %v", err)
	}
	if err := n.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if topics, _ := n.Topics(ctx); len(topics) != 0 || n.TopicConfigs("orders") != nil {
		t.Fatalf("after delete: topics %v, configs %v", topics, n.TopicConfigs("orders"))
	}
	if err := n.DeleteTopic(ctx, "orders"); !errors.Is(err, metadata.ErrUnknownTopic) {
		t.Fatalf("deleting it again: %v, want ErrUnknownTopic", err)
	}
	if b := n.Coordinator("g"); b.Port != 9092 || len(n.Brokers()) != 1 {
		t.Fatalf("coordinator %+v, brokers %v: want this node", b, n.Brokers())
	}
}

// Alter is every front end's config change: create-only keys stay, values
// are checked, a dry run writes nothing.
func TestAlterKeepsCreateOnlyKeysAndChecksValues(t *testing.T) {
	ctx := context.Background()
	n := single()
	if err := n.CreateTopic(ctx, "t", 1, 1, map[string]string{"strata.engine": "memory"}); err != nil {
		t.Fatal(err)
	}
	set := func(k, v string) func(topicconfig.Overrides) (topicconfig.Overrides, error) {
		return func(cur topicconfig.Overrides) (topicconfig.Overrides, error) {
			if cur == nil {
				cur = topicconfig.Overrides{}
			}
			cur[k] = v
			return cur, nil
		}
	}
	if err := metadata.Alter(ctx, n, nil, "t", true, set("retention.ms", "1000")); err != nil {
		t.Fatal(err)
	}
	if got := n.TopicConfigs("t")["retention.ms"]; got != "" {
		t.Fatalf("a dry run wrote retention.ms=%s", got)
	}
	if err := metadata.Alter(ctx, n, nil, "t", false, set("retention.ms", "1000")); err != nil {
		t.Fatal(err)
	}
	var ce *topicconfig.Error
	if err := metadata.Alter(ctx, n, nil, "t", false, set("retention.ms", "abc")); !errors.As(err, &ce) {
		t.Fatalf("retention.ms=abc: %v, want a *topicconfig.Error", err)
	}
	if err := metadata.Alter(ctx, n, nil, "t", false, set("strata.engine", "pebble")); !errors.As(err, &ce) {
		t.Fatalf("changing strata.engine: %v, want it refused", err)
	}
	drop := func(topicconfig.Overrides) (topicconfig.Overrides, error) { return nil, nil }
	if err := metadata.Alter(ctx, n, nil, "t", false, drop); err != nil {
		t.Fatal(err)
	}
	if got := n.TopicConfigs("t"); !maps.Equal(got, map[string]string{"strata.engine": "memory"}) {
		t.Fatalf("after dropping every config: %v, want strata.engine kept", got)
	}
	if err := metadata.Alter(ctx, n, nil, "nosuch", false, drop); !errors.Is(err, metadata.ErrUnknownTopic) {
		t.Fatalf("altering a topic that does not exist: %v", err)
	}
}

// BrokerAddr is where another node dials a live broker: BrokerAt's
// inverse, IPv6 hosts bracketed.
func TestBrokerAddr(t *testing.T) {
	for _, tc := range []struct {
		name string
		self metadata.Broker
		node int32
		want string
		ok   bool
	}{
		{"live", metadata.Broker{NodeID: 0, Host: "127.0.0.1", Port: 9092}, 0, "127.0.0.1:9092", true},
		{"ipv6", metadata.Broker{NodeID: 3, Host: "::1", Port: 9101}, 3, "[::1]:9101", true},
		{"not live", metadata.Broker{NodeID: 0, Host: "127.0.0.1", Port: 9092}, 7, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := metadata.NewSingle(memory.New(1000), nil, func() metadata.Broker { return tc.self })
			got, ok := metadata.BrokerAddr(n, tc.node)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("BrokerAddr(%d) = %q, %t; want %q, %t", tc.node, got, ok, tc.want, tc.ok)
			}
			if ok {
				if b, _ := metadata.BrokerAt(tc.node, got); b != tc.self {
					t.Fatalf("BrokerAt(%q) = %+v, want %+v", got, b, tc.self)
				}
			}
		})
	}
}

func TestCheckTopicName(t *testing.T) {
	existing := []string{"a.b", "orders", "x_y"}
	for _, tc := range []struct {
		name string
		want string // "" when taken
	}{
		{"a_b", "Topic 'a_b' collides with existing topic: a.b"},
		{"x.y", "Topic 'x.y' collides with existing topic: x_y"},
		{"a.b", ""}, // the same name: the create says it exists
		{"orders2", ""},
		{"__consumer_offsets", "Topic '__consumer_offsets' is reserved for Kafka's internal use."},
		{"__transaction_state", "Topic '__transaction_state' is reserved for Kafka's internal use."},
		{"__mine", ""},
	} {
		err := metadata.CheckTopicName(tc.name, existing)
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("CheckTopicName(%q) = %v, want %q", tc.name, err, tc.want)
		}
	}
}
