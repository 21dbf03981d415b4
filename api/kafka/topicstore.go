package kafka

import (
	"errors"
	"fmt"
	"maps"
	"sync"
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
type CatalogTopics struct {
	cat TopicRecords
	mu  sync.Mutex // orders writes; reads take the copy
	m   map[string]catalog.Topic
}

// NewCatalogTopics reads every topic record once.
func NewCatalogTopics(cat TopicRecords) (*CatalogTopics, error) {
	all, err := cat.Topics()
	if err != nil {
		return nil, fmt.Errorf("reading topic configs: %w", err)
	}
	t := &CatalogTopics{cat: cat, m: map[string]catalog.Topic{}}
	for _, tp := range all {
		t.m[tp.Name] = tp
	}
	return t, nil
}

// Configs is a topic's own configs; the map is never modified.
func (t *CatalogTopics) Configs(topic string) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[topic].Configs
}

// SetConfigs writes the record over the version read; nil (or none)
// deletes it.
func (t *CatalogTopics) SetConfigs(topic string, change func(map[string]string) (map[string]string, error)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, had := t.m[topic]
	next, err := change(cur.Configs)
	if err != nil {
		return err
	}
	if len(next) == 0 {
		if !had {
			return nil
		}
		if err := t.cat.DeleteTopic(topic); err != nil {
			return err
		}
		delete(t.m, topic)
		return nil
	}
	rec := cur
	if !had {
		rec = catalog.Topic{Name: topic, Created: time.Now().UTC()}
	}
	rec.Configs = maps.Clone(next)
	written, err := t.cat.PutTopic(rec)
	if errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrExists) {
		// The copy is behind the catalog (only this process writes it, so
		// only after a failed write): read it again and retry once.
		if fresh, gerr := t.cat.Topic(topic); gerr == nil {
			rec.Version = fresh.Version
		} else if errors.Is(gerr, catalog.ErrNotFound) {
			rec.Version = 0
		}
		written, err = t.cat.PutTopic(rec)
	}
	if err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	t.m[topic] = written
	return nil
}
