package tiering

import (
	"container/list"
	"sync"
)

// lru is a cache bounded by the total weight (bytes) of what it holds.
type lru[K comparable, V any] struct {
	mu     sync.Mutex
	max    int64
	weight int64
	order  *list.List // front: most recently used
	items  map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	key    K
	value  V
	weight int64
}

func newLRU[K comparable, V any](maxWeight int64) *lru[K, V] {
	return &lru[K, V]{max: maxWeight, order: list.New(), items: map[K]*list.Element{}}
}

func (c *lru[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruEntry[K, V]).value, true
	}
	var zero V
	return zero, false
}

func (c *lru[K, V]) add(k K, v V, weight int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		old := e.Value.(*lruEntry[K, V])
		c.weight += weight - old.weight
		old.value, old.weight = v, weight
		c.order.MoveToFront(e)
	} else {
		c.items[k] = c.order.PushFront(&lruEntry[K, V]{k, v, weight})
		c.weight += weight
	}
	for c.weight > c.max && c.order.Len() > 1 {
		last := c.order.Back()
		ent := last.Value.(*lruEntry[K, V])
		c.order.Remove(last)
		delete(c.items, ent.key)
		c.weight -= ent.weight
	}
}

// find returns the first value for which match is true (most recent first).
func (c *lru[K, V]) find(match func(K, V) bool) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.order.Front(); e != nil; e = e.Next() {
		ent := e.Value.(*lruEntry[K, V])
		if match(ent.key, ent.value) {
			c.order.MoveToFront(e)
			return ent.value, true
		}
	}
	var zero V
	return zero, false
}
