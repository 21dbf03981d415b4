package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/replica"
)

// ErrNotLive refuses a request to a node the cluster does not list as
// live: there is no address to send it to.
var ErrNotLive = errors.New("the node is not live")

// ClientConfig is what a node's Client needs.
type ClientConfig struct {
	// Self is this node's id, the replica id its requests name.
	Self int32
	// Opts configure the franz-go client made for each node: TLS and SASL
	// as the listeners want them.
	Opts []kgo.Opt
	// Secret is the cluster's peer secret (cluster.PeerSecret): each
	// Fetch and ListOffsets carries this node's proof made with it
	// (proof.go). Empty: no proof, and no peer answers as a replica.
	Secret []byte
	// Addr is a live node's Kafka listener, host:port; false when the
	// node is not live.
	Addr func(node int32) (string, bool)
}

// Client is this node's client of the other nodes' Kafka listeners: its
// followers' fetches (Fetch, the replica.Transport), copy reads of sealed
// segments for tiering (ReadCopy), and a leader's reads of the parts of a
// split log other nodes hold (ReadPart, ListOffset, DeleteRecords). One
// franz-go client per node address, made on first use; requests go to
// that broker directly, never routed by the client's own metadata.
type Client struct {
	cfg ClientConfig

	mu      sync.Mutex
	clients map[string]*kgo.Client
	closed  bool
}

// NewClient makes a node's client of its peers; Close ends it.
func NewClient(cfg ClientConfig) *Client { return &Client{cfg: cfg} }

var _ replica.Transport = (*Client)(nil)

// Close closes every connection; requests after it fail. Closing a nil
// Client (a node alone) does nothing.
func (c *Client) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, cl := range c.clients {
		cl.Close()
	}
	c.clients = nil
}

// broker is node's broker, to send a request to directly.
func (c *Client) broker(node int32) (*kgo.Broker, error) {
	if c == nil {
		return nil, errors.New("this node has no client of its peers: it runs alone")
	}
	addr, ok := c.cfg.Addr(node)
	if !ok {
		return nil, fmt.Errorf("node %d: %w", node, ErrNotLive)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("shutting down")
	}
	cl, ok := c.clients[addr]
	if !ok {
		opts := append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ClientID(fmt.Sprintf("strata-node-%d", c.cfg.Self))}, c.cfg.Opts...)
		var err error
		if cl, err = kgo.NewClient(opts...); err != nil {
			return nil, err
		}
		if c.clients == nil {
			c.clients = map[string]*kgo.Client{}
		}
		c.clients[addr] = cl
	}
	return cl.SeedBrokers()[0], nil
}

// send sends req to node's broker and decodes its answer, the request
// marked with this node's proof when it goes as a replica's (prove).
func send[R kmsg.Response](ctx context.Context, c *Client, node int32, req kmsg.Request, prove bool) (R, error) {
	var none R
	b, err := c.broker(node)
	if err != nil {
		return none, err
	}
	if prove && len(c.cfg.Secret) > 0 {
		Prove(req, c.cfg.Secret, c.cfg.Self, node, time.Now())
	}
	resp, err := b.Request(ctx, req)
	if err != nil {
		return none, err
	}
	r, ok := resp.(R)
	if !ok {
		return none, fmt.Errorf("node %d answered a %s request with a %T", node, kmsg.NameForKey(req.Key()), resp)
	}
	return r, nil
}

// fetchOne is a replica's Fetch of one partition from offset within
// maxBytes that waits for no records.
func (c *Client) fetchOne(topic string, partition int32, offset int64, maxBytes int32) (*kmsg.FetchRequest, *kmsg.FetchRequestTopicPartition) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.ReplicaState.ID = c.cfg.Self, c.cfg.Self
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 1, maxBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req, &req.Topics[0].Partitions[0]
}

// Fetch sends a follower's fetches to leader in one Kafka Fetch, each
// partition marked as a follower's (replica.Transport).
func (c *Client) Fetch(ctx context.Context, leader int32, frs []replica.FetchRequest) ([]replica.FetchAnswer, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.ReplicaState.ID = c.cfg.Self, c.cfg.Self
	req.MinBytes = 1
	topics := map[string]int{} // topic -> index in req.Topics
	for _, fr := range frs {
		req.MaxWaitMillis = max(req.MaxWaitMillis, int32(fr.Wait/time.Millisecond))
		req.MaxBytes = min(req.MaxBytes+fr.MaxBytes, 64<<20)
		i, ok := topics[fr.Topic]
		if !ok {
			i = len(req.Topics)
			topics[fr.Topic] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = fr.Topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = fr.Partition, fr.Offset, fr.MaxBytes
		rp.CurrentLeaderEpoch = fr.Epoch
		var flags byte
		if fr.Probe {
			flags |= flagProbe
		}
		rp.UnknownTags.Set(tagReplicaFetch, []byte{flags})
		if len(fr.Seals) > 0 {
			rp.UnknownTags.Set(tagSeals, encodeSeals(fr.Seals))
		}
		if fr.LogStart >= 0 && !fr.Probe {
			rp.UnknownTags.Set(tagLogStart, encodeLogStart(fr.LogStart))
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	resp, err := send[*kmsg.FetchResponse](ctx, c, leader, req, true)
	if errors.Is(err, ErrNotLive) {
		return nil, fmt.Errorf("%w: node %d is not live", replica.ErrNotLeader, leader)
	}
	if err != nil {
		return nil, err
	}
	if resp.ErrorCode != errNone {
		return nil, fmt.Errorf("node %d answered a follower's fetch with %v", leader, kerr.ErrorForCode(resp.ErrorCode))
	}
	got := map[string]map[int32]kmsg.FetchResponseTopicPartition{}
	for _, rt := range resp.Topics {
		if got[rt.Topic] == nil {
			got[rt.Topic] = map[int32]kmsg.FetchResponseTopicPartition{}
		}
		for _, rp := range rt.Partitions {
			got[rt.Topic][rp.Partition] = rp
		}
	}
	out := make([]replica.FetchAnswer, len(frs))
	for i, fr := range frs {
		rp, ok := got[fr.Topic][fr.Partition]
		if !ok {
			out[i].Err = fmt.Errorf("node %d's answer to a follower's fetch leaves out %s-%d", leader, fr.Topic, fr.Partition)
			continue
		}
		out[i].ReplicaRead, out[i].Err = decodeReplicaFetch(resp.Version, rp)
	}
	return out, nil
}

// ReadCopy reads records of topic's partition p from offset on, within
// maxBytes, as node holds them in its own log (whether or not it leads the
// partition), over the Kafka listener as a replica, so with the TLS and
// SASL peers use. The records are strata's, byte for byte as stored.
func (c *Client) ReadCopy(ctx context.Context, node int32, topic string, p int32, offset int64, maxBytes int32) ([]record.Record, error) {
	req, rp := c.fetchOne(topic, p, offset, maxBytes)
	rp.CurrentLeaderEpoch = -1
	rp.UnknownTags.Set(tagCopyRead, nil)
	resp, err := send[*kmsg.FetchResponse](ctx, c, node, req, true)
	if errors.Is(err, ErrNotLive) {
		return nil, fmt.Errorf("reading %s-%d from node %d: it is not live", topic, p, node)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s-%d from node %d: %w", topic, p, node, err)
	}
	if resp.ErrorCode != errNone || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("reading %s-%d from node %d: answered with %v and %d topics", topic, p, node, kerr.ErrorForCode(resp.ErrorCode), len(resp.Topics))
	}
	part := resp.Topics[0].Partitions[0]
	if part.ErrorCode != errNone {
		return nil, fmt.Errorf("reading %s-%d at %d from node %d: %w", topic, p, offset, node, kerr.ErrorForCode(part.ErrorCode))
	}
	if !markedCopyRead(part.UnknownTags) {
		return nil, fmt.Errorf("reading %s-%d from node %d: it answered with Kafka record batches (fetch version %d), not a copy read", topic, p, node, resp.Version)
	}
	out, err := decodeCopyRead(part.RecordBatches)
	if err != nil {
		return nil, fmt.Errorf("reading %s-%d from node %d: its records: %w", topic, p, node, err)
	}
	return out, nil
}

// ReadPart reads a partition from offset on at node, within maxBytes,
// without waiting for records: a leader reading the part of a split log
// node holds, in Kafka's record batches, as node would answer a consumer
// but whoever leads.
func (c *Client) ReadPart(ctx context.Context, node int32, topic string, partition int32, offset int64, maxBytes int32) (kmsg.FetchResponseTopicPartition, error) {
	req, _ := c.fetchOne(topic, partition, offset, maxBytes)
	resp, err := send[*kmsg.FetchResponse](ctx, c, node, req, true)
	if err != nil {
		return kmsg.FetchResponseTopicPartition{}, err
	}
	if resp.ErrorCode != errNone || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.FetchResponseTopicPartition{}, fmt.Errorf("node %d answered a fetch of %s-%d with error %d and %d topics", node, topic, partition, resp.ErrorCode, len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0], nil
}

// ListOffset asks node for a partition's offset at timestamp (-2: its
// earliest), as ListOffsets answers it, from node's own part of the log.
func (c *Client) ListOffset(ctx context.Context, node int32, topic string, partition int32, timestamp int64) (kmsg.ListOffsetsResponseTopicPartition, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = c.cfg.Self
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = partition, timestamp
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := send[*kmsg.ListOffsetsResponse](ctx, c, node, req, true)
	if err != nil {
		return kmsg.ListOffsetsResponseTopicPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.ListOffsetsResponseTopicPartition{}, fmt.Errorf("node %d answered a ListOffsets of %s-%d with %d topics", node, topic, partition, len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0], nil
}

// DeleteRecords asks node to delete a partition's records below offset,
// within the part it holds. It carries no proof: only a replica's Fetch
// and ListOffsets do (ClientConfig.Secret).
func (c *Client) DeleteRecords(ctx context.Context, node int32, topic string, partition int32, offset int64) (kmsg.DeleteRecordsResponseTopicPartition, error) {
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = partition, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := send[*kmsg.DeleteRecordsResponse](ctx, c, node, req, false)
	if err != nil {
		return kmsg.DeleteRecordsResponseTopicPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.DeleteRecordsResponseTopicPartition{}, fmt.Errorf("node %d answered a DeleteRecords of %s-%d with %d topics", node, topic, partition, len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0], nil
}
