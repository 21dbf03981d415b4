package kafka

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"strata/catalog"
)

// TopicRecords is the part of the catalog that keeps topic records.
type TopicRecords interface {
	PutTopic(t catalog.Topic) (catalog.Topic, error)
	Topic(name string) (catalog.Topic, error)
	Topics() ([]catalog.Topic, error)
	DeleteTopic(name string) error
}

// CatalogTopics is a single node's TopicStore: the catalog's topic records,
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
