package replica

import (
	"context"
	"fmt"
)

// DeleteRecords is answered, as Kafka answers it, only once every ISR
// member's log starts at or past the new log start (Kafka's low watermark):
// followers say where their logs start with each fetch (FetchRequest's
// LogStart), and AwaitLogStart waits for them. A leader killed right after
// the answer then leaves a successor (elected from the ISR) that has
// deleted the records too, and never serves them again.

// noteLogStart keeps where follower's log starts; p.mu is held.
func (p *partition) noteLogStart(follower int32, start int64) {
	if start < 0 {
		return // not reported (a follower of an older version): it counts as not deleted
	}
	if p.starts == nil {
		p.starts = map[int32]int64{}
	}
	if p.starts[follower] != start {
		p.starts[follower] = start
		p.wakeStarts()
	}
}

// wakeStarts wakes the deletes waiting on p: a follower's log start, the
// ISR or the leadership changed; p.mu is held.
func (p *partition) wakeStarts() {
	if p.startsMoved != nil {
		close(p.startsMoved)
		p.startsMoved = nil
	}
}

// AwaitLogStart waits until every follower in shard's ISR has reported a
// log start at or past start, or ctx ends (its error is returned); it
// returns ErrNotLeader if this node does not lead shard or stops leading
// it meanwhile.
func (n *Node) AwaitLogStart(ctx context.Context, shard string, start int64) error {
	for {
		p := n.part(shard)
		if p == nil {
			return fmt.Errorf("%w of %s", ErrNotLeader, shard)
		}
		p.mu.Lock()
		if p.leader == nil {
			p.mu.Unlock()
			return fmt.Errorf("%w of %s", ErrNotLeader, shard)
		}
		isr, _ := p.leader.ISR()
		var behind []int32
		for _, id := range isr {
			if s, ok := p.starts[id]; id != n.cfg.Self && (!ok || s < start) {
				behind = append(behind, id)
			}
		}
		if len(behind) == 0 {
			p.mu.Unlock()
			return nil
		}
		if p.startsMoved == nil {
			p.startsMoved = make(chan struct{})
		}
		moved := p.startsMoved
		p.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("the log start of %s at %d on ISR members %v: %w", shard, start, behind, ctx.Err())
		}
	}
}
