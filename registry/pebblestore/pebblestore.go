// Package pebblestore keeps the schema registry on one node, in a Pebble
// database of its own (beside the catalog's, as catalog/pebblecat keeps
// that): every commit is one synced batch carrying the store's revision,
// so a restart finds every schema, id and config (docs/registry.md).
package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble"

	"strata/registry"
)

// revKey holds the revision, 8 bytes big-endian; the registry's keys are
// under dataPrefix, so none of them can be it.
var revKey = []byte("rev")

const dataPrefix = "k/"

// Store is safe for concurrent use.
type Store struct {
	mu sync.Mutex
	db *pebble.DB
}

// Open opens (creating if needed) the store in dir.
func Open(dir string) (*Store, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("schema registry store %s: %w", dir, err)
	}
	return &Store{db: db}, nil
}

func (s *Store) Close() error { return s.db.Close() }

func (s *Store) rev() (uint64, error) {
	raw, closer, err := s.db.Get(revKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(raw) != 8 {
		return 0, fmt.Errorf("schema registry store: revision key holds %d bytes, not 8", len(raw))
	}
	return binary.BigEndian.Uint64(raw), nil
}

// Load reads every key from one snapshot.
func (s *Store) Load(context.Context) (map[string][]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rev, err := s.rev()
	if err != nil {
		return nil, 0, err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(dataPrefix), UpperBound: []byte(dataPrefix[:len(dataPrefix)-1] + "0")})
	if err != nil {
		return nil, 0, err
	}
	defer it.Close()
	kv := map[string][]byte{}
	for it.First(); it.Valid(); it.Next() {
		kv[string(it.Key()[len(dataPrefix):])] = append(make([]byte, 0, len(it.Value())), it.Value()...)
	}
	return kv, rev, it.Error()
}

// Commit writes the batch and the next revision together, synced.
func (s *Store) Commit(_ context.Context, rev uint64, writes []registry.Write) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.rev()
	if err != nil {
		return 0, err
	}
	if cur != rev {
		return 0, fmt.Errorf("at revision %d, not %d: %w", cur, rev, registry.ErrConflict)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, w := range writes {
		key := []byte(dataPrefix + w.Key)
		if w.Value == nil {
			err = b.Delete(key, nil)
		} else {
			err = b.Set(key, w.Value, nil)
		}
		if err != nil {
			return 0, err
		}
	}
	if err := b.Set(revKey, binary.BigEndian.AppendUint64(nil, rev+1), nil); err != nil {
		return 0, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, err
	}
	return rev + 1, nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
