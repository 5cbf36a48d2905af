// Package contentdup finds exact and near-duplicate pages across the whole crawl: an index
// in Redis of the text digest and the SimHash of every original page, checked and updated
// for a whole batch of pages in at most two pipelined round trips.
//
// # Keys
//
// The index is split into P partitions (TRAWL_CONTENT_PARTS), each under its own Redis
// Cluster hash tag, so that on a cluster its memory and its traffic spread over the
// masters. With P = 1 the tag is {content}; with P > 1 partition i has the tag
// redisx.SpreadTag("content", i, P), "content:<i>:<j>", whose slots are evenly spaced over
// the slot space. An exact key lives in the partition picked by its digest, a band bucket
// in the one picked by (band index, band value) (ExactPart, BandPart). With the default
// prefix and P = 1:
//
//	trawl:{content}:exact:<text digest, 64 hex>   string: URL of the first page with that text
//	trawl:{content}:band:<i>:<4 hex>               hash: SimHash (16 hex) → "<seq> <URL>" of the
//	                                              originals whose band i (bits 63−16i … 48−16i)
//	                                              has that value; at most BucketCap fields
//	trawl:{content}:seq                            string: counter ordering the originals
//	trawl:{content}:meta                           string: simhash.HashVersion of the stored
//	                                              hashes, then " parts=<P>" when P > 1
//
// seq and meta stay under {content} whatever P is; seq takes one INCRBY per batch.
//
// # Rules
//
// Pages are taken in batch order, which is stream order, and the first writer wins:
//
//  1. Exact: the first page with a text digest stores its URL under exact:<digest>; a later
//     page with that digest and another URL is an exact duplicate of it. A URL fetched again
//     with another text (Page.Replaces) removes the key of its previous text if it holds
//     the URL: an exact key names a URL that still has that text, and there is at most one
//     per URL whose text was an original.
//  2. Near: a page that is not an exact duplicate reads the four buckets its SimHash bands
//     select. Two SimHashes within 3 bits agree on at least one of four 16-bit bands
//     (pigeonhole), so every indexed original within MaxDistance is among the candidates.
//     The originals of the same batch taken before it are candidates too. The closest one
//     within MaxDistance is the original (ties: the earliest indexed, an indexed original
//     before one of the batch); the page is a near duplicate of it.
//  3. A page that is neither is an original: its SimHash is added to its four buckets, each
//     capped at BucketCap entries so that a popular bucket costs bounded time. A full
//     bucket keeps its first entries; the page is still found through its other bands. A
//     bucket is counted again before an insert only when the lookup found it within a
//     batch's length of the cap, so two parsers inserting near the cap at the same moment
//     may take it a few entries past.
//
// Only originals are indexed, so a page is always reported as a duplicate of an original,
// never of another duplicate (no chains; a slow drift of edits is not followed). A match
// with the page's own URL is ignored: a redelivered page, or the same URL fetched again,
// is never a duplicate of itself. A page with Store false (noindex) is checked but never
// becomes an original, since a document an indexer must drop cannot stand in for others.
//
// # One batch
//
// Check runs in two phases. The lookup sends one script per partition the batch touches
// (lua/lookup.lua: the exact test-and-set of its digests, in batch order, and per page the
// closest original in its buckets there) and an INCRBY on seq reserving a number for every
// page that may become an original, all in one pipeline. Go then decides each page in batch
// order, and the insert sends one script per partition touched (lua/insert.lua) adding the
// originals' band entries, again in one pipeline; it is skipped when nothing is new. On a
// cluster a pipeline is split per master and the masters run in parallel.
//
// What this guarantees: the exact test of a digest is atomic (one script on the digest's
// partition), so of two pages with one text, processed at once by two parsers, exactly one
// is the original. The near test is not atomic across the two phases: two near-identical
// pages in the batches of two parsers at the same moment can both become originals (each
// looked before the other inserted). Within one batch the order is exact. A batch whose
// call failed is safe to retry: a page's own exact key and band entries never count
// against it, and the insert skips the band entries its lookup found present.
package contentdup

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/shared/redisx"
)

// Limits of the options.
const (
	MaxBucketCap = 4096
	// MaxBatch bounds the pages of one call, so a script never runs long.
	MaxBatch = 1024
	// MaxParts bounds the partitions (TRAWL_CONTENT_PARTS): 1024 is many per master even
	// on a large cluster, and keeps a partition at 16 slots' worth of the slot space.
	MaxParts = 1024
)

var (
	// ErrOptions marks invalid options.
	ErrOptions = errors.New("contentdup: invalid options")
	// ErrMismatch marks an index in Redis built with another fingerprint scheme, whose
	// SimHashes cannot be compared with this code's, or split into another number of
	// partitions, whose keys this code would not find.
	ErrMismatch = errors.New("contentdup: index was built with another fingerprint scheme or partition count")
)

// Options configure an Index.
type Options struct {
	MaxDistance int // near duplicates are within this many bits (0..simhash.MaxDistance)
	BucketCap   int // most originals per band bucket (1..MaxBucketCap)
	Parts       int // partitions of the index (TRAWL_CONTENT_PARTS, 1..MaxParts); 0 is 1
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.MaxDistance < 0 || o.MaxDistance > simhash.MaxDistance {
		errs = append(errs, fmt.Errorf("max distance %d: want 0..%d (%d bands of %d bits)", o.MaxDistance, simhash.MaxDistance, simhash.Bands, simhash.BandBits))
	}
	if o.BucketCap < 1 || o.BucketCap > MaxBucketCap {
		errs = append(errs, fmt.Errorf("bucket cap %d: want 1..%d", o.BucketCap, MaxBucketCap))
	}
	if o.Parts < 0 || o.Parts > MaxParts {
		errs = append(errs, fmt.Errorf("parts %d: want 1..%d", o.Parts, MaxParts))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	return nil
}

// Kind says what a page was found to be.
type Kind int

const (
	Original Kind = iota // no earlier page has the same or a close text
	Exact                // an earlier page has exactly the same text
	Near                 // an earlier page's SimHash is within MaxDistance
)

func (k Kind) String() string {
	switch k {
	case Original:
		return "original"
	case Exact:
		return "exact"
	case Near:
		return "near"
	default:
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
}

// Page is one page to check.
type Page struct {
	URL     string
	Digest  string // simhash.Fingerprint.Digest; "" skips the exact check
	SimHash uint64
	Near    bool // take part in the near-duplicate lookup (enough text to be meaningful)
	Store   bool // may become an original others are reported against
	// Replaces is the URL's previous text digest when it was fetched before with another
	// text (adaptive recrawl): its exact key is removed if it still names the URL, since
	// the URL no longer holds that text. So the exact keys stay one per URL however often
	// its text changes, and the next page with the old text becomes its original.
	Replaces string
}

// Verdict is what a page was found to be.
type Verdict struct {
	Kind     Kind
	Of       string // URL of the original when Kind is Exact or Near
	Distance int    // Hamming distance to it when Kind is Near
}

// Result is the outcome of one batch.
type Result struct {
	Verdicts []Verdict // one per page, in order
	// FullBuckets counts band insertions refused because the bucket was at its cap.
	FullBuckets int
}

// Index is the duplicate index of one deployment (one key prefix).
type Index struct {
	rdb    redis.Cmdable
	opts   Options
	parts  []string // key prefix of each partition, "<base>:{<tag>}:"
	scheme string   // what meta holds for this code and partition count
	seq    string
	meta   string
}

// New returns the index under the deployment prefix base (TRAWL_REDIS_PREFIX).
func New(rdb redis.Cmdable, base string, o Options) (*Index, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.Parts = max(o.Parts, 1)
	ks := redisx.NewKeyspace(base, "content")
	ix := &Index{rdb: rdb, opts: o, seq: ks.Key("seq"), meta: ks.Key("meta"), scheme: simhash.HashVersion}
	if o.Parts > 1 {
		ix.scheme += partsMark + strconv.Itoa(o.Parts)
	}
	for i := range o.Parts {
		ix.parts = append(ix.parts, redisx.NewKeyspace(base, Tag(i, o.Parts)).Prefix())
	}
	return ix, nil
}

// partsMark separates the fingerprint scheme from the partition count in meta. An index
// in one partition records the scheme alone, as before partitions existed.
const partsMark = " parts="

// Tag is the hash tag of partition i of parts: "content" for an index in one partition
// (the layout before partitions existed), else redisx.SpreadTag("content", i, parts).
func Tag(i, parts int) string {
	if parts <= 1 {
		return "content"
	}
	return redisx.SpreadTag("content", i, parts)
}

// Seeds of the partition hashes, so that the partition of a key is independent of the
// bits that name it within the partition.
const (
	exactSeed = 0x27D4EB2F165667C5
	bandSeed  = 0x165667B19E3779F9
)

// ExactPart is the partition of the exact key of digest: XXH64 of the digest reduced to
// 0..P-1 by multiply-shift (Lemire), so each partition takes 1/P of the digests.
func (ix *Index) ExactPart(digest string) int {
	if len(ix.parts) == 1 {
		return 0
	}
	var d xxhash.Digest
	d.ResetWithSeed(exactSeed)
	_, _ = d.WriteString(digest)
	return reduce(d.Sum64(), len(ix.parts))
}

// BandPart is the partition of the bucket of band i of h, a function of (i, band value)
// alone since every SimHash with that band value shares the bucket.
func (ix *Index) BandPart(i int, h uint64) int {
	if len(ix.parts) == 1 {
		return 0
	}
	v := simhash.Band(h, i)
	b := [3]byte{byte(i), byte(v >> 8), byte(v)}
	var d xxhash.Digest
	d.ResetWithSeed(bandSeed)
	_, _ = d.Write(b[:])
	return reduce(d.Sum64(), len(ix.parts))
}

func reduce(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// Parts is the number of partitions.
func (ix *Index) Parts() int { return len(ix.parts) }

//go:embed lua/*.lua
var luaFS embed.FS

// The index's scripts; each file's header gives its KEYS, ARGV and reply.
var (
	initScript   = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/init.lua"})
	lookupScript = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/lookup.lua"})
	insertScript = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/insert.lua"})
)

// Init records the fingerprint scheme and the partition count in a new index, or checks
// that an existing index has this code's. A mismatch is ErrMismatch: comparing SimHashes
// of two schemes would report random near duplicates, and another partition count would
// look for every key in another place and start an empty index unseen, so the operator
// must restore the setting, delete the keys (losing the history) or run the matching
// release.
func (ix *Index) Init(ctx context.Context) error {
	v, err := initScript.Run(ctx, ix.rdb, []string{ix.meta}, ix.scheme).Text()
	if err != nil {
		return fmt.Errorf("contentdup: init %s: %w", ix.meta, err)
	}
	if v == ix.scheme {
		return nil
	}
	scheme, parts, _ := strings.Cut(v, partsMark)
	if parts == "" {
		parts = "1"
	}
	if scheme != simhash.HashVersion {
		return fmt.Errorf("%w: %s is %q, this parser computes %q; delete the index's keys (%s*) to start an empty one",
			ErrMismatch, ix.meta, v, simhash.HashVersion, strings.TrimSuffix(ix.meta, "meta"))
	}
	return fmt.Errorf("%w: %s records an index in %s partitions, TRAWL_CONTENT_PARTS is %d; "+
		"restore the setting, or delete the index's keys to start an empty one", ErrMismatch, ix.meta, parts, len(ix.parts))
}

// ExactKey is the key holding the first URL with the text digest.
func (ix *Index) ExactKey(digest string) string {
	return ix.parts[ix.ExactPart(digest)] + "exact:" + digest
}

// BandKey is the bucket of band i (0..simhash.Bands-1) of h.
func (ix *Index) BandKey(i int, h uint64) string {
	return fmt.Sprintf("%sband:%d:%04x", ix.parts[ix.BandPart(i, h)], i, simhash.Band(h, i))
}

// SeqKey is the counter that orders originals.
func (ix *Index) SeqKey() string { return ix.seq }

// MetaKey holds the fingerprint scheme of the stored hashes.
func (ix *Index) MetaKey() string { return ix.meta }

// call is one script call of a pipeline.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// partCall is the script call of one partition, with the page of each of its entries in
// the order of the reply.
type partCall struct {
	call
	pages []int
}

// calls collects one partCall per partition, in the order they were first needed.
type calls struct {
	ix     *Index
	script *redis.Script
	head   []any // the first arguments, after which come the entries
	by     map[int]*partCall
	order  []*partCall
}

func (ix *Index) newCalls(script *redis.Script, head ...any) *calls {
	return &calls{ix: ix, script: script, head: head, by: make(map[int]*partCall)}
}

// add appends the entry of page i to partition p's call.
func (cs *calls) add(p, i int, entry ...any) {
	c := cs.by[p]
	if c == nil {
		c = &partCall{call: call{script: cs.script, keys: []string{cs.ix.parts[p]}, args: append([]any(nil), cs.head...)}}
		cs.by[p] = c
		cs.order = append(cs.order, c)
	}
	c.args = append(c.args, entry...)
	c.pages = append(c.pages, i)
}

func (cs *calls) list() []*call {
	out := make([]*call, len(cs.order))
	for i, c := range cs.order {
		out[i] = &c.call
	}
	return out
}

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
	cs := ix.newCalls(lookupScript, ix.opts.MaxDistance, ix.opts.BucketCap)
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
				d = pg.Digest
			}
			if j == old {
				r = pg.Replaces
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

// runPipeline sends the script calls, and what more adds, in one pipeline. Scripts go as
// EVALSHA; those a server does not know (NOSCRIPT: a restarted or new master) are loaded
// (on every master of a cluster) and sent once more, so a flushed script cache costs one
// more round trip instead of sending every script whole each time.
func runPipeline(ctx context.Context, rdb redis.Cmdable, calls []*call, more func(redis.Pipeliner)) error {
	send := func(calls []*call, more func(redis.Pipeliner)) {
		// The pipeline's own error is the first command's; each command is read below.
		_, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, c := range calls {
				c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
			}
			if more != nil {
				more(pipe)
			}
			return nil
		})
	}
	send(calls, more)
	var again []*call
	loaded := map[*redis.Script]bool{}
	for _, c := range calls {
		err := c.cmd.Err()
		switch {
		case err == nil:
		case redisx.IsNoScript(err):
			if !loaded[c.script] {
				if err := c.script.Load(ctx, rdb).Err(); err != nil {
					return fmt.Errorf("load script: %w", err)
				}
				loaded[c.script] = true
			}
			again = append(again, c)
		default:
			return err
		}
	}
	if len(again) == 0 {
		return nil
	}
	send(again, nil)
	for _, c := range again {
		if err := c.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}
