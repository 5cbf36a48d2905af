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
//	trawl:{content}:exact:<4 hex>                  hash: the next 16 hex digits of a text
//	                                              digest whose first 4 these are → URL of
//	                                              the first page with that text; at most
//	                                              ExactBucketCap(ExactCapacity) fields
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
//  1. Exact: the first page with a text digest stores its URL as the digest's entry; a
//     later page with that digest and another URL is an exact duplicate of it. A URL
//     fetched again with another text (Page.Replaces) removes the entry of its previous
//     text if it holds the URL: an entry names a URL that still has that text, and there
//     is at most one per URL whose text was an original. The entries are bounded
//     (Options.ExactCapacity): a new original in a full bucket evicts one of the bucket's
//     entries at random, and a later copy of the evicted text is taken for an original
//     (and found as a near duplicate at distance 0 when its SimHash is still in its band
//     buckets). Eviction misses duplicates; it never reports one that is not.
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
	// ExactCapacity bounds the exact entries (TRAWL_CONTENT_EXACT_CAPACITY): each of the
	// ExactBuckets holds at most ExactBucketCap(ExactCapacity), and a new original in a
	// full bucket takes the place of one of its entries at random. 0: no bound.
	ExactCapacity int64
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
	if o.ExactCapacity < 0 {
		errs = append(errs, fmt.Errorf("exact capacity %d: want 0 (no bound) or more", o.ExactCapacity))
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
