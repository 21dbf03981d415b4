// Package pebblestore is the Pebble engine (the design's durable one-node engine, docs/design.md):
// every record is a Pebble entry, each append one synced batch. Durable on
// one node, simple, and slower than segment files for large logs.
package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/cockroachdb/pebble"

	"strata/engine/index"
	"strata/engine/leaderepoch"
	"strata/engine/record"
	"strata/engine/store"
)

const (
	kindRecord = 'r' // shard, offset -> encoded record (engine/record)
	kindMeta   = 'm' // shard -> low u64, log end u64[, high watermark u64 once managed]
	kindEpochs = 'e' // shard -> leader-epoch history (leaderepoch's "SLEH" encoding)
)

// Store is the Pebble engine.
type Store struct {
	dir string
	db  *pebble.DB
	// One lock per shard keeps its appends in order.
	mu     sync.Mutex
	shards map[string]*shard
}

type shard struct {
	mu sync.Mutex
	marks
	tsBucket int64
	tsSet    bool
	// epochs is the leader-epoch history (store.Epochs), as its key holds
	// it; retention trims it when it is read or next written.
	epochs leaderepoch.History
}

// marks are what a shard's meta entry keeps.
type marks struct {
	low, end uint64 // end: the log end, the next offset to be written
	// hw is the high watermark once managed (store.Replica); until then it
	// follows the log end.
	hw      uint64
	managed bool
}

// high is the readable end: the high watermark.
func (m marks) high() uint64 {
	if m.managed {
		return m.hw
	}
	return m.end
}

// meta is the shard's meta entry.
func (m marks) meta() []byte {
	v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, m.low), m.end)
	if m.managed {
		v = binary.BigEndian.AppendUint64(v, m.hw)
	}
	return v
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Replica = (*Store)(nil)
	_ store.Starter = (*Store)(nil)
	_ store.Epochs  = (*Store)(nil)
)

// Open opens or creates the store in dir.
func Open(dir string) (*Store, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quiet{}})
	if err != nil {
		return nil, fmt.Errorf("pebble engine %s: %w", dir, err)
	}
	s := &Store{dir: dir, db: db, shards: map[string]*shard{}}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindMeta}, UpperBound: []byte{kindMeta + 1}})
	if err != nil {
		db.Close()
		return nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		name := string(it.Key()[1 : len(it.Key())-1])
		v := it.Value()
		sh := &shard{marks: marks{low: binary.BigEndian.Uint64(v), end: binary.BigEndian.Uint64(v[8:])}}
		if len(v) >= 24 {
			sh.hw, sh.managed = binary.BigEndian.Uint64(v[16:]), true
		}
		s.shards[name] = sh
	}
	if err := it.Error(); err != nil {
		return s, err
	}
	for name, sh := range s.shards {
		if sh.tsBucket, sh.tsSet, err = lastTimeBucket(db, name); err != nil {
			return s, err
		}
		if sh.epochs, err = loadEpochs(db, name); err != nil {
			return s, err
		}
	}
	return s, nil
}

func metaKey(name string) []byte { return index.Prefix(kindMeta, name) }

func epochsKey(name string) []byte { return index.Prefix(kindEpochs, name) }

// loadEpochs reads a shard's leader-epoch history; none is an empty one.
func loadEpochs(db *pebble.DB, name string) (leaderepoch.History, error) {
	v, closer, err := db.Get(epochsKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	h, err := leaderepoch.Decode(v)
	if err != nil {
		return nil, fmt.Errorf("shard %s: leader epochs: %w", name, err)
	}
	return h, nil
}

func recordKey(name string, off uint64) []byte {
	return binary.BigEndian.AppendUint64(index.Prefix(kindRecord, name), off)
}

func (s *Store) shard(name string) (*shard, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shards == nil {
		return nil, store.ErrClosed
	}
	sh, ok := s.shards[name]
	if !ok {
		return nil, fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
	}
	return sh, nil
}

func (s *Store) CreateShard(ctx context.Context, name string) error {
	return s.CreateShardAt(ctx, name, 0)
}

// CreateShardAt makes an empty shard whose first offset is start; its meta
// entry, synced, keeps the start as both the low watermark and the log end.
func (s *Store) CreateShardAt(ctx context.Context, name string, start uint64) error {
	if err := store.ValidateShard(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shards == nil {
		return store.ErrClosed
	}
	if _, ok := s.shards[name]; ok {
		return fmt.Errorf("shard %q: %w", name, store.ErrShardExists)
	}
	sh := &shard{marks: marks{low: start, end: start}}
	if err := s.db.Set(metaKey(name), sh.meta(), pebble.Sync); err != nil {
		return err
	}
	s.shards[name] = sh
	return nil
}

func (s *Store) Append(ctx context.Context, name string, recs []record.Record) (uint64, error) {
	return s.append(name, recs, false)
}

// AppendAt appends records carrying their offsets; the first must be the
// log end.
func (s *Store) AppendAt(ctx context.Context, name string, recs []record.Record) error {
	_, err := s.append(name, recs, true)
	return err
}

func (s *Store) append(name string, recs []record.Record, at bool) (uint64, error) {
	sh, err := s.shard(name)
	if err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, errors.New("append: no records")
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if at {
		if err := store.CheckAppendAt(name, recs, sh.end); err != nil {
			return 0, err
		}
	}
	b := s.db.NewBatch()
	defer b.Close()
	base := sh.end
	var buf []byte
	bucket, set := sh.tsBucket, sh.tsSet
	for i := range recs {
		r := &recs[i]
		r.Offset = base + uint64(i)
		if buf, err = record.Append(buf[:0], r); err != nil {
			return 0, fmt.Errorf("shard %s: %w", name, err)
		}
		b.Set(recordKey(name, r.Offset), buf, nil)
		if bk := floorDiv(r.Timestamp, 1000); !set || bk > bucket {
			b.Set(index.TimeKey(name, r.Timestamp, r.Offset), nil, nil)
			bucket, set = bk, true
		}
		if r.Key != nil {
			b.Set(index.WithOffset(index.KeyPrefix(name, r.Key), r.Offset), nil, nil)
		}
		for _, t := range r.Tags {
			b.Set(index.WithOffset(index.TagPrefix(name, t), r.Offset), nil, nil)
		}
	}
	next := sh.marks
	next.end = base + uint64(len(recs))
	b.Set(metaKey(name), next.meta(), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("shard %s: %w", name, err)
	}
	sh.end, sh.tsBucket, sh.tsSet = next.end, bucket, set
	return base, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// watermarks returns the readable range [low, high): high is the high
// watermark, or the log end when toEnd.
func (s *Store) watermarks(name string, toEnd bool) (*shard, uint64, uint64, error) {
	sh, err := s.shard(name)
	if err != nil {
		return nil, 0, 0, err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if toEnd {
		return sh, sh.low, sh.end, nil
	}
	return sh, sh.low, sh.high(), nil
}

func (s *Store) Read(ctx context.Context, name string, offset uint64, b store.Budget) ([]record.Record, error) {
	return s.read(name, offset, b, false)
}

// ReadToLogEnd reads up to the log end, past the high watermark.
func (s *Store) ReadToLogEnd(ctx context.Context, name string, offset uint64, b store.Budget) ([]record.Record, error) {
	return s.read(name, offset, b, true)
}

func (s *Store) read(name string, offset uint64, b store.Budget, toEnd bool) ([]record.Record, error) {
	_, low, high, err := s.watermarks(name, toEnd)
	if err != nil {
		return nil, err
	}
	if offset < low || offset > high {
		return nil, &store.OutOfRangeError{Shard: name, Offset: offset, Low: low, High: high}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: recordKey(name, offset), UpperBound: recordKey(name, high)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []record.Record
	used := 0
	for it.First(); it.Valid(); it.Next() {
		v := it.Value()
		if !b.Take(len(out), used, len(v)) {
			break
		}
		r, _, err := record.Decode(append([]byte(nil), v...))
		if err != nil {
			return out, fmt.Errorf("shard %s: %w", name, err)
		}
		out = append(out, r)
		used += len(v)
	}
	return out, it.Error()
}

func (s *Store) OffsetForTime(ctx context.Context, name string, ts int64) (uint64, error) {
	_, low, high, err := s.watermarks(name, false)
	if err != nil {
		return 0, err
	}
	from := low
	if off, ok, err := index.TimeFloor(s.db, name, ts); err != nil {
		return 0, err
	} else if ok && off > from && off < high {
		from = off
	}
	for from < high {
		recs, err := s.Read(ctx, name, from, store.Budget{MaxRecords: 1000})
		if err != nil || len(recs) == 0 {
			return high, err
		}
		for _, r := range recs {
			if r.Timestamp >= ts {
				return r.Offset, nil
			}
		}
		from = recs[len(recs)-1].Offset + 1
	}
	return high, nil
}

func (s *Store) ReadByKey(ctx context.Context, name string, key []byte, from uint64, b store.Budget) ([]record.Record, error) {
	if key == nil {
		return nil, errors.New("read by key: the key is null")
	}
	return s.byIndex(ctx, name, index.KeyPrefix(name, key), from, b)
}

func (s *Store) ReadByTag(ctx context.Context, name string, tag string, from uint64, b store.Budget) ([]record.Record, error) {
	return s.byIndex(ctx, name, index.TagPrefix(name, tag), from, b)
}

func (s *Store) byIndex(ctx context.Context, name string, prefix []byte, from uint64, b store.Budget) ([]record.Record, error) {
	_, low, high, err := s.watermarks(name, false)
	if err != nil {
		return nil, err
	}
	var out []record.Record
	used := 0
	for from = max(from, low); from < high; {
		offs, err := index.OffsetsFrom(s.db, prefix, from, 256)
		if err != nil || len(offs) == 0 {
			return out, err
		}
		for _, off := range offs {
			if off >= high {
				return out, nil
			}
			recs, err := s.Read(ctx, name, off, store.Budget{MaxRecords: 1})
			if err != nil {
				return out, err
			}
			size := record.Size(&recs[0])
			if !b.Take(len(out), used, size) {
				return out, nil
			}
			out = append(out, recs[0])
			used += size
		}
		from = offs[len(offs)-1] + 1
	}
	return out, nil
}

func (s *Store) Watermarks(ctx context.Context, name string) (uint64, uint64, error) {
	_, low, high, err := s.watermarks(name, false)
	return low, high, err
}

// LogEnd returns the next offset to be written.
func (s *Store) LogEnd(ctx context.Context, name string) (uint64, error) {
	_, _, end, err := s.watermarks(name, true)
	return end, err
}

// SetHighWatermark raises the high watermark and makes it managed. The
// first call, which makes it managed, is synced; later ones are not: after
// a machine crash the high watermark may come back lower, never higher.
func (s *Store) SetHighWatermark(ctx context.Context, name string, hw uint64) error {
	sh, err := s.shard(name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if hw > sh.end {
		return store.HighWatermarkPastLogEndError(name, hw, sh.end)
	}
	if sh.managed && hw <= sh.hw {
		return nil
	}
	next := sh.marks
	next.hw, next.managed = max(sh.high(), hw), true
	sync := pebble.NoSync
	if !sh.managed {
		sync = pebble.Sync
	}
	if err := s.db.Set(metaKey(name), next.meta(), sync); err != nil {
		return fmt.Errorf("shard %s: %w", name, err)
	}
	sh.hw, sh.managed = next.hw, true
	return nil
}

// TruncateTo removes the records at and after end, and their index
// entries, in one synced batch.
func (s *Store) TruncateTo(ctx context.Context, name string, end uint64) error {
	sh, err := s.shard(name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if hw := sh.high(); end < hw {
		return store.TruncateCommittedError(name, end, hw)
	}
	epochs := sh.epochs.TruncateFromEnd(end)
	if end >= sh.end {
		if len(epochs) == len(sh.epochs) {
			return nil
		}
		if err := s.db.Set(epochsKey(name), epochs.Encode(), pebble.Sync); err != nil {
			return fmt.Errorf("shard %s: %w", name, err)
		}
		sh.epochs = epochs
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	if len(epochs) != len(sh.epochs) {
		b.Set(epochsKey(name), epochs.Encode(), nil)
	}
	// Key and tag entries name offsets that will hold other records.
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: recordKey(name, end), UpperBound: recordKey(name, sh.end)})
	if err != nil {
		return err
	}
	minTS := int64(math.MaxInt64)
	for it.First(); it.Valid(); it.Next() {
		r, _, err := record.Decode(it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("shard %s: %w", name, err)
		}
		minTS = min(minTS, r.Timestamp)
		if r.Key != nil {
			b.Delete(index.WithOffset(index.KeyPrefix(name, r.Key), r.Offset), nil)
		}
		for _, t := range r.Tags {
			b.Delete(index.WithOffset(index.TagPrefix(name, t), r.Offset), nil)
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	b.DeleteRange(recordKey(name, end), recordKey(name, sh.end), nil)
	if err := index.DeleteTimeFrom(s.db, b, name, minTS, end); err != nil {
		return err
	}
	next := sh.marks
	next.end = end
	b.Set(metaKey(name), next.meta(), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("shard %s: %w", name, err)
	}
	sh.end = end
	sh.epochs = epochs
	sh.tsBucket, sh.tsSet, err = lastTimeBucket(s.db, name)
	return err
}

// AssignEpoch records, in one synced write, that the records from start on
// are written under epoch.
func (s *Store) AssignEpoch(ctx context.Context, name string, epoch int32, start uint64) error {
	sh, err := s.shard(name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if start > sh.end {
		return store.EpochPastLogEndError(name, epoch, start, sh.end)
	}
	h, changed, err := sh.epochs.TruncateFromStart(sh.low).Assign(epoch, start)
	if err != nil {
		return fmt.Errorf("shard %s: %w", name, err)
	}
	if !changed {
		return nil
	}
	if err := s.db.Set(epochsKey(name), h.Encode(), pebble.Sync); err != nil {
		return fmt.Errorf("shard %s: leader epochs: %w", name, err)
	}
	sh.epochs = h
	return nil
}

// LeaderEpochs returns the shard's leader-epoch history, oldest first.
func (s *Store) LeaderEpochs(ctx context.Context, name string) ([]store.EpochEntry, error) {
	sh, err := s.shard(name)
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return append([]store.EpochEntry(nil), sh.epochs.TruncateFromStart(sh.low)...), nil
}

// lastTimeBucket is the bucket of the shard's last time-index entry: the
// running-max timestamp's, which the next entry must pass.
func lastTimeBucket(db *pebble.DB, name string) (int64, bool, error) {
	ts, _, ok, err := index.LastTime(db, name)
	if err != nil || !ok {
		return 0, false, err
	}
	return floorDiv(ts, 1000), true, nil
}

func (s *Store) DeleteBefore(ctx context.Context, name string, offset uint64) error {
	sh, err := s.shard(name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if high := sh.high(); offset > high {
		return &store.OutOfRangeError{Shard: name, Offset: offset, Low: sh.low, High: high}
	}
	if offset <= sh.low {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	b.DeleteRange(recordKey(name, sh.low), recordKey(name, offset), nil)
	next := sh.marks
	next.low = offset
	b.Set(metaKey(name), next.meta(), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	sh.low = offset
	return nil
}

func (s *Store) Shards(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n := range s.shards {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (s *Store) DeleteShard(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.shards[name]; !ok {
		return fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, kind := range []byte{kindRecord, kindMeta, kindEpochs, index.KindTime, index.KindKey, index.KindTag} {
		p := index.Prefix(kind, name)
		b.DeleteRange(p, index.UpperBound(p), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	delete(s.shards, name)
	return nil
}

func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shards == nil {
		return nil
	}
	s.shards = nil
	return s.db.Close()
}

type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// LocalBytes estimates the bytes a shard's records take on disk, from
// Pebble's tables (memtables not yet flushed are not counted).
func (s *Store) LocalBytes(name string) (int64, error) {
	if _, err := s.shard(name); err != nil {
		return 0, err
	}
	prefix := index.Prefix(kindRecord, name)
	n, err := s.db.EstimateDiskUsage(prefix, index.UpperBound(prefix))
	return int64(n), err
}
