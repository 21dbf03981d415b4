package offsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"

	"strata/catalog"
)

// Etcd keeps committed offsets in etcd, so whichever node coordinates a
// group after another (a cluster's coordinator dies, or groups move as
// nodes join) reads what was committed. Each group-partition's position is
// its own key, so a commit writes only the partitions it names: a value
// never grows with the group, and etcd's history grows by what changed.
//
//	key:   {prefix}/committed/{group, path-escaped}/{topic}/{partition}
//	value: {"offset": N, "leader_epoch": E, "metadata": "..."}
//
// The key is bounded by MaxGroupBytes and Kafka's 249-byte topic names;
// the value by the metadata the front end lets through
// (offset.metadata.max.bytes, docs/kafka.md).
type Etcd struct {
	c       *clientv3.Client
	root    string
	timeout time.Duration
	// betweenReadAndSwap, if set, runs between DeleteGroup's read and its
	// compare-and-swap, so tests can commit in between.
	betweenReadAndSwap func()
	// writes, if set, bounds the bytes commits write a second (LimitWrites).
	writes *rate.Limiter
}

// LimitWrites makes commits write at most bytesPerSecond to etcd, waiting
// (within the commit's timeout) for their turn. Compaction frees only the
// history older than its retention, so what commits write within it stays
// in etcd's file: unbounded, a fast enough client fills the quota however
// often the history is compacted (one did in 2 s on a quiet machine).
func (e *Etcd) LimitWrites(bytesPerSecond int64) {
	e.writes = rate.NewLimiter(rate.Limit(bytesPerSecond), int(min(bytesPerSecond, 1<<20)))
}

// CommitWriteRate is the bytes a second a node's commits may write to an
// etcd of quota bytes whose history is compacted to retention ago (0:
// etcd's own compaction, assumed at 5 minutes): an eighth of the quota per
// retention, so a cluster of a few nodes committing at that rate keeps its
// uncompacted history well under the quota.
func CommitWriteRate(quota int64, retention time.Duration) int64 {
	if retention <= 0 {
		retention = 5 * time.Minute
	}
	return max(int64(float64(quota)/8/retention.Seconds()), 64<<10)
}

// waitToWrite takes n bytes of the write budget, a burst at a time.
func (e *Etcd) waitToWrite(ctx context.Context, n int) error {
	if e.writes == nil {
		return nil
	}
	for n > 0 {
		k := min(n, e.writes.Burst())
		if err := e.writes.WaitN(ctx, k); err != nil {
			return fmt.Errorf("waiting for etcd's commit write budget: %w", err)
		}
		n -= k
	}
	return nil
}

// MaxGroupBytes bounds a group id kept in etcd (its key).
const MaxGroupBytes = 1024

// ErrGroupTooLong refuses a group id over MaxGroupBytes.
var ErrGroupTooLong = fmt.Errorf("group id longer than %d bytes", MaxGroupBytes)

// OpenEtcd keeps offsets under prefix in the etcd c reaches; the client
// stays the caller's.
func OpenEtcd(c *clientv3.Client, prefix string) *Etcd {
	return &Etcd{c: c, root: prefix + "/committed/", timeout: 10 * time.Second}
}

// ErrChanged says a group's committed offsets changed while the group was
// being deleted (DeleteGroup).
var ErrChanged = errors.New("committed offsets changed meanwhile")

// txnOps is etcd's default --max-txn-ops: a transaction holds at most this
// many operations.
const txnOps = 128

func (e *Etcd) groupPrefix(group string) string { return e.root + url.PathEscape(group) + "/" }

func (e *Etcd) key(group, topic string, p int32) string {
	return e.groupPrefix(group) + topic + "/" + strconv.Itoa(int(p))
}

// inTxns runs ops in transactions of at most txnOps. Each transaction is
// all or none; a commit of more partitions than one holds may land in
// part when etcd fails meanwhile, which leaves each partition at a
// position its consumer committed (and is told failed, so it commits again).
func (e *Etcd) inTxns(ctx context.Context, ops []clientv3.Op) error {
	for len(ops) > 0 {
		n := min(len(ops), txnOps)
		if _, err := e.c.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
			return full(err)
		}
		ops = ops[n:]
	}
	return nil
}

// Commit writes group's positions, one key each.
func (e *Etcd) Commit(group string, positions map[string]map[int32]Committed) error {
	if len(group) > MaxGroupBytes {
		return ErrGroupTooLong
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	var ops []clientv3.Op
	bytes := 0
	for topic, parts := range positions {
		for p, c := range parts {
			v, err := json.Marshal(c)
			if err != nil {
				return err
			}
			k := e.key(group, topic, p)
			bytes += len(k) + len(v)
			ops = append(ops, clientv3.OpPut(k, string(v)))
		}
	}
	if err := e.waitToWrite(ctx, bytes); err != nil {
		return fmt.Errorf("committing offsets of group %q: %w", group, err)
	}
	if err := e.inTxns(ctx, ops); err != nil {
		return fmt.Errorf("committing offsets of group %q: %w", group, err)
	}
	return nil
}

// parse splits a key's rest after the group prefix into topic and
// partition.
func parse(rest string) (string, int32, bool) {
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", 0, false
	}
	p, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], int32(p), true
}

func (e *Etcd) read(ctx context.Context, group string) (map[string]map[int32]Committed, int64, error) {
	pfx := e.groupPrefix(group)
	resp, err := e.c.Get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("committed offsets of group %q: %w", group, err)
	}
	out := map[string]map[int32]Committed{}
	for _, kv := range resp.Kvs {
		topic, p, ok := parse(string(kv.Key[len(pfx):]))
		if !ok {
			return nil, 0, fmt.Errorf("committed offsets of group %q: bad key %q", group, kv.Key)
		}
		var c Committed
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return nil, 0, fmt.Errorf("committed offset of %s %s/%d in etcd: %w", group, topic, p, err)
		}
		if out[topic] == nil {
			out[topic] = map[int32]Committed{}
		}
		out[topic][p] = c
	}
	return out, resp.Header.Revision, nil
}

// Group returns every position group has committed, by topic and partition.
func (e *Etcd) Group(group string) (map[string]map[int32]Committed, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	pos, _, err := e.read(ctx, group)
	return pos, err
}

// Delete removes the named partitions' positions of group (Kafka's
// OffsetDelete); a commit of other partitions meanwhile stays.
func (e *Etcd) Delete(group string, partitions map[string][]int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	var ops []clientv3.Op
	for topic, parts := range partitions {
		for _, p := range parts {
			ops = append(ops, clientv3.OpDelete(e.key(group, topic, p)))
		}
	}
	if err := e.inTxns(ctx, ops); err != nil {
		return fmt.Errorf("deleting offsets of group %q: %w", group, err)
	}
	return nil
}

// DeleteGroup removes every position group has committed (Kafka's
// DeleteGroups), if none is committed between reading them and deleting
// them: a commit that comes between (from a node that still believes it
// coordinates the group) means the group is in use, so it is reported
// (ErrChanged) rather than wiped. The check is one compare over the
// group's keys: none modified since the read.
func (e *Etcd) DeleteGroup(group string) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	pos, rev, err := e.read(ctx, group)
	if err != nil || len(pos) == 0 {
		return err
	}
	if e.betweenReadAndSwap != nil {
		e.betweenReadAndSwap()
	}
	pfx := e.groupPrefix(group)
	resp, err := e.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(pfx), "<", rev+1).WithPrefix()).
		Then(clientv3.OpDelete(pfx, clientv3.WithPrefix())).Commit()
	if err != nil {
		return fmt.Errorf("deleting offsets of group %q: %w", group, full(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("deleting offsets of group %q: %w", group, ErrChanged)
	}
	return nil
}

// groupsPage is how many keys Groups reads at once.
const groupsPage = 512

// Groups lists the groups with committed positions, in order. It reads
// keys only, a page at a time, and skips past each group it has seen, so
// a group with many partitions costs a read, not its partitions.
func (e *Etcd) Groups() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	end := clientv3.GetPrefixRangeEnd(e.root)
	from := e.root
	var out []string
	last := ""
	for {
		resp, err := e.c.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(groupsPage))
		if err != nil {
			return nil, fmt.Errorf("listing groups with committed offsets: %w", err)
		}
		for _, kv := range resp.Kvs {
			esc, _, ok := strings.Cut(string(kv.Key[len(e.root):]), "/")
			if !ok {
				return nil, fmt.Errorf("committed offsets: bad key %q", kv.Key)
			}
			if esc == last {
				continue
			}
			last = esc
			g, err := url.PathUnescape(esc)
			if err != nil {
				return nil, fmt.Errorf("committed offsets: bad key %q", kv.Key)
			}
			out = append(out, g)
			from = clientv3.GetPrefixRangeEnd(e.root + esc + "/")
		}
		if !resp.More {
			// Keys sort by the escaped names; callers want the names' order.
			slices.Sort(out)
			return out, nil
		}
	}
}

// full marks etcd's out-of-space refusal as catalog.ErrMetadataFull.
func full(err error) error {
	if errors.Is(err, rpctypes.ErrNoSpace) {
		return fmt.Errorf("%w: %w", catalog.ErrMetadataFull, err)
	}
	return err
}

// MigrateLegacy moves committed offsets kept as earlier versions kept them,
// one value per group under {prefix}/offsets/{group}, to one key per
// group-partition, and deletes the old values; a node runs it at start.
// Each position is put only where none is yet, so a commit made meanwhile
// by a node already upgraded wins, and nodes starting together, or one
// restarting midway, do no harm. It returns the groups moved.
func (e *Etcd) MigrateLegacy(ctx context.Context) (int, error) {
	legacy := strings.TrimSuffix(e.root, "committed/") + "offsets/"
	resp, err := e.c.Get(ctx, legacy, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("reading committed offsets kept per group: %w", err)
	}
	for _, kv := range resp.Kvs {
		group := string(kv.Key[len(legacy):])
		var pos map[string]map[int32]Committed
		if err := json.Unmarshal(kv.Value, &pos); err != nil {
			return 0, fmt.Errorf("committed offsets of group %q kept per group: %w", group, err)
		}
		for topic, parts := range pos {
			for p, c := range parts {
				v, _ := json.Marshal(c)
				k := e.key(group, topic, p)
				if _, err := e.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(v))).Commit(); err != nil {
					return 0, fmt.Errorf("moving committed offsets of group %q: %w", group, full(err))
				}
			}
		}
		if _, err := e.c.Delete(ctx, string(kv.Key)); err != nil {
			return 0, fmt.Errorf("moving committed offsets of group %q: %w", group, err)
		}
	}
	return len(resp.Kvs), nil
}
