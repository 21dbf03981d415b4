package cluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"strata/metadata"
)

// The cluster's producer ids come from one key, {prefix}/producer_ids,
// holding the start of the next block not yet reserved (absent: 0). A
// node reserves a block by a compare-and-swap of that key from the value
// it read to the value past its block, so two nodes never hold one id
// (Kafka's AllocateProducerIds, KIP-730). The key is one small decimal
// value, rewritten once per block of metadata.ProducerIDBlockSize ids.
func (k keys) producerIDs() string { return k.prefix + "/producer_ids" }

// producerIDBlocks reserves blocks on etcd (metadata.ProducerIDBlocks).
type producerIDBlocks struct {
	cli     *clientv3.Client
	key     string
	timeout time.Duration
}

// ReserveProducerIDs takes the next block: a read, then a
// compare-and-swap on the key's mod revision, again while another node
// took a block in between.
func (b producerIDBlocks) ReserveProducerIDs(ctx context.Context, count int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	for {
		resp, err := b.cli.Get(ctx, b.key)
		if err != nil {
			return 0, fmt.Errorf("cluster: reading %s: %w", b.key, err)
		}
		var next, rev int64 // rev 0: the key does not exist yet
		if len(resp.Kvs) == 1 {
			rev = resp.Kvs[0].ModRevision
			if next, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64); err != nil {
				return 0, fmt.Errorf("cluster: %s holds %q, not the next producer id block's start", b.key, resp.Kvs[0].Value)
			}
		}
		first, err := metadata.NextProducerIDBlock(&next, count)
		if err != nil {
			return 0, err
		}
		txn, err := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(b.key), "=", rev)).
			Then(clientv3.OpPut(b.key, strconv.FormatInt(next, 10))).
			Commit()
		if err != nil {
			return 0, fmt.Errorf("cluster: reserving producer ids %d-%d in %s: %w", first, next-1, b.key, full(err))
		}
		if txn.Succeeded {
			return first, nil
		}
	}
}

// ProducerID is an id no node of the cluster has handed out, from this
// node's current block.
func (m *Member) ProducerID(ctx context.Context) (int64, error) { return m.pids.Next(ctx) }
