package cache

import (
	"slices"
	"testing"
)

func contains(c *Clock, k uint64) bool {
	hit := []bool{false}
	c.Lookup([]uint64{k}, hit)
	return hit[0]
}

// present lists which of keys are cached without touching reference bits.
func present(c *Clock, keys ...uint64) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint64
	for _, k := range keys {
		if _, ok := c.index[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

func TestLookupAndAdd(t *testing.T) {
	c := New(4)
	keys := []uint64{10, 20, 30}
	hit := make([]bool, len(keys))
	if n := c.Lookup(keys, hit); n != 0 || slices.Contains(hit, true) {
		t.Fatalf("empty cache: %d hits %v", n, hit)
	}
	c.Add(10, 20, 10) // a repeat is not a second entry
	if c.Len() != 2 {
		t.Fatalf("Len = %d, want 2", c.Len())
	}
	if n := c.Lookup(keys, hit); n != 2 || !slices.Equal(hit, []bool{true, true, false}) {
		t.Fatalf("after Add(10, 20): %d hits %v", n, hit)
	}
}

// TestClockEviction walks the CLOCK algorithm step by step: the hand clears set
// reference bits and evicts the first entry whose bit is clear.
func TestClockEviction(t *testing.T) {
	c := New(3)
	c.Add(1, 2, 3)
	if !contains(c, 1) { // 1 gets its reference bit
		t.Fatal("1 missing")
	}
	c.Add(4) // hand at 1: second chance, bit cleared; 2 is evicted
	if got := present(c, 1, 2, 3, 4); !slices.Equal(got, []uint64{1, 3, 4}) {
		t.Fatalf("after adding 4: %v, want [1 3 4]", got)
	}
	c.Add(5) // hand at 3 (clear bit): evicted
	if got := present(c, 1, 3, 4, 5); !slices.Equal(got, []uint64{1, 4, 5}) {
		t.Fatalf("after adding 5: %v, want [1 4 5]", got)
	}
	c.Add(6) // hand back at 1, whose bit was cleared by the first sweep: evicted now
	if got := present(c, 1, 4, 5, 6); !slices.Equal(got, []uint64{4, 5, 6}) {
		t.Fatalf("after adding 6: %v, want [4 5 6]", got)
	}
	// All bits set: the hand clears them all and evicts where it started.
	hit := make([]bool, 3)
	c.Lookup([]uint64{4, 5, 6}, hit)
	c.Add(7)
	if got := present(c, 4, 5, 6, 7); len(got) != 3 || !slices.Contains(got, 7) {
		t.Fatalf("after adding 7 with every bit set: %v", got)
	}
}

func TestBound(t *testing.T) {
	for _, capacity := range []int{1, 7, 1000} {
		c := New(capacity)
		for k := range uint64(5 * capacity) {
			c.Add(k)
			if k%3 == 0 {
				contains(c, k/2)
			}
			if c.Len() > capacity {
				t.Fatalf("cap %d: %d entries after %d adds", capacity, c.Len(), k+1)
			}
		}
		if c.Len() != capacity || len(c.index) != capacity {
			t.Fatalf("cap %d: Len %d, index %d; want both full", capacity, c.Len(), len(c.index))
		}
		// The index and the ring agree.
		for slot, k := range c.keys {
			if c.index[k] != int32(slot) {
				t.Fatalf("cap %d: key %d in slot %d, index says %d", capacity, k, slot, c.index[k])
			}
		}
	}
}

// TestHotKeysSurviveAScan is why CLOCK beats FIFO for links: a stream of one-time URLs
// (a new site's pages) does not push out the URLs that are linked again and again.
func TestHotKeysSurviveAScan(t *testing.T) {
	c := New(100)
	hot := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	c.Add(hot...)
	hit := make([]bool, len(hot))
	for cold := uint64(1000); cold < 11000; cold++ {
		c.Add(cold)
		if cold%20 == 0 {
			if n := c.Lookup(hot, hit); n != len(hot) {
				t.Fatalf("after %d cold keys only %d of %d hot keys cached", cold-1000, n, len(hot))
			}
		}
	}
}

func TestKeyStable(t *testing.T) {
	// XXH64 seed 0, the same h1 the Bloom filter uses (bloom.TestHashesStable's golden value).
	if got := Key("https://example.com/"); got != 0xa40dbfe31cfba1cf {
		t.Fatalf("Key = %#x", got)
	}
}

func BenchmarkLookupHit(b *testing.B) {
	c := New(50_000)
	keys := make([]uint64, 256)
	for i := range keys {
		keys[i] = Key(string(rune(i)))
	}
	c.Add(keys...)
	hit := make([]bool, len(keys))
	for b.Loop() {
		c.Lookup(keys, hit)
	}
	b.ReportMetric(float64(b.N*len(keys))/b.Elapsed().Seconds(), "lookups/s")
}
