package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Registry runs State's decisions over a Store: reads answer from the
// state in memory; a change is committed to the store first, over the
// revision the state was loaded at, and only then applied. A store that
// moved on (another writer) is reloaded and the decision taken again, so
// no id is given twice. Safe for concurrent use.
type Registry struct {
	store Store
	// shared is store when other processes write it too (Revisioner);
	// nil for one node's own store, whose every change goes through here.
	shared Revisioner
	mu     sync.RWMutex
	st     *State
	rev    uint64
	// synced is when Sync last found the state current (UnixNano).
	synced atomic.Int64
}

// conflictRetries bounds how often a change is decided again over a
// store that keeps moving. Nodes writing one etcd store at full speed
// take turns: the one that just won decides again at once, while the
// loser has a reload to make first, so a handful of tries is not enough
// (TestTwoNodesShareOneRegistry lost five in a row); each retry waits a
// little longer, with jitter, so the losers get their turn.
const conflictRetries = 50

// conflictBackoff is the longest wait between two tries.
const conflictBackoff = 50 * time.Millisecond

// Open loads the registry from store.
func Open(ctx context.Context, store Store) (*Registry, error) {
	r := &Registry{store: store}
	r.shared, _ = store.(Revisioner)
	if err := r.load(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Registry) load(ctx context.Context) error {
	kv, rev, err := r.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("schema registry: loading its store: %w", err)
	}
	st, err := LoadState(kv)
	if err != nil {
		return err
	}
	r.st, r.rev = st, rev
	r.synced.Store(time.Now().UnixNano())
	return nil
}

// Sync brings the state up to the store's when others write the store
// (a cluster's nodes over etcd), so an answer reflects every change any
// node made before the request came: a schema registered on node A is
// found by id on node B at once, as a consumer that reads a record
// produced through A and asks B for its schema needs. It costs one small
// read of the store's revision, and a full load only when another node
// changed something. That is simpler than a watch and stronger: a
// watch's events arrive some time after the commit, and an answer in
// between would be a 40403 for an id that exists. Without a shared store
// there is nothing to learn and Sync does nothing.
func (r *Registry) Sync(ctx context.Context) error {
	if r.shared == nil {
		return nil
	}
	rev, err := r.shared.Revision(ctx)
	if err != nil {
		return storeError(ctx, fmt.Errorf("schema registry: reading its store's revision: %w", err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev == r.rev {
		r.synced.Store(time.Now().UnixNano())
		return nil
	}
	if err := r.load(ctx); err != nil {
		return storeError(ctx, err)
	}
	return nil
}

// Read runs fn on the state; fn must not keep it.
func (r *Registry) Read(fn func(*State) error) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return fn(r.st)
}

// Write decides a change with fn and makes it durable. An error from the
// store is a 50001 (50002 past ctx's deadline); the state is then left
// as it was. The lock is let go between tries, so reads go on while a
// write waits its turn over a store others write.
func (r *Registry) Write(ctx context.Context, fn func(*State) ([]Write, error)) error {
	for try := range conflictRetries {
		if try > 0 {
			wait := min(conflictBackoff, time.Millisecond<<min(try, 10))
			select {
			case <-ctx.Done():
				return storeError(ctx, fmt.Errorf("%w %d times, then %w", ErrConflict, try, ctx.Err()))
			case <-time.After(wait/2 + rand.N(wait/2+1)):
			}
		}
		done, err := r.try(ctx, fn)
		if done {
			return err
		}
	}
	return storeError(ctx, fmt.Errorf("%w %d times in a row", ErrConflict, conflictRetries))
}

// try decides and commits once; done is false when another writer moved
// the store on first (the state is then reloaded, to decide again).
func (r *Registry) try(ctx context.Context, fn func(*State) ([]Write, error)) (done bool, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	writes, err := fn(r.st)
	if err != nil || len(writes) == 0 {
		return true, err
	}
	rev, err := r.store.Commit(ctx, r.rev, writes)
	if errors.Is(err, ErrConflict) {
		if err := r.load(ctx); err != nil {
			return true, storeError(ctx, err)
		}
		return false, nil
	}
	if errors.Is(err, ErrTooLarge) {
		return true, &Error{CodeOperationNotPermitted, err.Error()}
	}
	if err != nil {
		return true, storeError(ctx, err)
	}
	r.rev = rev
	for _, w := range writes {
		if err := r.st.apply(w); err != nil {
			// The store has the writes: read them back from it.
			if err := r.load(ctx); err != nil {
				return true, storeError(ctx, err)
			}
			break
		}
	}
	return true, nil
}

func storeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return &Error{CodeStoreTimeout, "Operation timed out: " + err.Error()}
	}
	return &Error{CodeStore, "Error in the backend data store: " + err.Error()}
}

// wireHeaderFreshness is how old the state produce validation answers
// from may get over a shared store before it is synced again: a version
// deleted on another node stops being taken here within it.
const wireHeaderFreshness = time.Second

// wireHeaderSyncTimeout bounds the store read a produce waits on.
const wireHeaderSyncTimeout = 2 * time.Second

// CheckWireHeader is State.CheckWireHeader on the current state. Over a
// shared store it is synced first when older than wireHeaderFreshness,
// and again before a value is refused: an id registered on another node
// a moment ago is taken, and a produce costs no store read per record
// (one per batch refused, at most).
func (r *Registry) CheckWireHeader(subject string, value []byte) error {
	check := func() error {
		r.mu.RLock()
		defer r.mu.RUnlock()
		return r.st.CheckWireHeader(subject, value)
	}
	if r.shared == nil {
		return check()
	}
	sync := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), wireHeaderSyncTimeout)
		defer cancel()
		return r.Sync(ctx)
	}
	synced := false
	if time.Since(time.Unix(0, r.synced.Load())) > wireHeaderFreshness {
		// A failed sync leaves the state as it was: answer from it.
		synced = sync() == nil
	}
	err := check()
	if err == nil || synced || len(value) < WireHeaderSize || value[0] != 0 {
		return err
	}
	if serr := sync(); serr != nil {
		return fmt.Errorf("%w, and the registry could not be read again from its store to be sure: %w", err, serr)
	}
	return check()
}

// Close closes the store.
func (r *Registry) Close() error { return r.store.Close() }
