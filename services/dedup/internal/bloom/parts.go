package bloom

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/bloomhash"
)

// Parts is the seen filter split into sub-filters (TRAWL_BLOOM_PARTS), each a scalable
// filter of its own under its own hash tag, so that on Redis Cluster the filter's memory
// and its test-and-set traffic spread over the masters instead of landing on the one node
// that owns a single slot. A URL lives in exactly one part (Of).
type Parts []*Filter

// Of returns the index of the part that holds url.
func (ps Parts) Of(url string) int { return bloomhash.Part(url, len(ps)) }

// Init makes every part usable (Filter.Init), after checking that Redis holds no filter
// of the other layout under the same prefix: a filter made with one part lives under
// {dedup}, one made with several under {dedup:<i>}, and starting with the other count
// would silently begin an empty filter and crawl every known URL again.
func (ps Parts) Init(ctx context.Context, c redis.Cmdable) error {
	f := ps[0]
	other := bloomhash.MetaKey(f.prefix, bloomhash.Tag(0, 2))
	if len(ps) > 1 {
		other = bloomhash.MetaKey(f.prefix, bloomhash.Tag(0, 1))
	}
	n, err := c.Exists(ctx, other).Result()
	if err != nil {
		return fmt.Errorf("bloom: check %s: %w", other, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %s exists, a filter with another number of parts than the configured %d (TRAWL_BLOOM_PARTS); "+
			"restore the setting, or delete that filter's keys to start an empty one", ErrMismatch, other, len(ps))
	}
	for _, f := range ps {
		if err := f.Init(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// Load reloads every part's layers.
func (ps Parts) Load(ctx context.Context, c redis.Cmdable) error {
	for _, f := range ps {
		if err := f.Load(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// Layers is the most layers any part has (parts fill at about the same pace).
func (ps Parts) Layers() int {
	n := 0
	for _, f := range ps {
		n = max(n, len(f.Layers()))
	}
	return n
}

// Bits is the bits of every part's layers.
func (ps Parts) Bits() uint64 {
	var b uint64
	for _, f := range ps {
		for _, l := range f.Layers() {
			b += l.M
		}
	}
	return b
}

// Bytes is the Redis memory of every part's layers.
func (ps Parts) Bytes() uint64 {
	var b uint64
	for _, f := range ps {
		b += f.Bytes()
	}
	return b
}

// NextBytes is the memory the next layer of every part will take.
func (ps Parts) NextBytes() uint64 {
	var b uint64
	for _, f := range ps {
		b += f.NextLayer().Bytes()
	}
	return b
}

// TestAndSet is Filter.TestAndSet over the parts: each URL goes to its part, the parts'
// calls run concurrently, and the indexes of the new URLs come back ascending.
func (ps Parts) TestAndSet(ctx context.Context, c redis.Cmdable, urls []string) ([]int, error) {
	return ps.each(urls, func(f *Filter, sub []string) ([]int, error) { return f.TestAndSet(ctx, c, sub) })
}

// Contains is Filter.Contains over the parts.
func (ps Parts) Contains(ctx context.Context, c redis.Cmdable, urls []string) ([]int, error) {
	return ps.each(urls, func(f *Filter, sub []string) ([]int, error) { return f.Contains(ctx, c, sub) })
}

func (ps Parts) each(urls []string, fn func(*Filter, []string) ([]int, error)) ([]int, error) {
	if len(ps) == 1 {
		return fn(ps[0], urls)
	}
	sub := make([][]string, len(ps))
	orig := make([][]int, len(ps)) // index into urls of each sub entry
	for i, u := range urls {
		p := ps.Of(u)
		sub[p], orig[p] = append(sub[p], u), append(orig[p], i)
	}
	res := make([][]int, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for p := range ps {
		if len(sub[p]) == 0 {
			continue
		}
		wg.Go(func() { res[p], errs[p] = fn(ps[p], sub[p]) })
	}
	wg.Wait()
	var out []int
	for p := range ps {
		if errs[p] != nil {
			return nil, errs[p]
		}
		for _, j := range res[p] {
			out = append(out, orig[p][j])
		}
	}
	slices.Sort(out)
	return out, nil
}

// ReadStats measures every part (ReadStats) and sums them; Fill is the mean of the
// parts' newest layers' fill, weighted by their bits.
func (ps Parts) ReadStats(ctx context.Context, c redis.UniversalClient) (Stats, error) {
	var st Stats
	var fillBits, bits float64
	for _, f := range ps {
		s, err := f.ReadStats(ctx, c)
		if err != nil {
			return Stats{}, err
		}
		ls := f.Layers()
		m := float64(ls[len(ls)-1].M)
		fillBits += s.Fill * m
		bits += m
		st.Layers = max(st.Layers, s.Layers)
		st.Capacity += s.Capacity
		st.Count += s.Count
		st.Bytes += s.Bytes
		st.NextBytes += s.NextBytes
	}
	if bits > 0 {
		st.Fill = fillBits / bits
	}
	return st, nil
}

// WriteStats stores st in the one hash StatsKey.
func (ps Parts) WriteStats(ctx context.Context, c redis.UniversalClient, st Stats) error {
	return ps[0].WriteStats(ctx, c, st)
}
