// Package etcdstore keeps the schema registry of a cluster in etcd, under
// the cluster's prefix, so every node serves the same subjects and ids
// (docs/registry.md, "In a cluster"). A commit is one etcd transaction
// guarded by the store's revision key: two nodes that decided on the same
// revision (both about to hand out the next id) never both win; the loser
// gets registry.ErrConflict, reloads and decides again.
package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"strata/registry"
)

// MaxTxnOps is etcd's default --max-txn-ops. A commit is one transaction
// of its writes and the revision key, so a change of more than
// MaxTxnOps-1 keys (soft-deleting a subject of more than 127 versions)
// is refused by an etcd left at its default; Commit says so instead of
// passing on etcd's bare "too many operations".
const MaxTxnOps = 128

// Config says where the store lives.
type Config struct {
	// Client is the caller's: Close leaves it open.
	Client *clientv3.Client
	// Prefix is the cluster's (cluster.etcd_prefix); the store's keys are
	// {Prefix}/schema_registry/rev and {Prefix}/schema_registry/k/{key}.
	Prefix string
	// Timeout bounds each call to etcd that the caller's context does
	// not bound sooner; 10s if zero.
	Timeout time.Duration
}

// Store is safe for concurrent use, also by several processes on one
// prefix.
type Store struct {
	cli     *clientv3.Client
	rev     string // the revision key: a decimal count of commits
	data    string // the registry's keys are under it
	timeout time.Duration
}

// Open returns the store under cfg.Prefix, checking that etcd answers.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("schema registry etcd store: no etcd client")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	root := strings.TrimSuffix(cfg.Prefix, "/") + "/schema_registry/"
	s := &Store{cli: cfg.Client, rev: root + "rev", data: root + "k/", timeout: cfg.Timeout}
	if _, err := s.Revision(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Close leaves the client open: it is the caller's.
func (s *Store) Close() error { return nil }

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

func (s *Store) parseRev(raw []byte) (uint64, error) {
	rev, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schema registry etcd store: %s holds %q, not the store's revision", s.rev, raw)
	}
	return rev, nil
}

// Revision is the store's revision alone: one small linearizable read,
// which a node makes before it answers from the state it holds, to learn
// whether another node has changed the registry since (registry.Revisioner).
func (s *Store) Revision(ctx context.Context) (uint64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.rev)
	if err != nil {
		return 0, fmt.Errorf("schema registry etcd store: reading %s: %w", s.rev, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return s.parseRev(resp.Kvs[0].Value)
}

// Load reads the revision key and every data key in one transaction, so
// they are one snapshot of etcd: the keys are exactly those of the
// revision returned.
func (s *Store) Load(ctx context.Context) (map[string][]byte, uint64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.rev), clientv3.OpGet(s.data, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("schema registry etcd store: reading %s*: %w", s.data, err)
	}
	var rev uint64
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if rev, err = s.parseRev(kvs[0].Value); err != nil {
			return nil, 0, err
		}
	}
	kv := map[string][]byte{}
	for _, e := range resp.Responses[1].GetResponseRange().Kvs {
		// etcd answers an empty value as nil: a key that is present with
		// no bytes stays present.
		kv[strings.TrimPrefix(string(e.Key), s.data)] = append([]byte{}, e.Value...)
	}
	return kv, rev, nil
}

// Commit writes the batch and the next revision in one transaction, if
// the revision key still holds rev (is absent, for 0).
func (s *Store) Commit(ctx context.Context, rev uint64, writes []registry.Write) (uint64, error) {
	if n := len(writes) + 1; n > MaxTxnOps {
		return 0, fmt.Errorf("schema registry etcd store: a change of %d keys is more than one etcd transaction holds (%d operations with the revision key, etcd's default --max-txn-ops is %d): delete the versions a few at a time: %w", len(writes), n, MaxTxnOps, registry.ErrTooLarge)
	}
	cmp := clientv3.Compare(clientv3.Value(s.rev), "=", strconv.FormatUint(rev, 10))
	if rev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(s.rev), "=", 0)
	}
	ops := make([]clientv3.Op, 0, len(writes)+1)
	for _, w := range writes {
		if w.Value == nil {
			ops = append(ops, clientv3.OpDelete(s.data+w.Key))
		} else {
			ops = append(ops, clientv3.OpPut(s.data+w.Key, string(w.Value)))
		}
	}
	ops = append(ops, clientv3.OpPut(s.rev, strconv.FormatUint(rev+1, 10)))
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).If(cmp).Then(ops...).Else(clientv3.OpGet(s.rev)).Commit()
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return 0, fmt.Errorf("schema registry etcd store: a change of %d keys: etcd's --max-txn-ops is below %d: %w: %w", len(writes), len(ops), registry.ErrTooLarge, err)
	case errors.Is(err, rpctypes.ErrRequestTooLarge) || status.Code(err) == codes.ResourceExhausted:
		// etcd's own limit, or the client's (2 MiB) before it.
		size := 0
		for _, w := range writes {
			size += len(w.Key) + len(w.Value)
		}
		return 0, fmt.Errorf("schema registry etcd store: a change of %d bytes is larger than one etcd request takes (--max-request-bytes, 1.5 MiB by default): %w: %w", size, registry.ErrTooLarge, err)
	case err != nil:
		return 0, fmt.Errorf("schema registry etcd store: committing %d keys over revision %d: %w", len(writes), rev, err)
	case !resp.Succeeded:
		at := "absent"
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			at = string(kvs[0].Value)
		}
		return 0, fmt.Errorf("%s is at %s, not %d: %w", s.rev, at, rev, registry.ErrConflict)
	}
	return rev + 1, nil
}
