package replica

import (
	"context"

	"strata/engine/record"
	"strata/engine/store"
)

// budgetRest bounds each read of the rest of a cut batch.
var budgetRest = store.Budget{MaxBytes: 1 << 20}

// Batches are replicated whole, as Kafka replicates them: a follower's
// fetch answer ends only after a record that ends its produce batch
// (NodeConfig.BatchEnd), however small the budget (a batch larger than it
// is sent whole, as Kafka sends at least one whole batch), and a follower
// appends no trailing part of one. Otherwise a follower could hold the
// first part of an idempotent producer's batch when the leader dies; as the
// next leader it would rebuild the producer's state from that part and
// refuse the retry of the whole batch as out of order, and the client's
// resend would store the first part twice.

// batchEnd reports whether r ends its batch; without a BatchEnd every
// record does.
func (n *Node) batchEnd(r *record.Record) bool {
	return n.cfg.BatchEnd == nil || n.cfg.BatchEnd(r)
}

// wholeBatches extends recs, read from shard's log, until its last record
// ends a batch or the log ends: the rest of a batch the budget cut is read
// too.
func (n *Node) wholeBatches(ctx context.Context, st Store, shard string, recs []record.Record) ([]record.Record, error) {
	for len(recs) > 0 && !n.batchEnd(&recs[len(recs)-1]) {
		next := recs[len(recs)-1].Offset + 1
		// Read again, not the log end the fetch began with: appends are
		// whole, so a batch that ends past that end is in the log by now.
		end, err := st.LogEnd(ctx, shard)
		if err != nil {
			return nil, err
		}
		if next >= end {
			break // the log ends inside this batch (a crash while appending it)
		}
		more, err := st.ReadToLogEnd(ctx, shard, next, budgetRest)
		if err != nil {
			return nil, err
		}
		if len(more) == 0 {
			break
		}
		for i := range more {
			recs = append(recs, more[i])
			if n.batchEnd(&more[i]) {
				return recs, nil
			}
		}
	}
	return recs, nil
}

// cutToBatch drops the records after the last one that ends a batch from a
// leader's answer, unless they reach the leader's log end, logEnd: then the
// leader's own log ends inside that batch (it crashed while appending it),
// and its followers hold what it holds (the producer's retry completes the
// batch, api/kafka). It returns what the follower may append.
func (n *Node) cutToBatch(recs []record.Record, logEnd int64) []record.Record {
	if len(recs) == 0 || n.batchEnd(&recs[len(recs)-1]) || int64(recs[len(recs)-1].Offset)+1 >= logEnd {
		return recs
	}
	k := len(recs) - 1
	for k > 0 && !n.batchEnd(&recs[k-1]) {
		k--
	}
	return recs[:k]
}
