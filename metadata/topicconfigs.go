package metadata

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"strata/catalog"
)

// ConfigStore keeps a single node's topic configs (in a cluster they are
// in the topic's etcd record). cmd gives the catalog's topic records behind
// an in-memory copy (CatalogTopics); nil keeps them in memory (tests).
type ConfigStore interface {
	// Configs is a topic's own configs (nil: none). Produce asks on every
	// request, so it answers from memory.
	Configs(topic string) map[string]string
	// SetConfigs replaces a topic's configs with what change makes of the
	// current ones (which it must not modify), durably; nil forgets them.
	SetConfigs(topic string, change func(map[string]string) (map[string]string, error)) error
}

type memoryConfigs struct {
	mu sync.Mutex
	m  map[string]map[string]string
}

func (t *memoryConfigs) Configs(topic string) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[topic]
}

func (t *memoryConfigs) SetConfigs(topic string, change func(map[string]string) (map[string]string, error)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	next, err := change(t.m[topic])
	if err != nil {
		return err
	}
	if t.m == nil {
		t.m = map[string]map[string]string{}
	}
	if len(next) == 0 {
		delete(t.m, topic)
	} else {
		t.m[topic] = next
	}
	return nil
}

// TopicRecords is the part of the catalog that keeps topic records.
type TopicRecords interface {
	PutTopic(t catalog.Topic) (catalog.Topic, error)
	Topic(name string) (catalog.Topic, error)
	Topics() ([]catalog.Topic, error)
	DeleteTopic(name string) error
}

// CatalogTopics is a single node's ConfigStore: the catalog's topic records,
// with a copy of all of them in memory for reads (Produce asks on every
// request; the engine and the tiering job on every roll check and pass).
// Reads take the copy without waiting for a write in progress (a synced
// catalog write); writes are one at a time.
type CatalogTopics struct {
	cat   TopicRecords
	write sync.Mutex // orders writes
	m     atomic.Pointer[map[string]catalog.Topic]
}

// NewCatalogTopics reads every topic record once.
func NewCatalogTopics(cat TopicRecords) (*CatalogTopics, error) {
	all, err := cat.Topics()
	if err != nil {
		return nil, fmt.Errorf("reading topic configs: %w", err)
	}
	m := map[string]catalog.Topic{}
	for _, tp := range all {
		m[tp.Name] = tp
	}
	t := &CatalogTopics{cat: cat}
	t.m.Store(&m)
	return t, nil
}

// Configs is a topic's own configs; the map is never modified.
func (t *CatalogTopics) Configs(topic string) map[string]string {
	return (*t.m.Load())[topic].Configs
}

// SetConfigs writes the record over the version read; nil (or none)
// deletes it. If the catalog holds a newer version than the copy (only
// after a write whose outcome was unknown: this process is its only
// writer), the record is read again and change applied to it again.
func (t *CatalogTopics) SetConfigs(topic string, change func(map[string]string) (map[string]string, error)) error {
	t.write.Lock()
	defer t.write.Unlock()
	cur, had := (*t.m.Load())[topic]
	for attempt := 0; ; attempt++ {
		written, deleted, err := t.setOnce(topic, cur, had, change)
		if (errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrExists)) && attempt == 0 {
			fresh, gerr := t.cat.Topic(topic)
			switch {
			case gerr == nil:
				cur, had = fresh, true
			case errors.Is(gerr, catalog.ErrNotFound):
				cur, had = catalog.Topic{}, false
			default:
				return fmt.Errorf("topic %s: %w", topic, gerr)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("topic %s: %w", topic, err)
		}
		m := maps.Clone(*t.m.Load())
		if deleted {
			delete(m, topic)
		} else {
			m[topic] = written
		}
		t.m.Store(&m)
		return nil
	}
}

func (t *CatalogTopics) setOnce(topic string, cur catalog.Topic, had bool, change func(map[string]string) (map[string]string, error)) (written catalog.Topic, deleted bool, err error) {
	next, err := change(cur.Configs)
	if err != nil {
		return catalog.Topic{}, false, err
	}
	if len(next) == 0 {
		if !had {
			return catalog.Topic{}, true, nil
		}
		return catalog.Topic{}, true, t.cat.DeleteTopic(topic)
	}
	rec := cur
	if !had {
		rec = catalog.Topic{Name: topic, Created: time.Now().UTC()}
	}
	rec.Configs = maps.Clone(next)
	written, err = t.cat.PutTopic(rec)
	return written, false, err
}
