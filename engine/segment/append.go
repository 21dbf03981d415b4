package segment

import (
	"context"
	"errors"
	"fmt"

	"strata/engine/record"
	"strata/engine/store"
)

// Append hands the records to the shard's I/O worker and waits until they
// are written (and, under FsyncBatch, on disk).
func (e *Engine) Append(ctx context.Context, name string, recs []record.Record) (uint64, error) {
	return e.append(ctx, name, recs, false)
}

func (e *Engine) append(ctx context.Context, name string, recs []record.Record, at bool) (uint64, error) {
	if len(recs) == 0 {
		return 0, errors.New("append: no records")
	}
	// Hold the read lock while queueing so Close cannot close the queue
	// underneath; the worker keeps draining, so this never waits long.
	e.mu.RLock()
	sh, ok := e.shards[name]
	switch {
	case e.closed:
		e.mu.RUnlock()
		return 0, store.ErrClosed
	case !ok:
		e.mu.RUnlock()
		return 0, fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
	}
	req := request{shard: sh, recs: recs, at: at, done: make(chan result, 1)}
	select {
	case sh.worker.ch <- req:
		e.mu.RUnlock()
	case <-ctx.Done():
		e.mu.RUnlock()
		return 0, ctx.Err()
	}
	// Once queued, the append completes whether or not the caller waits:
	// a record is either stored and acknowledged or refused, never half.
	select {
	case r := <-req.done:
		return r.base, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// AppendAt writes records whose offsets are already set, as a follower
// copying its leader does: the first must be the shard's next offset and
// the rest follow it. The bytes on disk are the leader's bytes.
func (e *Engine) AppendAt(ctx context.Context, name string, recs []record.Record) error {
	for i := 1; i < len(recs); i++ {
		if recs[i].Offset != recs[0].Offset+uint64(i) {
			return fmt.Errorf("append at: offset %d follows %d", recs[i].Offset, recs[i-1].Offset)
		}
	}
	_, err := e.append(ctx, name, recs, true)
	return err
}

// Repair cuts a shard's active segment at damage found inside it at start
// (DamagedError), dropping the records after the damage, so the shard takes
// writes again. It is the operator's choice (strata segment repair): until
// then the shard serves what comes before the damage and keeps the bytes
// after it, for a replica or an operator to recover.
func (e *Engine) Repair(ctx context.Context, name string) error {
	return e.ask(ctx, name, request{repair: true})
}

// RollAt seals the shard's active segment so that the next one starts at
// offset next, as a follower does where its leader sealed: with AppendAt
// (which never rolls by itself) the follower's segment files hold the
// leader's bytes segment for segment, and their checksums agree.
func (e *Engine) RollAt(ctx context.Context, name string, next uint64) error {
	return e.ask(ctx, name, request{rollAt: &next})
}

// ask hands a shard's worker one request and waits for its answer.
func (e *Engine) ask(ctx context.Context, name string, req request) error {
	e.mu.RLock()
	sh, ok := e.shards[name]
	switch {
	case e.closed:
		e.mu.RUnlock()
		return store.ErrClosed
	case !ok:
		e.mu.RUnlock()
		return fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
	}
	req.shard, req.done = sh, make(chan result, 1)
	sh.worker.ch <- req
	e.mu.RUnlock()
	select {
	case r := <-req.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
