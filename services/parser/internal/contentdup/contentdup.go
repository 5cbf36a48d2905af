// Package contentdup finds exact and near-duplicate pages across the whole crawl: an index
// in Redis of the text digest and the SimHash of every original page, checked and updated
// for a whole batch of pages by one Lua script.
//
// # Keys
//
// Every key shares the {content} hash tag, so the script's keys live in one Redis Cluster
// slot. With the default prefix:
//
//	trawl:{content}:exact:<text digest, 64 hex>   string: URL of the first page with that text
//	trawl:{content}:band:<i>:<4 hex>               hash: SimHash (16 hex) → "<seq> <URL>" of the
//	                                              originals whose band i (bits 63−16i … 48−16i)
//	                                              has that value; at most BucketCap fields
//	trawl:{content}:seq                            string: counter ordering the originals
//	trawl:{content}:meta                           string: simhash.HashVersion of the stored hashes
//
// # Rules
//
// Pages are taken in batch order, which is stream order, and the first writer wins:
//
//  1. Exact: the first page with a text digest stores its URL under exact:<digest>; a later
//     page with that digest and another URL is an exact duplicate of it.
//  2. Near: a page that is not an exact duplicate reads the four buckets its SimHash bands
//     select. Two SimHashes within 3 bits agree on at least one of four 16-bit bands
//     (pigeonhole), so every indexed original within MaxDistance is among the candidates.
//     The closest one within MaxDistance is the original (ties: the earliest indexed); the
//     page is a near duplicate of it.
//  3. A page that is neither is an original: its SimHash is added to its four buckets, each
//     capped at BucketCap entries so that a popular bucket costs bounded time. A full
//     bucket keeps its first entries; the page is still found through its other bands.
//
// Only originals are indexed, so a page is always reported as a duplicate of an original,
// never of another duplicate (no chains; a slow drift of edits is not followed). A match
// with the page's own URL is ignored: a redelivered page, or the same URL fetched again,
// is never a duplicate of itself. A page with Store false (noindex) is checked but never
// becomes an original, since a document an indexer must drop cannot stand in for others.
package contentdup

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/shared/redisx"
)

// Limits of the options.
const (
	MaxBucketCap = 4096
	// MaxBatch bounds the pages of one call, so a script never runs long.
	MaxBatch = 1024
)

var (
	// ErrOptions marks invalid options.
	ErrOptions = errors.New("contentdup: invalid options")
	// ErrMismatch marks an index in Redis built with another fingerprint scheme, whose
	// SimHashes cannot be compared with this code's.
	ErrMismatch = errors.New("contentdup: index was built with another fingerprint scheme")
)

// Options configure an Index.
type Options struct {
	MaxDistance int // near duplicates are within this many bits (0..simhash.MaxDistance)
	BucketCap   int // most originals per band bucket (1..MaxBucketCap)
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
	rdb    redis.Scripter
	opts   Options
	prefix string // "<base>:{content}:", carries the hash tag
	seq    string
	meta   string
}

// New returns the index under the deployment prefix base (TRAWL_REDIS_PREFIX).
func New(rdb redis.Scripter, base string, o Options) (*Index, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ks := redisx.NewKeyspace(base, "content")
	return &Index{rdb: rdb, opts: o, prefix: ks.Prefix(), seq: ks.Key("seq"), meta: ks.Key("meta")}, nil
}

//go:embed lua/*.lua
var luaFS embed.FS

// The index's scripts; each file's header gives its KEYS, ARGV and reply.
var (
	initScript  = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/init.lua"})
	checkScript = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/check.lua"})
)

// Init records the fingerprint scheme in a new index, or checks that an existing index
// uses this code's. A mismatch is ErrMismatch: comparing SimHashes of two schemes would
// report random near duplicates, so the operator must delete the keys (losing the
// history) or run the matching release.
func (ix *Index) Init(ctx context.Context) error {
	v, err := initScript.Run(ctx, ix.rdb, []string{ix.meta}, simhash.HashVersion).Text()
	if err != nil {
		return fmt.Errorf("contentdup: init %s: %w", ix.meta, err)
	}
	if v != simhash.HashVersion {
		return fmt.Errorf("%w: %s is %q, this parser computes %q; delete %s* to start an empty index",
			ErrMismatch, ix.meta, v, simhash.HashVersion, ix.prefix)
	}
	return nil
}

// ExactKey is the key holding the first URL with the text digest.
func (ix *Index) ExactKey(digest string) string { return ix.prefix + "exact:" + digest }

// BandKey is the bucket of band i (0..simhash.Bands-1) of h.
func (ix *Index) BandKey(i int, h uint64) string {
	return fmt.Sprintf("%sband:%d:%04x", ix.prefix, i, simhash.Band(h, i))
}

// SeqKey is the counter that orders originals.
func (ix *Index) SeqKey() string { return ix.seq }

// MetaKey holds the fingerprint scheme of the stored hashes.
func (ix *Index) MetaKey() string { return ix.meta }

// Check classifies pages (in order, so an earlier page of the batch is the original of a
// later one) and indexes the originals, in one Redis call. A Redis failure is returned
// wrapped; the batch is then safe to retry: what the failed call stored is the same as
// what the retry stores, and a page's own entries never count against it.
func (ix *Index) Check(ctx context.Context, pages []Page) (Result, error) {
	if len(pages) == 0 {
		return Result{}, nil
	}
	if len(pages) > MaxBatch {
		return Result{}, fmt.Errorf("contentdup: %d pages in one batch, want at most %d", len(pages), MaxBatch)
	}
	args := make([]any, 0, 3+4*len(pages))
	args = append(args, ix.prefix, ix.opts.MaxDistance, ix.opts.BucketCap)
	for _, p := range pages {
		sh := ""
		if p.Near {
			sh = simhash.Format(p.SimHash)
		}
		store := "0"
		if p.Store {
			store = "1"
		}
		args = append(args, p.URL, p.Digest, sh, store)
	}
	v, err := checkScript.Run(ctx, ix.rdb, []string{ix.seq}, args...).Slice()
	if err != nil {
		return Result{}, fmt.Errorf("contentdup: check %d pages: %w", len(pages), err)
	}
	return parseReply(v, len(pages))
}

func parseReply(v []any, n int) (Result, error) {
	if len(v) != 3*n+1 {
		return Result{}, fmt.Errorf("contentdup: reply of %d values for %d pages", len(v), n)
	}
	res := Result{Verdicts: make([]Verdict, n)}
	for i := range res.Verdicts {
		kind, ok1 := v[3*i].(int64)
		of, ok2 := v[3*i+1].(string)
		dist, ok3 := v[3*i+2].(int64)
		if !ok1 || !ok2 || !ok3 || kind < int64(Original) || kind > int64(Near) {
			return Result{}, fmt.Errorf("contentdup: reply for page %d: %v %v %v", i, v[3*i], v[3*i+1], v[3*i+2])
		}
		res.Verdicts[i] = Verdict{Kind: Kind(kind), Of: of, Distance: int(dist)}
	}
	full, ok := v[3*n].(int64)
	if !ok {
		return Result{}, fmt.Errorf("contentdup: reply: full buckets %v", v[3*n])
	}
	res.FullBuckets = int(full)
	return res, nil
}
