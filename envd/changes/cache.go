package changes

import (
	"container/list"
	"sync"

	"github.com/envd-dev/envd/api/types"
)

// Cache keeps computed changes by the two images' digests and the limit.
// Images are content-addressed, so an entry never goes stale; the least
// recently used one is dropped past the size.
type Cache struct {
	mu    sync.Mutex
	size  int
	order *list.List // of *cacheEntry, most recent first
	byKey map[cacheKey]*list.Element
}

type cacheKey struct {
	before, after string
	limit         int
}

type cacheEntry struct {
	key cacheKey
	val types.Changes
}

// NewCache returns a cache of at most size entries.
func NewCache(size int) *Cache {
	return &Cache{size: max(1, size), order: list.New(), byKey: map[cacheKey]*list.Element{}}
}

// Get returns the changes from before to after (image digests) listed
// with limit, if computed before.
func (c *Cache) Get(before, after string, limit int) (types.Changes, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[cacheKey{before, after, limit}]
	if !ok {
		return types.Changes{}, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cacheEntry).val, true
}

// Put records computed changes.
func (c *Cache) Put(before, after string, limit int, val types.Changes) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{before, after, limit}
	if el, ok := c.byKey[k]; ok {
		el.Value.(*cacheEntry).val = val
		c.order.MoveToFront(el)
		return
	}
	c.byKey[k] = c.order.PushFront(&cacheEntry{key: k, val: val})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cacheEntry).key)
	}
}
