// Package pebblestore is the Pebble engine (seed 002's RocksDB engine):
// every record is a Pebble entry, each append one synced batch. Durable on
// one node, simple, and slower than segment files for large logs.
package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/cockroachdb/pebble"

	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/store"
)

const (
	kindRecord = 'r' // shard, offset -> encoded record (engine/record)
	kindMeta   = 'm' // shard -> low u64, high u64
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
	mu        sync.Mutex
	low, high uint64
	tsBucket  int64
	tsSet     bool
}

var _ store.Store = (*Store)(nil)

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
		s.shards[name] = &shard{low: binary.BigEndian.Uint64(v), high: binary.BigEndian.Uint64(v[8:])}
	}
	return s, it.Error()
}

func metaKey(name string) []byte { return index.Prefix(kindMeta, name) }

func metaValue(low, high uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, low), high)
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
	sh := &shard{}
	if err := s.db.Set(metaKey(name), metaValue(0, 0), pebble.Sync); err != nil {
		return err
	}
	s.shards[name] = sh
	return nil
}

func (s *Store) Append(ctx context.Context, name string, recs []record.Record) (uint64, error) {
	sh, err := s.shard(name)
	if err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, errors.New("append: no records")
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	base := sh.high
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
	high := base + uint64(len(recs))
	b.Set(metaKey(name), metaValue(sh.low, high), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("shard %s: %w", name, err)
	}
	sh.high, sh.tsBucket, sh.tsSet = high, bucket, set
	return base, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func (s *Store) watermarks(name string) (*shard, uint64, uint64, error) {
	sh, err := s.shard(name)
	if err != nil {
		return nil, 0, 0, err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh, sh.low, sh.high, nil
}

func (s *Store) Read(ctx context.Context, name string, offset uint64, b store.Budget) ([]record.Record, error) {
	_, low, high, err := s.watermarks(name)
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
	_, low, high, err := s.watermarks(name)
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
	_, low, high, err := s.watermarks(name)
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
	_, low, high, err := s.watermarks(name)
	return low, high, err
}

func (s *Store) DeleteBefore(ctx context.Context, name string, offset uint64) error {
	sh, err := s.shard(name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if offset > sh.high {
		return &store.OutOfRangeError{Shard: name, Offset: offset, Low: sh.low, High: sh.high}
	}
	if offset <= sh.low {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	b.DeleteRange(recordKey(name, sh.low), recordKey(name, offset), nil)
	b.Set(metaKey(name), metaValue(offset, sh.high), nil)
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
	for _, kind := range []byte{kindRecord, kindMeta, index.KindTime, index.KindKey, index.KindTag} {
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
