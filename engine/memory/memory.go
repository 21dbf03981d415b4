// Package memory is the in-memory engine (docs/design.md): maps by offset, key,
// tag and timestamp, microsecond appends, nothing kept across a restart.
// Each shard holds at most MaxRecords; older records are evicted and the
// low watermark moves past them.
package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"strata/engine/leaderepoch"
	"strata/engine/record"
	"strata/engine/store"
)

// Store is the memory engine.
type Store struct {
	maxRecords int

	mu     sync.RWMutex
	shards map[string]*shard
	closed bool
}

type shard struct {
	mu   sync.RWMutex
	low  uint64          // offset of recs[0]
	recs []record.Record // offsets low, low+1, ...
	keys map[string][]uint64
	tags map[string][]uint64
	// hw is the high watermark once managed (store.Replica); until then it
	// follows the log end.
	hw      uint64
	managed bool
	// epochs is the leader-epoch history (store.Epochs); retention trims it
	// when it is read.
	epochs leaderepoch.History
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Replica = (*Store)(nil)
	_ store.Starter = (*Store)(nil)
	_ store.Epochs  = (*Store)(nil)
)

// New returns an empty store keeping at most maxRecords per shard (0: 1,000,000).
func New(maxRecords int) *Store {
	if maxRecords <= 0 {
		maxRecords = 1_000_000
	}
	return &Store{maxRecords: maxRecords, shards: map[string]*shard{}}
}

func (s *Store) shard(name string) (*shard, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
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

// CreateShardAt makes an empty shard whose first offset is start.
func (s *Store) CreateShardAt(ctx context.Context, name string, start uint64) error {
	if err := store.ValidateShard(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	if _, ok := s.shards[name]; ok {
		return fmt.Errorf("shard %q: %w", name, store.ErrShardExists)
	}
	s.shards[name] = &shard{low: start, hw: start, keys: map[string][]uint64{}, tags: map[string][]uint64{}}
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
	for i := range recs {
		if size := record.Size(&recs[i]); size > record.MaxSize {
			return 0, fmt.Errorf("shard %s: record %d is %d bytes, more than the %d allowed", name, i, size, record.MaxSize)
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	base := sh.end()
	if at {
		if err := store.CheckAppendAt(name, recs, base); err != nil {
			return 0, err
		}
	}
	for i := range recs {
		r := clone(recs[i])
		r.Offset = base + uint64(i)
		recs[i].Offset = r.Offset
		sh.recs = append(sh.recs, r)
		if r.Key != nil {
			sh.keys[string(r.Key)] = append(sh.keys[string(r.Key)], r.Offset)
		}
		for _, t := range r.Tags {
			sh.tags[t] = append(sh.tags[t], r.Offset)
		}
	}
	if over := len(sh.recs) - s.maxRecords; over > 0 {
		sh.evict(over)
	}
	return base, nil
}

// evict drops the n oldest records and their index entries.
func (sh *shard) evict(n int) {
	for _, r := range sh.recs[:n] {
		if r.Key != nil {
			popFront(sh.keys, string(r.Key))
		}
		for _, t := range r.Tags {
			popFront(sh.tags, t)
		}
	}
	sh.recs = append([]record.Record(nil), sh.recs[n:]...)
	sh.low += uint64(n)
}

func popFront(m map[string][]uint64, k string) {
	if l := m[k]; len(l) <= 1 {
		delete(m, k)
	} else {
		m[k] = l[1:]
	}
}

func popBack(m map[string][]uint64, k string) {
	if l := m[k]; len(l) <= 1 {
		delete(m, k)
	} else {
		m[k] = l[:len(l)-1]
	}
}

func clone(r record.Record) record.Record {
	c := r
	c.Key = bytes.Clone(r.Key)
	c.Value = bytes.Clone(r.Value)
	c.ProtocolData = bytes.Clone(r.ProtocolData)
	if r.Headers != nil {
		c.Headers = make([]record.Header, len(r.Headers))
		for i, h := range r.Headers {
			c.Headers[i] = record.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
	}
	if r.Tags != nil {
		c.Tags = append([]string(nil), r.Tags...)
	}
	return c
}

func (sh *shard) end() uint64 { return sh.low + uint64(len(sh.recs)) }

// watermarks is the readable range: up to the high watermark. Eviction may
// take the low watermark past a managed high watermark; nothing below low
// is left to show, so the high watermark is taken up with it.
func (sh *shard) watermarks() (uint64, uint64) {
	if !sh.managed {
		return sh.low, sh.end()
	}
	return sh.low, max(sh.hw, sh.low)
}

func (s *Store) Read(ctx context.Context, name string, offset uint64, b store.Budget) ([]record.Record, error) {
	return s.read(name, offset, b, false)
}

// ReadToLogEnd reads up to the log end, past the high watermark.
func (s *Store) ReadToLogEnd(ctx context.Context, name string, offset uint64, b store.Budget) ([]record.Record, error) {
	return s.read(name, offset, b, true)
}

func (s *Store) read(name string, offset uint64, b store.Budget, toEnd bool) ([]record.Record, error) {
	sh, err := s.shard(name)
	if err != nil {
		return nil, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	low, high := sh.watermarks()
	if toEnd {
		high = sh.end()
	}
	if offset < low || offset > high {
		return nil, &store.OutOfRangeError{Shard: name, Offset: offset, Low: low, High: high}
	}
	var out []record.Record
	used := 0
	for off := offset; off < high; off++ {
		r := &sh.recs[off-sh.low]
		size := record.Size(r)
		if !b.Take(len(out), used, size) {
			break
		}
		out = append(out, clone(*r))
		used += size
	}
	return out, nil
}

func (s *Store) OffsetForTime(ctx context.Context, name string, ts int64) (uint64, error) {
	sh, err := s.shard(name)
	if err != nil {
		return 0, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	low, high := sh.watermarks()
	for off := low; off < high; off++ {
		if sh.recs[off-sh.low].Timestamp >= ts {
			return off, nil
		}
	}
	return high, nil
}

func (s *Store) ReadByKey(ctx context.Context, name string, key []byte, from uint64, b store.Budget) ([]record.Record, error) {
	if key == nil {
		return nil, errors.New("read by key: the key is null")
	}
	return s.byIndex(name, func(sh *shard) []uint64 { return sh.keys[string(key)] }, from, b)
}

func (s *Store) ReadByTag(ctx context.Context, name string, tag string, from uint64, b store.Budget) ([]record.Record, error) {
	return s.byIndex(name, func(sh *shard) []uint64 { return sh.tags[tag] }, from, b)
}

func (s *Store) byIndex(name string, offsets func(*shard) []uint64, from uint64, b store.Budget) ([]record.Record, error) {
	sh, err := s.shard(name)
	if err != nil {
		return nil, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	low, high := sh.watermarks()
	from = max(from, low)
	offs := offsets(sh)
	var out []record.Record
	used := 0
	for _, off := range offs[sort.Search(len(offs), func(i int) bool { return offs[i] >= from }):] {
		if off >= high {
			break
		}
		r := &sh.recs[off-sh.low]
		size := record.Size(r)
		if !b.Take(len(out), used, size) {
			break
		}
		out = append(out, clone(*r))
		used += size
	}
	return out, nil
}

func (s *Store) Watermarks(ctx context.Context, name string) (uint64, uint64, error) {
	sh, err := s.shard(name)
	if err != nil {
		return 0, 0, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	low, high := sh.watermarks()
	return low, high, nil
}

func (s *Store) DeleteBefore(ctx context.Context, name string, offset uint64) error {
	sh, err := s.shard(name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	low, high := sh.watermarks()
	if offset > high {
		return &store.OutOfRangeError{Shard: name, Offset: offset, Low: low, High: high}
	}
	if offset > low {
		sh.evict(int(offset - low))
	}
	return nil
}

// LogEnd returns the next offset to be written.
func (s *Store) LogEnd(ctx context.Context, name string) (uint64, error) {
	sh, err := s.shard(name)
	if err != nil {
		return 0, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.end(), nil
}

// SetHighWatermark raises the high watermark and makes it managed.
func (s *Store) SetHighWatermark(ctx context.Context, name string, hw uint64) error {
	sh, err := s.shard(name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if end := sh.end(); hw > end {
		return store.HighWatermarkPastLogEndError(name, hw, end)
	}
	_, cur := sh.watermarks()
	sh.hw, sh.managed = max(cur, hw), true
	return nil
}

// TruncateTo removes the records at and after end, which must not be
// below the high watermark.
func (s *Store) TruncateTo(ctx context.Context, name string, end uint64) error {
	sh, err := s.shard(name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, hw := sh.watermarks(); end < hw {
		return store.TruncateCommittedError(name, end, hw)
	}
	sh.epochs = sh.epochs.TruncateFromEnd(end)
	for sh.end() > end {
		r := sh.recs[len(sh.recs)-1]
		if r.Key != nil {
			popBack(sh.keys, string(r.Key))
		}
		for _, t := range r.Tags {
			popBack(sh.tags, t)
		}
		sh.recs[len(sh.recs)-1] = record.Record{}
		sh.recs = sh.recs[:len(sh.recs)-1]
	}
	return nil
}

// AssignEpoch records that the records from start on are written under
// epoch.
func (s *Store) AssignEpoch(ctx context.Context, name string, epoch int32, start uint64) error {
	sh, err := s.shard(name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if end := sh.end(); start > end {
		return store.EpochPastLogEndError(name, epoch, start, end)
	}
	h, _, err := sh.epochs.TruncateFromStart(sh.low).Assign(epoch, start)
	if err != nil {
		return fmt.Errorf("shard %s: %w", name, err)
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
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return append([]store.EpochEntry(nil), sh.epochs.TruncateFromStart(sh.low)...), nil
}

func (s *Store) Shards(ctx context.Context) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
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
	delete(s.shards, name)
	return nil
}

func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.shards = nil
	return nil
}

// LocalBytes is 0: the memory engine keeps nothing on disk.
func (s *Store) LocalBytes(name string) (int64, error) {
	if _, err := s.shard(name); err != nil {
		return 0, err
	}
	return 0, nil
}
