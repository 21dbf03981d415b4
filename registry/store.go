package registry

import (
	"context"
	"errors"
)

// Store keeps the registry's state durably: keys and their values, changed
// only in whole batches, each written over the revision its writer read.
// A batch over a stale revision is refused with ErrConflict, so two
// writers (two nodes of a cluster) never both take the same id: the id
// counter is one of the keys a registration writes. registry/pebblestore
// is one node's; every Store passes registry/storetest.
type Store interface {
	// Load returns every key and value and the revision they are at (0
	// for a store never written).
	Load(ctx context.Context) (map[string][]byte, uint64, error)
	// Commit applies writes atomically and durably if the store is still
	// at rev, and returns the revision it is then at; ErrConflict, and
	// nothing written, if not.
	Commit(ctx context.Context, rev uint64, writes []Write) (uint64, error)
	Close() error
}

// Write sets Key to Value; a nil Value deletes it.
type Write struct {
	Key   string
	Value []byte
}

// ErrTooLarge: a change is more than the store takes in one commit (an
// etcd transaction's operations or request bytes); it can never succeed
// as it is, so the API answers 42205, not a 500 a client would retry.
var ErrTooLarge = errors.New("the change is larger than the schema registry's store takes at once")

// ErrConflict: the store moved on from the revision a batch was built at.
var ErrConflict = errors.New("the schema registry's store changed underneath")

// Revisioner is a Store that other processes write too (registry/etcdstore,
// shared by a cluster's nodes): it tells its revision alone, cheaply, so a
// registry learns that another writer moved the store on without reading
// every key (Registry.Sync).
type Revisioner interface {
	Revision(ctx context.Context) (uint64, error)
}
