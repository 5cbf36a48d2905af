// Package cache is the dedup service's in-process cache of recently seen URLs, in front of
// the Bloom filter in Redis.
//
// Links are highly skewed: a few URLs (home pages, navigation, popular articles) are linked
// from very many pages. Broder, Najork and Wiener ("Efficient URL caching for World Wide
// Web crawling", WWW 2003) found that a cache of about 50,000 entries answers roughly 80 %
// of the seen tests of a large crawl, and that CLOCK is as good as LRU, random or
// static-popularity replacement at a fraction of LRU's cost. A hit here is a URL the
// Bloom filter already holds, so it is answered "seen" without a Redis round trip.
//
// # CLOCK
//
// Entries sit in a ring of slots, each with a reference bit. A hit sets the entry's bit.
// To make room, the hand sweeps the ring: a set bit is cleared (the entry gets a second
// chance) and the hand moves on; the first entry found with a clear bit is replaced. A new
// entry starts with its bit clear, so a URL seen once and never again is the first to go,
// while a URL hit at least once per sweep stays. A hit costs a map lookup and a bit write,
// with no list to reorder (LRU moves an entry on every hit).
//
// # Keys
//
// The cache stores the 64-bit XXH64 of the normalised URL, not the URL: 16 bytes of ring
// and ~20 bytes of map per entry instead of a string of ~80. Two URLs with the same hash
// would make the second one "seen": with n entries the chance per lookup is n/2^64 (about
// 3·10⁻¹⁵ at 50,000), negligible beside the Bloom filter's own 1 % false positives.
package cache

import (
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Key is the cache key of a normalised URL.
func Key(url string) uint64 { return xxhash.Sum64String(url) }

// Clock is a fixed-capacity CLOCK cache of keys. It is safe for concurrent use.
type Clock struct {
	mu    sync.Mutex
	index map[uint64]int32 // key → slot
	keys  []uint64         // slot → key; len(keys) is the number of entries
	ref   []bool           // slot → reference bit
	cap   int
	hand  int
}

// New returns an empty cache of at most capacity entries. capacity must be positive.
func New(capacity int) *Clock {
	if capacity < 1 {
		panic("cache: capacity must be positive")
	}
	return &Clock{
		index: make(map[uint64]int32, capacity),
		keys:  make([]uint64, 0, capacity),
		ref:   make([]bool, 0, capacity),
		cap:   capacity,
	}
}

// Len is the number of entries.
func (c *Clock) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.keys)
}

// Cap is the most entries the cache holds.
func (c *Clock) Cap() int { return c.cap }

// Lookup reports for each key whether it is cached (hit[i]), marking the hits referenced,
// and returns the number of hits. hit must be as long as keys.
func (c *Clock) Lookup(keys []uint64, hit []bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for i, k := range keys {
		slot, ok := c.index[k]
		hit[i] = ok
		if ok {
			c.ref[slot] = true
			n++
		}
	}
	return n
}

// Add inserts the keys that are not cached yet, evicting by CLOCK when full.
func (c *Clock) Add(keys ...uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if _, ok := c.index[k]; ok {
			continue
		}
		if len(c.keys) < c.cap {
			c.index[k] = int32(len(c.keys))
			c.keys = append(c.keys, k)
			c.ref = append(c.ref, false)
			continue
		}
		// Full: every pass over the ring clears bits, so this ends within two sweeps.
		for c.ref[c.hand] {
			c.ref[c.hand] = false
			c.hand = (c.hand + 1) % c.cap
		}
		delete(c.index, c.keys[c.hand])
		c.keys[c.hand] = k
		c.index[k] = int32(c.hand)
		c.hand = (c.hand + 1) % c.cap
	}
}
