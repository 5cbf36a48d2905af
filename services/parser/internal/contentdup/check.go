package contentdup

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/parser/internal/simhash"
)

// Check's two phases: the lookup of every page's keys, then the decision and the
// inserts of the originals.

// pageParts is the partitions of one page's keys and, for each, the mask of its bands
// whose bucket lies there (bit b for band b).
type pageParts struct {
	n     int
	part  [2 + simhash.Bands]int
	bands [2 + simhash.Bands]int
}

func (pp *pageParts) add(p int) int {
	for j := range pp.n {
		if pp.part[j] == p {
			return j
		}
	}
	pp.part[pp.n], pp.bands[pp.n] = p, 0
	pp.n++
	return pp.n - 1
}

// found is what the lookup found for one page.
type found struct {
	first   string      // URL stored under its digest before the call ("" none)
	cands   []candidate // the best original of each partition holding some of its buckets
	present int         // mask of the bands whose bucket holds its SimHash already
	near    int         // mask of the bands whose bucket the batch could fill to BucketCap
}

// candidate is an indexed original within MaxDistance.
type candidate struct {
	dist int
	seq  int64
	url  string
}

// Check classifies pages (in order, so an earlier page of the batch is the original of a
// later one) and indexes the originals, in two pipelined round trips (one when no page
// is a new original). A Redis failure is returned wrapped; the batch is then safe to
// retry: a page's own entries never count against it and stored entries are kept.
func (ix *Index) Check(ctx context.Context, pages []Page) (Result, error) {
	if len(pages) == 0 {
		return Result{}, nil
	}
	if len(pages) > MaxBatch {
		return Result{}, fmt.Errorf("contentdup: %d pages in one batch, want at most %d", len(pages), MaxBatch)
	}
	fs, seq, err := ix.lookup(ctx, pages)
	if err != nil {
		return Result{}, fmt.Errorf("contentdup: check %d pages: %w", len(pages), err)
	}
	res, inserts := ix.decide(pages, fs, seq)
	if len(inserts) == 0 {
		return res, nil
	}
	if err := runPipeline(ctx, ix.rdb, inserts, nil); err != nil {
		return Result{}, fmt.Errorf("contentdup: index the originals of %d pages: %w", len(pages), err)
	}
	for _, c := range inserts {
		n, err := c.cmd.Int64()
		if err != nil {
			return Result{}, fmt.Errorf("contentdup: insert reply: %w", err)
		}
		res.FullBuckets += int(n)
	}
	return res, nil
}

// lookup is the first phase: what each page's keys hold, and the first of the seq
// numbers reserved for the pages that may become originals.
func (ix *Index) lookup(ctx context.Context, pages []Page) ([]found, int64, error) {
	cs := ix.newCalls(lookupScript, ix.opts.MaxDistance, ix.opts.BucketCap, ExactBucketCap(ix.opts.ExactCapacity))
	reserve := 0
	for i, pg := range pages {
		var pp pageParts
		dig, old := -1, -1
		if pg.Digest != "" {
			dig = pp.add(ix.ExactPart(pg.Digest))
			if pg.Replaces != "" && pg.Replaces != pg.Digest {
				old = pp.add(ix.ExactPart(pg.Replaces))
			}
		}
		sh := ""
		if pg.Near {
			sh = simhash.Format(pg.SimHash)
			for b := range simhash.Bands {
				pp.bands[pp.add(ix.BandPart(b, pg.SimHash))] |= 1 << b
			}
			if pg.Store {
				reserve++
			}
		}
		for j := range pp.n {
			d, r := "", ""
			if j == dig {
				d = exactArg(pg.Digest)
			}
			if j == old {
				r = exactArg(pg.Replaces)
			}
			cs.add(pp.part[j], i, pg.URL, d, storeArg(pg.Store), sh, pp.bands[j], r)
		}
	}
	var incr *redis.IntCmd
	err := runPipeline(ctx, ix.rdb, cs.list(), func(pipe redis.Pipeliner) {
		if reserve > 0 {
			incr = pipe.IncrBy(ctx, ix.seq, int64(reserve))
		}
	})
	if err != nil {
		return nil, 0, err
	}
	var seq int64
	if incr != nil {
		top, err := incr.Result()
		if err != nil {
			return nil, 0, fmt.Errorf("reserve %d of %s: %w", reserve, ix.seq, err)
		}
		seq = top - int64(reserve) + 1
	}
	fs := make([]found, len(pages))
	for _, c := range cs.order {
		if err := c.parseLookup(fs); err != nil {
			return nil, 0, err
		}
	}
	return fs, seq, nil
}

// exactArg is digest's entry as the lookup script takes it, "<bucket>:<field>".
func exactArg(digest string) string {
	bucket, field := exactSlot(digest)
	return bucket + ":" + field
}

func storeArg(store bool) string {
	if store {
		return "1"
	}
	return "0"
}

// parseLookup reads the reply of lua/lookup.lua into fs.
func (c *partCall) parseLookup(fs []found) error {
	v, err := c.cmd.Slice()
	if err != nil {
		return fmt.Errorf("lookup reply: %w", err)
	}
	if len(v) != 5*len(c.pages) {
		return fmt.Errorf("lookup reply of %d values for %d pages", len(v), len(c.pages))
	}
	for j, p := range c.pages {
		e := v[5*j : 5*j+5]
		first, ok0 := e[0].(string)
		dist, ok1 := e[1].(int64)
		seq, ok2 := e[2].(int64)
		url, ok3 := e[3].(string)
		present, ok4 := e[4].(int64)
		if !ok0 || !ok1 || !ok2 || !ok3 || !ok4 || dist < -1 || dist > simhash.MaxDistance {
			return fmt.Errorf("lookup reply for page %d: %v", p, e)
		}
		f := &fs[p]
		if first != "" {
			f.first = first
		}
		if dist >= 0 {
			f.cands = append(f.cands, candidate{dist: int(dist), seq: seq, url: url})
		}
		f.present |= int(present) & (1<<simhash.Bands - 1)
		f.near |= int(present) >> simhash.Bands
	}
	return nil
}

// decide is the second phase, in Go: each page's verdict in batch order, and the insert
// calls adding the new originals' band entries, one per partition.
func (ix *Index) decide(pages []Page, fs []found, seq int64) (Result, []*call) {
	res := Result{Verdicts: make([]Verdict, len(pages))}
	type original struct {
		h   uint64
		url string
	}
	var batch []original // originals decided earlier in this batch
	cs := ix.newCalls(insertScript, ix.opts.BucketCap)
	for i, pg := range pages {
		f := &fs[i]
		if f.first != "" && f.first != pg.URL {
			res.Verdicts[i] = Verdict{Kind: Exact, Of: f.first}
			continue
		}
		if !pg.Near {
			continue
		}
		best, bestSeq, bestURL := 0, int64(0), ""
		for _, c := range f.cands {
			if bestURL == "" || c.dist < best || c.dist == best && c.seq < bestSeq {
				best, bestSeq, bestURL = c.dist, c.seq, c.url
			}
		}
		// Batch originals come after the indexed ones in seq, and in batch order among
		// themselves, so only a strictly closer one wins.
		for _, o := range batch {
			if o.url == pg.URL {
				continue
			}
			if d := bits.OnesCount64(o.h ^ pg.SimHash); d <= ix.opts.MaxDistance && (bestURL == "" || d < best) {
				best, bestURL = d, o.url
			}
		}
		if bestURL != "" {
			res.Verdicts[i] = Verdict{Kind: Near, Of: bestURL, Distance: best}
			continue
		}
		if !pg.Store {
			continue
		}
		batch = append(batch, original{pg.SimHash, pg.URL})
		if f.present == 1<<simhash.Bands-1 {
			continue
		}
		var pp pageParts
		for b := range simhash.Bands {
			if f.present&(1<<b) == 0 {
				pp.bands[pp.add(ix.BandPart(b, pg.SimHash))] |= 1<<b | f.near&(1<<b)<<simhash.Bands
			}
		}
		val, sh := strconv.FormatInt(seq, 10)+" "+pg.URL, simhash.Format(pg.SimHash)
		seq++
		for j := range pp.n {
			cs.add(pp.part[j], i, sh, val, pp.bands[j])
		}
	}
	return res, cs.list()
}
