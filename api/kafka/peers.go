package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// peers is this node's client of the other nodes' Kafka listeners: a
// leader reads the offsets another node holds (SplitLog) with Kafka's own
// Fetch and ListOffsets, sent as a replica (replica id: this node), which
// the holder answers from its log whether or not it leads the partition.
// One franz-go client per node address, made on first use; requests go to
// that broker directly, never routed by the client's own metadata.
type peers struct {
	self int32
	opts []kgo.Opt
	// prove marks a request to node with this node's peer proof.
	prove func(req kmsg.Request, node int32)

	mu      sync.Mutex
	clients map[string]*kgo.Client
	closed  bool
}

func (p *peers) broker(addr string) (*kgo.Broker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("shutting down")
	}
	cl, ok := p.clients[addr]
	if !ok {
		opts := append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ClientID(fmt.Sprintf("strata-node-%d", p.self))}, p.opts...)
		var err error
		if cl, err = kgo.NewClient(opts...); err != nil {
			return nil, err
		}
		if p.clients == nil {
			p.clients = map[string]*kgo.Client{}
		}
		p.clients[addr] = cl
	}
	return cl.SeedBrokers()[0], nil
}

// fetch reads a partition from offset on at the node at addr, within
// maxBytes, without waiting for records.
func (p *peers) fetch(ctx context.Context, addr string, node int32, topic string, partition int32, offset int64, maxBytes int32) (kmsg.FetchResponseTopicPartition, error) {
	b, err := p.broker(addr)
	if err != nil {
		return kmsg.FetchResponseTopicPartition{}, err
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.ReplicaState.ID = p.self, p.self
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 1, maxBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	p.prove(req, node)
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return kmsg.FetchResponseTopicPartition{}, err
	}
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.FetchResponseTopicPartition{}, fmt.Errorf("node at %s answered a fetch of %s-%d with error %d and %d topics", addr, topic, partition, resp.ErrorCode, len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0], nil
}

// listOffset asks the node at addr for a partition's offset at timestamp
// (-2: its earliest), as ListOffsets answers it.
func (p *peers) listOffset(ctx context.Context, addr string, node int32, topic string, partition int32, timestamp int64) (kmsg.ListOffsetsResponseTopicPartition, error) {
	b, err := p.broker(addr)
	if err != nil {
		return kmsg.ListOffsetsResponseTopicPartition{}, err
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = p.self
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = partition, timestamp
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	p.prove(req, node)
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return kmsg.ListOffsetsResponseTopicPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.ListOffsetsResponseTopicPartition{}, fmt.Errorf("node at %s answered a ListOffsets of %s-%d with %d topics", addr, topic, partition, len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0], nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cl := range p.clients {
		cl.Close()
	}
	p.clients = nil
}

// deleteRecords asks the node at addr to delete a partition's records
// below offset, within the part it holds.
func (p *peers) deleteRecords(ctx context.Context, addr, topic string, partition int32, offset int64) (kmsg.DeleteRecordsResponseTopicPartition, error) {
	b, err := p.broker(addr)
	if err != nil {
		return kmsg.DeleteRecordsResponseTopicPartition{}, err
	}
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = partition, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return kmsg.DeleteRecordsResponseTopicPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.DeleteRecordsResponseTopicPartition{}, fmt.Errorf("node at %s answered a DeleteRecords of %s-%d with %d topics", addr, topic, partition, len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0], nil
}
