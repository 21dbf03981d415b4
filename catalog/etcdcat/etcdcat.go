// Package etcdcat is the catalog for a cluster: shards and segments kept in
// etcd, where several nodes read and change them at once. Every change is
// one transaction guarded by the revisions it read, so two nodes that
// decided on the same state never both win (docs/catalog.md, "On etcd").
package etcdcat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"strata/catalog"
)

// attempts bounds how often one call re-reads and re-decides after another
// writer changed its keys: under any sane contention a few suffice, and a
// bound turns a livelock into an error instead of a hang.
const attempts = 16

// maxTxnOps is etcd's default --max-txn-ops: a transaction with more
// operations is refused, so a large Restore is written in stages.
const maxTxnOps = 128

// Config says where the catalog lives.
type Config struct {
	// Client is the caller's: Close leaves it open.
	Client *clientv3.Client
	// Prefix is put before every key: {Prefix}/catalog/...
	Prefix string
	// Timeout bounds each call to etcd; 10s if zero.
	Timeout time.Duration
	// Metrics, if set, counts the catalog's etcd writes (NewMetrics).
	Metrics *Metrics
	// Logger, if set, records writes that lost a race and were re-decided.
	Logger *slog.Logger
}

// Catalog is safe for concurrent use, also by several processes on one
// prefix.
type Catalog struct {
	cli     *clientv3.Client
	root    string // {prefix}/catalog/
	timeout time.Duration
	metrics *Metrics
	log     *slog.Logger
	writes  atomic.Uint64
	// decided, if set, runs between a call's read and its guarded write:
	// tests hold two writers there so that both decide on the same state.
	decided func()
	// base is cancelled by Close, ending calls still waiting on etcd.
	base   context.Context
	cancel context.CancelFunc
}

// Open returns the catalog under cfg.Prefix, checking that etcd answers.
func Open(ctx context.Context, cfg Config) (*Catalog, error) {
	if cfg.Client == nil {
		return nil, errors.New("etcdcat: no etcd client")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, cancel := context.WithCancel(context.Background())
	c := &Catalog{
		cli: cfg.Client, root: strings.TrimSuffix(cfg.Prefix, "/") + "/catalog/",
		timeout: cfg.Timeout, metrics: cfg.Metrics, log: log, base: base, cancel: cancel,
	}
	octx, ocancel := context.WithTimeout(ctx, cfg.Timeout)
	defer ocancel()
	if _, err := c.cli.Get(octx, c.root, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cancel()
		return nil, fmt.Errorf("etcdcat: reading %s: %w", c.root, err)
	}
	return c, nil
}

// Close ends calls in flight; the client stays open (it is the caller's).
func (c *Catalog) Close() error {
	c.cancel()
	return nil
}

// Writes is how many write transactions the catalog has sent to etcd,
// including those that lost a compare (each is a Raft proposal all the same).
func (c *Catalog) Writes() uint64 { return c.writes.Load() }

func (c *Catalog) shardKey(name string) string { return c.root + "shard/" + name }

func (c *Catalog) segPrefix(shard string) string { return c.root + "seg/" + shard + "/" }

// segKey zero-pads the number so a range read lists segments in order.
func (c *Catalog) segKey(shard string, no uint64) string {
	return fmt.Sprintf("%s%020d", c.segPrefix(shard), no)
}

// restoreKey marks a Restore too large for one transaction while it runs;
// its revision fences the stages (see Restore).
func (c *Catalog) restoreKey(shard string) string { return c.root + "restoring/" + shard }

func (c *Catalog) hold() {
	if c.decided != nil {
		c.decided()
	}
}

func (c *Catalog) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.base, c.timeout)
}

// txn sends one guarded write and counts it; op names it in the metrics.
// The response says whether the compare held, and at which revision.
func (c *Catalog) txn(op string, cmps []clientv3.Cmp, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	return c.txnElse(op, cmps, ops, nil)
}

// txnElse is txn with reads to run when the compare fails, so the loser
// learns why without another round trip.
func (c *Catalog) txnElse(op string, cmps []clientv3.Cmp, then, orElse []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	c.writes.Add(1)
	c.metrics.write(op)
	resp, err := c.cli.Txn(ctx).If(cmps...).Then(then...).Else(orElse...).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdcat %s: %w", op, err)
	}
	if !resp.Succeeded {
		c.metrics.lost(op)
	}
	return resp, nil
}

func putOp(key string, v any) (clientv3.Op, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(key, string(raw)), nil
}

// get reads one key into v and returns its ModRevision; catalog.ErrNotFound
// if it is absent.
func (c *Catalog) get(key string, v any) (int64, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	resp, err := c.cli.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, catalog.ErrNotFound
	}
	kv := resp.Kvs[0]
	if err := json.Unmarshal(kv.Value, v); err != nil {
		return 0, fmt.Errorf("%s: %w", kv.Key, err)
	}
	return kv.ModRevision, nil
}

// CreateShard records a new shard with an empty active segment 0, if no
// shard of that name exists.
func (c *Catalog) CreateShard(name string, now time.Time) (catalog.Shard, catalog.Segment, error) {
	sh := catalog.Shard{Name: name, Created: now.UTC()}
	seg := catalog.Segment{Shard: name, No: 0, State: catalog.Active, Created: now.UTC()}
	putShard, err := putOp(c.shardKey(name), sh)
	if err != nil {
		return catalog.Shard{}, catalog.Segment{}, err
	}
	putSeg, err := putOp(c.segKey(name, 0), seg)
	if err != nil {
		return catalog.Shard{}, catalog.Segment{}, err
	}
	if _, err := c.createFresh(name, "create_shard", putShard, putSeg); err != nil {
		return catalog.Shard{}, catalog.Segment{}, err
	}
	return sh, seg, nil
}

// createFresh writes ops in one transaction that holds only while the shard
// has no key and no segments. Segments without their shard key are what an
// interrupted staged Restore left (or one still running, which loses): they
// are cleared and the write tried again. It returns the write's revision.
func (c *Catalog) createFresh(name, op string, ops ...clientv3.Op) (int64, error) {
	fresh := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(c.shardKey(name)), "=", 0),
		// Over a range, the compare holds when every key in it does: none.
		clientv3.Compare(clientv3.CreateRevision(c.segPrefix(name)), "=", 0).WithPrefix(),
	}
	for range attempts {
		resp, err := c.txnElse(op, fresh, ops, []clientv3.Op{clientv3.OpGet(c.shardKey(name), clientv3.WithCountOnly())})
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			return resp.Header.Revision, nil
		}
		if resp.Responses[0].GetResponseRange().Count > 0 {
			return 0, fmt.Errorf("shard %q: %w", name, catalog.ErrExists)
		}
		resp, err = c.txn("clear_orphans", fresh[:1],
			clientv3.OpDelete(c.segPrefix(name), clientv3.WithPrefix()),
			clientv3.OpDelete(c.restoreKey(name)))
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("shard %q: %w", name, catalog.ErrExists)
		}
		c.log.Info("catalog cleared the segments of an unfinished restore", "shard", name)
	}
	return 0, fmt.Errorf("shard %q: still changing after %d attempts: %w", name, attempts, catalog.ErrConflict)
}

// Shards lists every shard in name order.
func (c *Catalog) Shards() ([]catalog.Shard, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	resp, err := c.cli.Get(ctx, c.root+"shard/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []catalog.Shard
	for _, kv := range resp.Kvs {
		var s catalog.Shard
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// Shard returns one shard.
func (c *Catalog) Shard(name string) (catalog.Shard, error) {
	var s catalog.Shard
	if _, err := c.get(c.shardKey(name), &s); err != nil {
		return catalog.Shard{}, fmt.Errorf("shard %q: %w", name, err)
	}
	return s, nil
}

// Segments lists a shard's segments in order. The shard key and its
// segments are read at one revision, and a shard without its key (a Restore
// still running, or one that was interrupted) has no segments.
func (c *Catalog) Segments(shard string) ([]catalog.Segment, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(c.shardKey(shard), clientv3.WithCountOnly()),
		clientv3.OpGet(c.segPrefix(shard), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, err
	}
	if resp.Responses[0].GetResponseRange().Count == 0 {
		return nil, nil
	}
	var out []catalog.Segment
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var s catalog.Segment
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// SegmentsFrom bisects the shard's segment keys (catalog.FindSegment) with
// ranged reads of one key, all at the revision of the first, so the search
// sees one version of the shard; then reads max segments on from there.
func (c *Catalog) SegmentsFrom(shard string, offset uint64, max int) ([]catalog.Segment, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	prefix := c.segPrefix(shard)
	end := clientv3.GetPrefixRangeEnd(prefix)
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(c.shardKey(shard), clientv3.WithCountOnly()),
		clientv3.OpGet(prefix, clientv3.WithRange(end), clientv3.WithLimit(1)),
		clientv3.OpGet(prefix, clientv3.WithRange(end), clientv3.WithLimit(1), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)),
	).Commit()
	if err != nil {
		return nil, err
	}
	if resp.Responses[0].GetResponseRange().Count == 0 {
		return nil, nil
	}
	rev := resp.Header.Revision
	one := func(kvs []*mvccpb.KeyValue) (catalog.Segment, error) {
		var s catalog.Segment
		if len(kvs) == 0 {
			return s, fmt.Errorf("shard %q: no segment where one was: %w", shard, catalog.ErrConflict)
		}
		if err := json.Unmarshal(kvs[0].Value, &s); err != nil {
			return s, fmt.Errorf("%s: %w", kvs[0].Key, err)
		}
		return s, nil
	}
	firstKVs, lastKVs := resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs
	if len(firstKVs) == 0 {
		return nil, nil
	}
	first, err := one(firstKVs)
	if err != nil {
		return nil, err
	}
	last, err := one(lastKVs)
	if err != nil {
		return nil, err
	}
	from := func(no uint64, limit int64) ([]*mvccpb.KeyValue, error) {
		r, err := c.cli.Get(ctx, c.segKey(shard, no), clientv3.WithRange(end), clientv3.WithLimit(limit), clientv3.WithRev(rev))
		if err != nil {
			return nil, err
		}
		return r.Kvs, nil
	}
	no, err := catalog.FindSegment(first.No, last.No, offset, func(no uint64) (catalog.Segment, error) {
		kvs, err := from(no, 1)
		if err != nil {
			return catalog.Segment{}, err
		}
		return one(kvs)
	})
	if err != nil {
		return nil, err
	}
	kvs, err := from(no, int64(max))
	if err != nil {
		return nil, err
	}
	out := make([]catalog.Segment, 0, len(kvs))
	for _, kv := range kvs {
		s, err := one([]*mvccpb.KeyValue{kv})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Roll seals the active segment with its final metadata and records the
// next one, starting at sealed.EndOffset+1, in one transaction that holds
// only if the segment is still the active one read and the next does not
// exist yet.
func (c *Catalog) Roll(sealed catalog.Segment, now time.Time) (catalog.Segment, error) {
	key, nextKey := c.segKey(sealed.Shard, sealed.No), c.segKey(sealed.Shard, sealed.No+1)
	for range attempts {
		cur, rev, nextExists, err := c.readRoll(key, nextKey)
		if err != nil {
			return catalog.Segment{}, fmt.Errorf("roll %s segment %d: %w", sealed.Shard, sealed.No, err)
		}
		if cur.State != catalog.Active {
			return catalog.Segment{}, fmt.Errorf("roll %s segment %d: it is %s, not active: %w", sealed.Shard, sealed.No, cur.State, catalog.ErrConflict)
		}
		if nextExists { // not a race to retry: the catalog disagrees with itself
			return catalog.Segment{}, fmt.Errorf("roll %s segment %d: it is active but segment %d exists: %w", sealed.Shard, sealed.No, sealed.No+1, catalog.ErrConflict)
		}
		s := sealed
		s.State = catalog.Sealed
		s.SealedAt = now.UTC()
		next := catalog.Segment{Shard: s.Shard, No: s.No + 1, State: catalog.Active, StartOffset: s.EndOffset + 1, Created: now.UTC()}
		c.hold()
		putSealed, err := putOp(key, s)
		if err != nil {
			return catalog.Segment{}, err
		}
		putNext, err := putOp(nextKey, next)
		if err != nil {
			return catalog.Segment{}, err
		}
		resp, err := c.txn("roll", []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(key), "=", rev),
			clientv3.Compare(clientv3.CreateRevision(nextKey), "=", 0),
		}, putSealed, putNext)
		if err != nil {
			return catalog.Segment{}, err
		}
		if resp.Succeeded {
			return next, nil
		}
		c.log.Debug("catalog roll lost a race; re-reading", "shard", sealed.Shard, "segment", sealed.No)
	}
	return catalog.Segment{}, fmt.Errorf("roll %s segment %d: still changing after %d attempts: %w", sealed.Shard, sealed.No, attempts, catalog.ErrConflict)
}

// readRoll reads the segment to seal and whether the next exists, at one
// revision.
func (c *Catalog) readRoll(key, nextKey string) (cur catalog.Segment, rev int64, nextExists bool, err error) {
	ctx, cancel := c.ctx()
	defer cancel()
	resp, err := c.cli.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(nextKey, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return cur, 0, false, err
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return cur, 0, false, catalog.ErrNotFound
	}
	if err := json.Unmarshal(kvs[0].Value, &cur); err != nil {
		return cur, 0, false, fmt.Errorf("%s: %w", key, err)
	}
	return cur, kvs[0].ModRevision, resp.Responses[1].GetResponseRange().Count > 0, nil
}

// Transition moves a segment from one state to another, applying change to
// its record, in a transaction that holds only if the segment is unchanged
// since it was read in from; it fails with catalog.ErrConflict once a
// re-read finds the segment no longer in from.
func (c *Catalog) Transition(shard string, no uint64, from, to catalog.State, change func(*catalog.Segment)) (catalog.Segment, error) {
	if !catalog.CanTransition(from, to) {
		return catalog.Segment{}, fmt.Errorf("segment %s/%d: %s to %s is not a lifecycle step", shard, no, from, to)
	}
	key := c.segKey(shard, no)
	for range attempts {
		var s catalog.Segment
		rev, err := c.get(key, &s)
		if err != nil {
			return catalog.Segment{}, fmt.Errorf("segment %s/%d: %w", shard, no, err)
		}
		if s.State != from {
			return catalog.Segment{}, fmt.Errorf("segment %s/%d is %s, not %s: %w", shard, no, s.State, from, catalog.ErrConflict)
		}
		if change != nil {
			change(&s)
		}
		s.State = to
		c.hold()
		put, err := putOp(key, s)
		if err != nil {
			return catalog.Segment{}, err
		}
		resp, err := c.txn("transition", []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, put)
		if err != nil {
			return catalog.Segment{}, err
		}
		if resp.Succeeded {
			return s, nil
		}
		c.log.Debug("catalog transition lost a race; re-reading", "shard", shard, "segment", no, "from", from, "to", to)
	}
	return catalog.Segment{}, fmt.Errorf("segment %s/%d: still changing after %d attempts: %w", shard, no, attempts, catalog.ErrConflict)
}

// Merge replaces remote segments nos with the one segment of their
// offsets (catalog.Merged), in a transaction that holds only if none of
// them changed since they were read.
func (c *Catalog) Merge(shard string, nos []uint64, change func(*catalog.Segment)) (catalog.Segment, error) {
	if len(nos) == 0 {
		return catalog.MergeOf(shard, nos, nil)
	}
	for range attempts {
		ctx, cancel := c.ctx()
		resp, err := c.cli.Get(ctx, c.segKey(shard, nos[0]), clientv3.WithRange(c.segKey(shard, nos[len(nos)-1]+1)))
		cancel()
		if err != nil {
			return catalog.Segment{}, err
		}
		var segs []catalog.Segment
		var cmps []clientv3.Cmp
		for _, kv := range resp.Kvs {
			var s catalog.Segment
			if err := json.Unmarshal(kv.Value, &s); err != nil {
				return catalog.Segment{}, fmt.Errorf("%s: %w", kv.Key, err)
			}
			segs = append(segs, s)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
		}
		m, err := catalog.MergeOf(shard, nos, segs)
		if err != nil {
			return catalog.Segment{}, err
		}
		if change != nil {
			change(&m)
		}
		m.State = catalog.Remote
		c.hold()
		put, err := putOp(c.segKey(shard, m.No), m)
		if err != nil {
			return catalog.Segment{}, err
		}
		ops := []clientv3.Op{put}
		for _, no := range nos[1:] {
			ops = append(ops, clientv3.OpDelete(c.segKey(shard, no)))
		}
		tr, err := c.txn("merge", cmps, ops...)
		if err != nil {
			return catalog.Segment{}, err
		}
		if tr.Succeeded {
			return m, nil
		}
		c.log.Debug("catalog merge lost a race; re-reading", "shard", shard, "segments", nos)
	}
	return catalog.Segment{}, fmt.Errorf("merging %s segments %v: still changing after %d attempts: %w", shard, nos, attempts, catalog.ErrConflict)
}

// Restore records a shard and its segments as they were: rebuilding a lost
// catalog from the bucket's manifests. It refuses a shard the catalog
// already has. A shard that fits one transaction is written in one; a
// larger one is staged (see restoreStaged).
func (c *Catalog) Restore(sh catalog.Shard, segs []catalog.Segment) error {
	putShard, err := putOp(c.shardKey(sh.Name), sh)
	if err != nil {
		return err
	}
	puts := make([]clientv3.Op, 0, len(segs))
	for _, s := range segs {
		if s.Shard != sh.Name {
			return fmt.Errorf("restore %s: segment %d belongs to %q", sh.Name, s.No, s.Shard)
		}
		p, err := putOp(c.segKey(sh.Name, s.No), s)
		if err != nil {
			return err
		}
		puts = append(puts, p)
	}
	if len(puts)+1 <= maxTxnOps {
		_, err := c.createFresh(sh.Name, "restore", append(puts, putShard)...)
		return err
	}
	return c.restoreStaged(sh.Name, puts, putShard)
}

// restoreStaged writes a Restore too large for one transaction: a marker
// first, then the segments in batches, then the shard key, which makes them
// visible (Segments shows nothing for a shard without its key). Each stage
// holds only while the shard is still absent and the marker is the one this
// call wrote, so a concurrent Restore or CreateShard of the name fences it.
func (c *Catalog) restoreStaged(name string, puts []clientv3.Op, putShard clientv3.Op) error {
	marker := c.restoreKey(name)
	rev, err := c.createFresh(name, "restore", clientv3.OpPut(marker, "restoring"))
	if err != nil {
		return err
	}
	fence := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(c.shardKey(name)), "=", 0),
		clientv3.Compare(clientv3.ModRevision(marker), "=", rev),
	}
	stage := func(ops ...clientv3.Op) error {
		resp, err := c.txn("restore", fence, ops...)
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			if _, err := c.Shard(name); err == nil {
				return fmt.Errorf("shard %q: %w", name, catalog.ErrExists)
			}
			return fmt.Errorf("restore %s: another writer took the shard over: %w", name, catalog.ErrConflict)
		}
		return nil
	}
	for len(puts) > 0 {
		n := min(len(puts), maxTxnOps)
		if err := stage(puts[:n]...); err != nil {
			return err
		}
		puts = puts[n:]
	}
	return stage(putShard, clientv3.OpDelete(marker))
}

// DeleteShard forgets a shard and its segments in one transaction, guarded
// by the shard key it read: a shard re-created in between is re-read and
// deleted as it now is. A shard that does not exist is already forgotten.
func (c *Catalog) DeleteShard(name string) error {
	key := c.shardKey(name)
	for range attempts {
		var sh catalog.Shard
		rev, err := c.get(key, &sh)
		if errors.Is(err, catalog.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("shard %q: %w", name, err)
		}
		c.hold()
		resp, err := c.txn("delete_shard", []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
			clientv3.OpDelete(key),
			clientv3.OpDelete(c.segPrefix(name), clientv3.WithPrefix()),
			clientv3.OpDelete(c.restoreKey(name)))
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
		c.log.Debug("catalog shard delete lost a race; re-reading", "shard", name)
	}
	return fmt.Errorf("delete shard %q: still changing after %d attempts: %w", name, attempts, catalog.ErrConflict)
}

// SetLowWatermark raises a shard's low watermark (never lowers it); a
// watermark already as high writes nothing.
func (c *Catalog) SetLowWatermark(shard string, low uint64) (catalog.Shard, error) {
	key := c.shardKey(shard)
	for range attempts {
		var s catalog.Shard
		rev, err := c.get(key, &s)
		if err != nil {
			return catalog.Shard{}, fmt.Errorf("shard %q: %w", shard, err)
		}
		if low <= s.LowWatermark {
			return s, nil
		}
		s.LowWatermark = low
		c.hold()
		put, err := putOp(key, s)
		if err != nil {
			return catalog.Shard{}, err
		}
		resp, err := c.txn("low_watermark", []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, put)
		if err != nil {
			return catalog.Shard{}, err
		}
		if resp.Succeeded {
			return s, nil
		}
		c.log.Debug("catalog low watermark lost a race; re-reading", "shard", shard)
	}
	return catalog.Shard{}, fmt.Errorf("shard %q low watermark: still changing after %d attempts: %w", shard, attempts, catalog.ErrConflict)
}

// Metrics counts the catalog's etcd writes: the cluster's benchmark holds
// them to rolls and lifecycle steps, never one per produce request.
type Metrics struct {
	writes  *prometheus.CounterVec
	lostCAS *prometheus.CounterVec
}

// NewMetrics registers the catalog's etcd metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_catalog_etcd_writes_total",
			Help: "Write transactions the catalog sent to etcd, by operation (each is a Raft proposal, won or lost)."}, []string{"op"}),
		lostCAS: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_catalog_etcd_compare_failures_total",
			Help: "Write transactions whose compare failed because another writer changed the keys first, by operation."}, []string{"op"}),
	}
	reg.MustRegister(m.writes, m.lostCAS)
	return m
}

func (m *Metrics) write(op string) {
	if m != nil {
		m.writes.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) lost(op string) {
	if m != nil {
		m.lostCAS.WithLabelValues(op).Inc()
	}
}

func (c *Catalog) topicKey(name string) string { return c.root + "topic/" + name }

// PutTopic writes a topic's record if it is still at t.Version: the write
// is guarded by the mod revision of the record read (or its absence), so of
// two writers that read one version only the first wins.
func (c *Catalog) PutTopic(t catalog.Topic) (catalog.Topic, error) {
	key := c.topicKey(t.Name)
	var cur catalog.Topic
	rev, err := c.get(key, &cur)
	if t, err = catalog.NextTopicVersion(t, cur, err); err != nil {
		return catalog.Topic{}, err
	}
	put, err := putOp(key, t)
	if err != nil {
		return catalog.Topic{}, err
	}
	c.hold()
	resp, err := c.txn("put_topic", []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, put)
	if err != nil {
		return catalog.Topic{}, err
	}
	if !resp.Succeeded {
		return catalog.Topic{}, fmt.Errorf("topic %q changed underneath: %w", t.Name, catalog.ErrConflict)
	}
	return t, nil
}

// Topic returns a topic's record.
func (c *Catalog) Topic(name string) (catalog.Topic, error) {
	var t catalog.Topic
	if _, err := c.get(c.topicKey(name), &t); err != nil {
		return catalog.Topic{}, fmt.Errorf("topic %q: %w", name, err)
	}
	return t, nil
}

// Topics lists every topic record in name order.
func (c *Catalog) Topics() ([]catalog.Topic, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	resp, err := c.cli.Get(ctx, c.root+"topic/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []catalog.Topic
	for _, kv := range resp.Kvs {
		var t catalog.Topic
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// DeleteTopic forgets a topic's record.
func (c *Catalog) DeleteTopic(name string) error {
	_, err := c.txn("delete_topic", nil, clientv3.OpDelete(c.topicKey(name)))
	return err
}
