package offsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Etcd keeps committed offsets in etcd, so whichever node coordinates a
// group after another (a cluster's coordinator dies, or groups move as
// nodes join) reads what was committed. One key per group holds all its
// positions as JSON; a commit merges into it with a compare-and-swap on
// the revision it read, so two commits of one group never lose each other's
// partitions, and a commit is one write whatever its size.
//
//	key:   {prefix}/offsets/{group}
//	value: {"topic": {"partition": {"offset": N, "leader_epoch": E, "metadata": "..."}}}
type Etcd struct {
	c       *clientv3.Client
	prefix  string
	timeout time.Duration
	// betweenReadAndSwap, if set, runs between a delete's read and its
	// compare-and-swap, so tests can commit in between.
	betweenReadAndSwap func()
}

// OpenEtcd keeps offsets under prefix in the etcd c reaches; the client
// stays the caller's.
func OpenEtcd(c *clientv3.Client, prefix string) *Etcd {
	return &Etcd{c: c, prefix: prefix + "/offsets/", timeout: 10 * time.Second}
}

// ErrChanged says a group's committed offsets changed while being deleted,
// more often than a delete retries (Delete), or at all (DeleteGroup).
var ErrChanged = errors.New("committed offsets changed meanwhile")

// casAttempts bounds the compare-and-swaps Delete tries while others
// commit to the group.
const casAttempts = 10

type groupPositions map[string]map[int32]Committed

func (e *Etcd) read(ctx context.Context, group string) (groupPositions, int64, error) {
	resp, err := e.c.Get(ctx, e.prefix+group)
	if err != nil {
		return nil, 0, fmt.Errorf("committed offsets of group %q: %w", group, err)
	}
	pos := groupPositions{}
	if len(resp.Kvs) == 0 {
		return pos, 0, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &pos); err != nil {
		return nil, 0, fmt.Errorf("committed offsets of group %q in etcd: %w", group, err)
	}
	return pos, resp.Kvs[0].ModRevision, nil
}

// Commit merges group's positions into what it committed before, all or none.
func (e *Etcd) Commit(group string, positions map[string]map[int32]Committed) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	for {
		pos, rev, err := e.read(ctx, group)
		if err != nil {
			return err
		}
		for topic, parts := range positions {
			if pos[topic] == nil {
				pos[topic] = map[int32]Committed{}
			}
			for p, c := range parts {
				pos[topic][p] = c
			}
		}
		v, err := json.Marshal(pos)
		if err != nil {
			return err
		}
		key := e.prefix + group
		resp, err := e.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(v))).Commit()
		if err != nil {
			return fmt.Errorf("committing offsets of group %q: %w", group, err)
		}
		if resp.Succeeded {
			return nil
		}
		// Another commit of the group came between: merge into it.
	}
}

// Group returns every position group has committed, by topic and partition.
func (e *Etcd) Group(group string) (map[string]map[int32]Committed, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	pos, _, err := e.read(ctx, group)
	return pos, err
}

// Delete removes the named partitions' positions of group (Kafka's
// OffsetDelete), with the same compare-and-swap as Commit; a group left
// with none loses its key.
func (e *Etcd) Delete(group string, partitions map[string][]int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	key := e.prefix + group
	for range casAttempts {
		pos, rev, err := e.read(ctx, group)
		if err != nil {
			return err
		}
		if rev == 0 {
			return nil
		}
		for topic, parts := range partitions {
			for _, p := range parts {
				delete(pos[topic], p)
			}
			if len(pos[topic]) == 0 {
				delete(pos, topic)
			}
		}
		if e.betweenReadAndSwap != nil {
			e.betweenReadAndSwap()
		}
		op := clientv3.OpDelete(key)
		if len(pos) > 0 {
			v, err := json.Marshal(pos)
			if err != nil {
				return err
			}
			op = clientv3.OpPut(key, string(v))
		}
		resp, err := e.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(op).Commit()
		if err != nil {
			return fmt.Errorf("deleting offsets of group %q: %w", group, err)
		}
		if resp.Succeeded {
			return nil
		}
		// A commit came between: delete from what it left.
	}
	return fmt.Errorf("deleting offsets of group %q: %w %d times", group, ErrChanged, casAttempts)
}

// DeleteGroup removes every position group has committed (Kafka's
// DeleteGroups), if none is committed between reading them and deleting
// them: a commit that comes between (from a node that still believes it
// coordinates the group) means the group is in use, so it is reported
// (ErrChanged) rather than wiped.
func (e *Etcd) DeleteGroup(group string) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	key := e.prefix + group
	_, rev, err := e.read(ctx, group)
	if err != nil || rev == 0 {
		return err
	}
	if e.betweenReadAndSwap != nil {
		e.betweenReadAndSwap()
	}
	resp, err := e.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("deleting offsets of group %q: %w", group, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("deleting offsets of group %q: %w", group, ErrChanged)
	}
	return nil
}

// Groups lists the groups with committed positions, in order.
func (e *Etcd) Groups() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	resp, err := e.c.Get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("listing groups with committed offsets: %w", err)
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key[len(e.prefix):]))
	}
	return out, nil
}
