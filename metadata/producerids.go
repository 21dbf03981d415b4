package metadata

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ProducerIDBlockSize is how many producer ids one reservation takes, as
// Kafka's controller hands them to brokers (KIP-730). A node that dies
// wastes what is left of its block; ids are 63 bits, so that costs nothing.
const ProducerIDBlockSize = 1000

// ProducerIDBlocks reserves blocks of producer ids that no node of the
// cluster (or no run of the one node) has had or will have: a cluster's is
// a compare-and-swap on one etcd key, a single node's a synced counter in
// its catalog.
type ProducerIDBlocks interface {
	// ReserveProducerIDs durably reserves count ids and returns the first;
	// the reservation is recorded before it returns, so a restart or
	// another node never gets any of them again.
	ReserveProducerIDs(ctx context.Context, count int64) (first int64, err error)
}

// ErrProducerIDsExhausted says the 63-bit id space is used up.
var ErrProducerIDsExhausted = errors.New("metadata: producer ids exhausted")

// ProducerIDs hands out producer ids one at a time from reserved blocks.
// It takes a block only when the last is spent, before handing out any id
// of it, so a crash at any point loses the rest of a block and never
// repeats an id.
type ProducerIDs struct {
	blocks ProducerIDBlocks
	size   int64
	mu     sync.Mutex
	next   int64 // the next id to hand out; == end: take a block
	end    int64
}

// NewProducerIDs hands out ids from blocks of size (<= 0:
// ProducerIDBlockSize) reserved from b.
func NewProducerIDs(b ProducerIDBlocks, size int64) *ProducerIDs {
	if size <= 0 {
		size = ProducerIDBlockSize
	}
	return &ProducerIDs{blocks: b, size: size}
}

// Next is a producer id no other call, node or run has had. Concurrent
// calls wait for one reservation instead of each taking a block.
func (p *ProducerIDs) Next(ctx context.Context) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next == p.end {
		first, err := p.blocks.ReserveProducerIDs(ctx, p.size)
		if err != nil {
			return 0, fmt.Errorf("reserving a block of %d producer ids: %w", p.size, err)
		}
		p.next, p.end = first, first+p.size
	}
	id := p.next
	p.next++
	return id, nil
}

// MemoryProducerIDBlocks reserves blocks in memory, for a node without a
// catalog (tests, embedders). Its first block starts at the clock's
// microseconds, so a restarted process does not hand out its last run's
// ids again (a log still holds their producers' state, and a new producer
// under an old id would have its first batches taken for duplicates)
// unless that run took more than a million ids a second.
type MemoryProducerIDBlocks struct {
	mu   sync.Mutex
	next int64
}

func (m *MemoryProducerIDBlocks) ReserveProducerIDs(_ context.Context, count int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next == 0 {
		m.next = time.Now().UnixMicro()
	}
	return NextProducerIDBlock(&m.next, count)
}

// NextProducerIDBlock advances *next past a block of count ids and returns
// the block's first, refusing to wrap past the largest id.
func NextProducerIDBlock(next *int64, count int64) (int64, error) {
	if count <= 0 {
		return 0, fmt.Errorf("metadata: a block of %d producer ids", count)
	}
	first := *next
	if first < 0 || first > (1<<63-1)-count {
		return 0, fmt.Errorf("%w: the next block would start at %d", ErrProducerIDsExhausted, first)
	}
	*next = first + count
	return first, nil
}
