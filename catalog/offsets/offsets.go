// Package offsets keeps consumer groups' committed offsets in Pebble on one
// node: the store behind the Kafka front end's OffsetCommit and OffsetFetch
// (api/kafka.OffsetStore). Each commit is synced before it is acknowledged,
// so a consumer resumes where it left off after a restart (docs/kafka.md).
package offsets

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// Store is the Pebble store of committed offsets.
//
//	key:   "o/" group 0x00 topic 0x00 partition(u32 BE)
//	value: {"offset": N, "leader_epoch": E, "metadata": "..."}
type Store struct{ db *pebble.DB }

// Committed is one partition's committed position.
type Committed struct {
	Offset      int64  `json:"offset"`
	LeaderEpoch int32  `json:"leader_epoch"`
	Metadata    string `json:"metadata,omitempty"`
}

// Open opens (creating) the committed-offsets store in dir; an empty dir
// keeps them in memory, for tests.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return OpenFS(vfs.NewMem(), dir)
	}
	return OpenFS(vfs.Default, dir)
}

// OpenFS opens (creating) the committed-offsets store in dir of fs, so
// tests can record or fail its file operations.
func OpenFS(fs vfs.FS, dir string) (*Store, error) {
	opts := &pebble.Options{FS: fs, Logger: quietLogger{}}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("committed offsets in %q: %w", dir, err)
	}
	return &Store{db: db}, nil
}

// Close closes the store.
func (o *Store) Close() error { return o.db.Close() }

func offsetKey(group, topic string, partition int32) []byte {
	k := append([]byte("o/"+group+"\x00"+topic+"\x00"), 0, 0, 0, 0)
	binary.BigEndian.PutUint32(k[len(k)-4:], uint32(partition))
	return k
}

// Commit records group's positions, all in one synced batch.
func (o *Store) Commit(group string, offsets map[string]map[int32]Committed) error {
	b := o.db.NewBatch()
	defer b.Close()
	for topic, parts := range offsets {
		for p, c := range parts {
			v, err := json.Marshal(c)
			if err != nil {
				return err
			}
			if err := b.Set(offsetKey(group, topic, p), v, nil); err != nil {
				return err
			}
		}
	}
	return b.Commit(pebble.Sync)
}

// Get returns a partition's committed position, if there is one.
func (o *Store) Get(group, topic string, partition int32) (Committed, bool, error) {
	v, closer, err := o.db.Get(offsetKey(group, topic, partition))
	if errors.Is(err, pebble.ErrNotFound) {
		return Committed{}, false, nil
	}
	if err != nil {
		return Committed{}, false, err
	}
	defer closer.Close()
	var c Committed
	if err := json.Unmarshal(v, &c); err != nil {
		return Committed{}, false, fmt.Errorf("committed offset of %s %s/%d: %w", group, topic, partition, err)
	}
	return c, true, nil
}

// Group returns every position group has committed, by topic and partition.
func (o *Store) Group(group string) (map[string]map[int32]Committed, error) {
	prefix := []byte("o/" + group + "\x00")
	it, err := o.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: append(prefix[:len(prefix)-1:len(prefix)-1], 1)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[string]map[int32]Committed{}
	for it.First(); it.Valid(); it.Next() {
		rest := it.Key()[len(prefix):]
		if len(rest) < 5 || rest[len(rest)-5] != 0 {
			return nil, fmt.Errorf("committed offsets: bad key %q", it.Key())
		}
		topic, p := string(rest[:len(rest)-5]), int32(binary.BigEndian.Uint32(rest[len(rest)-4:]))
		var c Committed
		if err := json.Unmarshal(it.Value(), &c); err != nil {
			return nil, fmt.Errorf("committed offset of %s %s/%d: %w", group, topic, p, err)
		}
		if out[topic] == nil {
			out[topic] = map[int32]Committed{}
		}
		out[topic][p] = c
	}
	return out, it.Error()
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// Delete removes the named partitions' positions of group, in one synced
// batch (Kafka's OffsetDelete).
func (o *Store) Delete(group string, partitions map[string][]int32) error {
	b := o.db.NewBatch()
	defer b.Close()
	for topic, parts := range partitions {
		for _, p := range parts {
			if err := b.Delete(offsetKey(group, topic, p), nil); err != nil {
				return err
			}
		}
	}
	return b.Commit(pebble.Sync)
}

// DeleteGroup removes every position group has committed (Kafka's
// DeleteGroups).
func (o *Store) DeleteGroup(group string) error {
	prefix := []byte("o/" + group + "\x00")
	return o.db.DeleteRange(prefix, append(prefix[:len(prefix)-1:len(prefix)-1], 1), pebble.Sync)
}

// Groups lists the groups with committed positions, in order. It skips
// from one group to the next rather than reading every position.
func (o *Store) Groups() ([]string, error) {
	it, err := o.db.NewIter(&pebble.IterOptions{LowerBound: []byte("o/"), UpperBound: []byte("o0")})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []string
	for valid := it.First(); valid; {
		rest := it.Key()[2:]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return nil, fmt.Errorf("committed offsets: bad key %q", it.Key())
		}
		group := string(rest[:i])
		out = append(out, group)
		valid = it.SeekGE([]byte("o/" + group + "\x01"))
	}
	return out, it.Error()
}
