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
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

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

// initScript records the fingerprint scheme of a new index, or returns the stored one.
var initScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return v
`)

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

// checkScript runs the rules of the package comment over a batch.
//
// KEYS[1] = seq. ARGV[1] = key prefix (with the hash tag), ARGV[2] = max distance,
// ARGV[3] = bucket cap, then four arguments per page: URL, text digest ("" = no exact
// check), SimHash as 16 hex digits ("" = no near lookup), "1" when it may be stored.
// Returns, per page, kind (0 original, 1 exact, 2 near), URL of the original ("" for an
// original) and distance; then the number of insertions refused by full buckets.
//
// Lua 5.1 numbers are doubles and the bit library works on 32 bits, so a SimHash is
// handled as four 16-bit parts, compared part by part with bit.bxor and a byte popcount
// table, written into the script as a constant: computing it in Lua cost more than the
// lookups of a typical batch. A bucket's candidates already equal the page in that band; only the other three
// parts are compared, and the comparison stops once it exceeds the best distance so far.
var checkScript = redis.NewScript(`
local prefix, maxd, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local seq0 = tonumber(redis.call('GET', KEYS[1]) or '0')
local seq = seq0
local pop = {` + popTable() + `}
local band, rshift, bxor = bit.band, bit.rshift, bit.bxor
local out, full = {}, 0
for a = 4, #ARGV, 4 do
  local url, dig, sh, store = ARGV[a], ARGV[a+1], ARGV[a+2], ARGV[a+3] == '1'
  local kind, of, dist = 0, '', 0
  if dig ~= '' then
    local key = prefix .. 'exact:' .. dig
    local first = redis.call('GET', key)
    if not first then
      if store then redis.call('SET', key, url) end
    elseif first ~= url then
      kind, of = 1, first
    end
  end
  if kind == 0 and sh ~= '' then
    local parts, keys, sizes, present = {}, {}, {}, {}
    for b = 1, 4 do parts[b] = tonumber(string.sub(sh, 4*b-3, 4*b), 16) end
    local best, bestSeq, bestURL = maxd, nil, nil
    for b = 1, 4 do
      local key = prefix .. 'band:' .. (b-1) .. ':' .. string.sub(sh, 4*b-3, 4*b)
      keys[b] = key
      local e = redis.call('HGETALL', key)
      sizes[b] = #e / 2
      for i = 1, #e, 2 do
        local f = e[i]
        if f == sh then present[b] = true end
        local d = 0
        for q = 1, 4 do
          if q ~= b then
            local x = bxor(parts[q], tonumber(string.sub(f, 4*q-3, 4*q), 16))
            d = d + pop[band(x, 255)] + pop[rshift(x, 8)]
            if d > best then break end
          end
        end
        if d <= best then
          local v = e[i+1]
          local sp = string.find(v, ' ', 1, true)
          local s, u = tonumber(string.sub(v, 1, sp-1)), string.sub(v, sp+1)
          if u ~= url and (bestURL == nil or d < best or s < bestSeq) then
            best, bestSeq, bestURL = d, s, u
          end
        end
      end
    end
    if bestURL then
      kind, of, dist = 2, bestURL, best
    elseif store then
      local val = nil
      for b = 1, 4 do
        if not present[b] then
          if sizes[b] < cap then
            if not val then
              seq = seq + 1
              val = seq .. ' ' .. url
            end
            redis.call('HSET', keys[b], sh, val)
          else
            full = full + 1
          end
        end
      end
    end
  end
  out[#out+1] = kind
  out[#out+1] = of
  out[#out+1] = dist
end
if seq ~= seq0 then redis.call('SET', KEYS[1], seq) end
out[#out+1] = full
return out
`)

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

// popTable is the Lua table constructor body of the byte popcounts: "[0]=0,1,1,2,…".
func popTable() string {
	var b strings.Builder
	b.WriteString("[0]=0")
	for i := 1; i < 256; i++ {
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(bits.OnesCount8(uint8(i))))
	}
	return b.String()
}
