package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Registry runs State's decisions over a Store: reads answer from the
// state in memory; a change is committed to the store first, over the
// revision the state was loaded at, and only then applied. A store that
// moved on (another writer) is reloaded and the decision taken again, so
// no id is given twice. Safe for concurrent use.
type Registry struct {
	store Store
	mu    sync.RWMutex
	st    *State
	rev   uint64
}

// conflictRetries bounds how often a change is decided again over a
// store that keeps moving.
const conflictRetries = 5

// Open loads the registry from store.
func Open(ctx context.Context, store Store) (*Registry, error) {
	r := &Registry{store: store}
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
// as it was.
func (r *Registry) Write(ctx context.Context, fn func(*State) ([]Write, error)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for range conflictRetries {
		writes, err := fn(r.st)
		if err != nil || len(writes) == 0 {
			return err
		}
		rev, err := r.store.Commit(ctx, r.rev, writes)
		if errors.Is(err, ErrConflict) {
			if err := r.load(ctx); err != nil {
				return storeError(ctx, err)
			}
			continue
		}
		if err != nil {
			return storeError(ctx, err)
		}
		r.rev = rev
		for _, w := range writes {
			if err := r.st.apply(w); err != nil {
				// The store has the writes: read them back from it.
				if err := r.load(ctx); err != nil {
					return storeError(ctx, err)
				}
				break
			}
		}
		return nil
	}
	return storeError(ctx, fmt.Errorf("%w %d times in a row", ErrConflict, conflictRetries))
}

func storeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return &Error{CodeStoreTimeout, "Operation timed out: " + err.Error()}
	}
	return &Error{CodeStore, "Error in the backend data store: " + err.Error()}
}

// CheckWireHeader is State.CheckWireHeader on the current state.
func (r *Registry) CheckWireHeader(subject string, value []byte) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.st.CheckWireHeader(subject, value)
}

// Close closes the store.
func (r *Registry) Close() error { return r.store.Close() }
