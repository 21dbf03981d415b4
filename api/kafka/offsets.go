package kafka

import (
	"sync"

	"strata/catalog/offsets"
)

// OffsetStore keeps consumer groups' committed offsets: Pebble on one node
// (catalog/offsets); a cluster puts them where a surviving node reads them.
// A commit is durable when Commit returns.
type OffsetStore interface {
	// Commit records group's positions, all or none.
	Commit(group string, positions map[string]map[int32]offsets.Committed) error
	// Group returns every position group has committed, by topic and partition.
	Group(group string) (map[string]map[int32]offsets.Committed, error)
}

// memoryOffsets serves a Server given no store: positions last as long as
// the process.
type memoryOffsets struct {
	mu     sync.Mutex
	groups map[string]map[string]map[int32]offsets.Committed
}

func (m *memoryOffsets) Commit(group string, positions map[string]map[int32]offsets.Committed) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groups == nil {
		m.groups = map[string]map[string]map[int32]offsets.Committed{}
	}
	g := m.groups[group]
	if g == nil {
		g = map[string]map[int32]offsets.Committed{}
		m.groups[group] = g
	}
	for topic, parts := range positions {
		if g[topic] == nil {
			g[topic] = map[int32]offsets.Committed{}
		}
		for p, c := range parts {
			g[topic][p] = c
		}
	}
	return nil
}

func (m *memoryOffsets) Group(group string) (map[string]map[int32]offsets.Committed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]map[int32]offsets.Committed{}
	for topic, parts := range m.groups[group] {
		out[topic] = map[int32]offsets.Committed{}
		for p, c := range parts {
			out[topic][p] = c
		}
	}
	return out, nil
}
