package kafka

import (
	"maps"
	"slices"
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
	// Delete removes the named partitions' positions of group (OffsetDelete).
	Delete(group string, partitions map[string][]int32) error
	// DeleteGroup removes every position group has committed (DeleteGroups).
	DeleteGroup(group string) error
	// Groups lists the groups with committed positions, in order: a group
	// whose members are gone is still listed, as Kafka lists it, Empty.
	Groups() ([]string, error)
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

func (m *memoryOffsets) Delete(group string, partitions map[string][]int32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	for topic, parts := range partitions {
		for _, p := range parts {
			delete(g[topic], p)
		}
		if len(g[topic]) == 0 {
			delete(g, topic)
		}
	}
	if len(g) == 0 {
		delete(m.groups, group)
	}
	return nil
}

func (m *memoryOffsets) DeleteGroup(group string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.groups, group)
	return nil
}

func (m *memoryOffsets) Groups() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.groups)), nil
}
