// Package config reads the parser's TRAWL_* settings.
package config

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/shared/envconfig"
)

// DefaultHTTPAddr is where the parser serves /metrics, /healthz and /readyz.
const DefaultHTTPAddr = ":9103"

// Config is the parser's configuration.
type Config struct {
	Common envconfig.Common

	MaxDepth         int    // TRAWL_MAX_DEPTH: deepest link hop emitted
	Scope            string // TRAWL_SCOPE: any, host or domain
	MaxURLLength     int    // TRAWL_MAX_URL_LENGTH: longest normalised URL emitted
	MaxOutlinks      int    // TRAWL_MAX_OUTLINKS: URLs emitted per page
	MaxTextBytes     int64  // TRAWL_MAX_TEXT_BYTES: visible text kept per document
	Include          string // TRAWL_INCLUDE: regexp a URL must match ("" = all)
	Exclude          string // TRAWL_EXCLUDE: regexp of URLs never emitted ("" = none)
	ParseConcurrency int    // TRAWL_PARSE_CONCURRENCY: pages parsed in parallel
	ParseBatch       int    // TRAWL_PARSE_BATCH: messages taken per batch
	ParseInFlight    int    // TRAWL_PARSE_INFLIGHT: batches handled at once
	RobotsAgent      string // TRAWL_ROBOTS_AGENT: token of <meta name=…> robots directives

	ContentDedup     bool // TRAWL_CONTENT_DEDUP: flag exact and near-duplicate documents (needs Redis)
	NearDupDistance  int  // TRAWL_NEAR_DUP_DISTANCE: SimHash bits within which texts are near duplicates
	NearDupMinWords  int  // TRAWL_NEAR_DUP_MIN_WORDS: fewer words are too few for a near-duplicate lookup
	NearDupBucketCap int  // TRAWL_NEAR_DUP_BUCKET_CAP: most originals per SimHash band bucket
}

// Load reads the configuration; the error lists every value that could not be read.
func Load(r *envconfig.Reader) (Config, error) {
	c := Config{
		Common:           envconfig.LoadCommon(r, DefaultHTTPAddr),
		MaxDepth:         r.Int("MAX_DEPTH", 20),
		Scope:            r.String("SCOPE", string(scope.Any)),
		MaxURLLength:     r.Int("MAX_URL_LENGTH", 2048),
		MaxOutlinks:      r.Int("MAX_OUTLINKS", 1000),
		MaxTextBytes:     r.Bytes("MAX_TEXT_BYTES", 256<<10),
		Include:          r.String("INCLUDE", ""),
		Exclude:          r.String("EXCLUDE", ""),
		ParseConcurrency: r.Int("PARSE_CONCURRENCY", runtime.GOMAXPROCS(0)),
		ParseBatch:       r.Int("PARSE_BATCH", 32),
		// A batch spends most of its time waiting for Redis and for JetStream to store its
		// documents and links; with one batch at a time the parser was the crawl's bound.
		ParseInFlight:    r.Int("PARSE_INFLIGHT", 4),
		RobotsAgent:      r.String("ROBOTS_AGENT", "trawl"),
		ContentDedup:     r.Bool("CONTENT_DEDUP", true),
		NearDupDistance:  r.Int("NEAR_DUP_DISTANCE", simhash.MaxDistance),
		NearDupMinWords:  r.Int("NEAR_DUP_MIN_WORDS", 20),
		NearDupBucketCap: r.Int("NEAR_DUP_BUCKET_CAP", 64),
	}
	return c, r.Err()
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Validate reports every invalid setting.
func (c Config) Validate() error {
	errs := []error{c.Common.Validate()}
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.MaxDepth < 0 || c.MaxDepth > 10000 {
		bad("TRAWL_MAX_DEPTH=%d: want 0..10000", c.MaxDepth)
	}
	if _, err := scope.ParseMode(c.Scope); err != nil {
		bad("TRAWL_SCOPE=%q: want any, host or domain", c.Scope)
	}
	// 16 KiB is the longest input urlnorm accepts at all.
	if c.MaxURLLength < 32 || c.MaxURLLength > 16<<10 {
		bad("TRAWL_MAX_URL_LENGTH=%d: want 32..16384", c.MaxURLLength)
	}
	if c.MaxOutlinks < 1 || c.MaxOutlinks > 100000 {
		bad("TRAWL_MAX_OUTLINKS=%d: want 1..100000", c.MaxOutlinks)
	}
	// A document must fit in one message (8 MiB by default) with its links.
	if c.MaxTextBytes < 0 || c.MaxTextBytes > 4<<20 {
		bad("TRAWL_MAX_TEXT_BYTES=%d: want 0..4MiB", c.MaxTextBytes)
	}
	for name, expr := range map[string]string{"TRAWL_INCLUDE": c.Include, "TRAWL_EXCLUDE": c.Exclude} {
		if _, err := compile(expr); err != nil {
			bad("%s=%q: %w", name, expr, err)
		}
	}
	if c.ParseConcurrency < 1 || c.ParseConcurrency > 1024 {
		bad("TRAWL_PARSE_CONCURRENCY=%d: want 1..1024", c.ParseConcurrency)
	}
	if c.ParseBatch < 1 || c.ParseBatch > 1024 {
		bad("TRAWL_PARSE_BATCH=%d: want 1..1024", c.ParseBatch)
	}
	if c.ParseInFlight < 1 || c.ParseInFlight > 64 {
		bad("TRAWL_PARSE_INFLIGHT=%d: want 1..64", c.ParseInFlight)
	}
	if !tokenRE.MatchString(c.RobotsAgent) {
		bad("TRAWL_ROBOTS_AGENT=%q: want a product token (letters, digits, _ and -)", c.RobotsAgent)
	}
	// The lookup finds every original within the distance only while the distance is below
	// the number of bands (pigeonhole), so a larger one would silently miss matches.
	if c.NearDupDistance < 0 || c.NearDupDistance > simhash.MaxDistance {
		bad("TRAWL_NEAR_DUP_DISTANCE=%d: want 0..%d (%d bands of %d bits)", c.NearDupDistance, simhash.MaxDistance, simhash.Bands, simhash.BandBits)
	}
	if c.NearDupMinWords < 1 || c.NearDupMinWords > 100000 {
		bad("TRAWL_NEAR_DUP_MIN_WORDS=%d: want 1..100000", c.NearDupMinWords)
	}
	if c.NearDupBucketCap < 1 || c.NearDupBucketCap > contentdup.MaxBucketCap {
		bad("TRAWL_NEAR_DUP_BUCKET_CAP=%d: want 1..%d", c.NearDupBucketCap, contentdup.MaxBucketCap)
	}
	return errors.Join(errs...)
}

// ScopeConfig returns the scope rules. maxBatchBytes bounds one DiscoveredBatch.
func (c Config) ScopeConfig(maxBatchBytes int) (scope.Config, error) {
	mode, err := scope.ParseMode(c.Scope)
	if err != nil {
		return scope.Config{}, err
	}
	inc, err := compile(c.Include)
	if err != nil {
		return scope.Config{}, fmt.Errorf("config: TRAWL_INCLUDE: %w", err)
	}
	exc, err := compile(c.Exclude)
	if err != nil {
		return scope.Config{}, fmt.Errorf("config: TRAWL_EXCLUDE: %w", err)
	}
	return scope.Config{
		Mode:          mode,
		MaxDepth:      c.MaxDepth,
		MaxURLLength:  c.MaxURLLength,
		MaxOutlinks:   c.MaxOutlinks,
		MaxBatchBytes: maxBatchBytes,
		Include:       inc,
		Exclude:       exc,
	}, nil
}

// ContentDedupOptions returns the duplicate index's options.
func (c Config) ContentDedupOptions() contentdup.Options {
	return contentdup.Options{MaxDistance: c.NearDupDistance, BucketCap: c.NearDupBucketCap}
}

// compile returns nil for an empty expression: "not set" rather than "matches everything".
func compile(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	return regexp.Compile(expr)
}
