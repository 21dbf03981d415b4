package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Credentials keeps the SCRAM credentials set with AlterUserScramCredentials
// in etcd, one key per user, so every node authenticates with the same
// ones: a node that changes them writes them here before it answers, and
// every node watches the keys and applies each change (docs/cluster.md).
//
//	key:   {prefix}/scram/{user, path-escaped}
//	value: the user's credentials by mechanism (api/kafka encodes them)
type Credentials struct {
	cli     *clientv3.Client
	root    string
	log     *slog.Logger
	timeout time.Duration
}

// SharedCredential is one user's value and the revision it was written at.
type SharedCredential struct {
	Value []byte
	Rev   int64
}

// NewCredentials keeps credentials under prefix in the etcd cli reaches.
func NewCredentials(cli *clientv3.Client, prefix string, log *slog.Logger) *Credentials {
	return &Credentials{cli: cli, root: normalizePrefix(prefix) + "/scram/", log: log, timeout: 10 * time.Second}
}

func (c *Credentials) key(user string) string { return c.root + url.PathEscape(user) }

// Save writes each user's value (nil: deletes the user's key) in one
// transaction, and returns its revision.
func (c *Credentials) Save(users map[string][]byte) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var ops []clientv3.Op
	for u, v := range users {
		if v == nil {
			ops = append(ops, clientv3.OpDelete(c.key(u)))
		} else {
			ops = append(ops, clientv3.OpPut(c.key(u), string(v)))
		}
	}
	resp, err := c.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("saving SCRAM credentials in etcd: %w", full(err))
	}
	return resp.Header.Revision, nil
}

// List reads every user's credentials and the revision they were read at.
func (c *Credentials) List(ctx context.Context) (map[string]SharedCredential, int64, error) {
	resp, err := c.cli.Get(ctx, c.root, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("reading SCRAM credentials from etcd: %w", err)
	}
	out := map[string]SharedCredential{}
	for _, kv := range resp.Kvs {
		u, err := url.PathUnescape(string(kv.Key[len(c.root):]))
		if err != nil {
			c.log.Warn("cluster: skipping a SCRAM credentials key that is not a user", "key", string(kv.Key))
			continue
		}
		out[u] = SharedCredential{Value: kv.Value, Rev: kv.ModRevision}
	}
	return out, resp.Header.Revision, nil
}

// Watch keeps a node's credentials those in etcd until ctx ends: it calls
// replace with all of them (first with those of the list at rev, which the
// caller read with List before serving), then update with each change
// (value nil: the user's key is gone). A lost watch (etcd down, or its
// history compacted past where the watch was) lists them again.
func (c *Credentials) Watch(ctx context.Context, rev int64, replace func(map[string]SharedCredential, int64), update func(user string, value []byte, rev int64)) {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		if rev == 0 {
			all, r, err := c.List(ctx)
			if err != nil {
				if ctx.Err() == nil {
					c.log.Warn("cluster: SCRAM credentials not read; retrying", "err", err, "in", wait)
				}
				sleep(ctx, wait)
				wait = min(2*wait, 5*time.Second)
				continue
			}
			replace(all, r)
			rev = r
		}
		wait = 100 * time.Millisecond
		err := c.watch(ctx, rev+1, update)
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("cluster: SCRAM credentials watch lost; listing them again", "err", err)
		rev = 0
	}
}

func (c *Credentials) watch(ctx context.Context, from int64, update func(string, []byte, int64)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range c.cli.Watch(wctx, c.root, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("compacted at revision %d", resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			u, err := url.PathUnescape(string(ev.Kv.Key[len(c.root):]))
			if err != nil {
				continue
			}
			var v []byte
			if ev.Type == clientv3.EventTypePut {
				v = ev.Kv.Value
			}
			update(u, v, ev.Kv.ModRevision)
		}
	}
	return fmt.Errorf("watch closed")
}
