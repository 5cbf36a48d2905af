// Package config reads the parser's TRAWL_* settings.
package config

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/services/parser/internal/sitemap"
	"github.com/trawl/trawl/shared/crawlscope"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/frontierconf"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/robots"
)

// DefaultHTTPAddr is where the parser serves /metrics, /healthz and /readyz.
const DefaultHTTPAddr = ":9103"

// DefaultContentExactCap is TRAWL_CONTENT_EXACT_CAPACITY's default: 10^8 original texts,
// about 12 GB of Redis at the bytes per entry measured (docs/cost-per-page.md, "Scale"),
// where an unbounded index grows by about 200 B per original for ever.
const DefaultContentExactCap = 100_000_000

// Config is the parser's configuration.
type Config struct {
	Common envconfig.Common

	MaxDepth int // TRAWL_MAX_DEPTH: deepest link hop emitted
	// Settings are the scope settings (TRAWL_SCOPE, TRAWL_MAX_URL_LENGTH, TRAWL_INCLUDE,
	// TRAWL_EXCLUDE).
	crawlscope.Settings
	MaxOutlinks      int    // TRAWL_MAX_OUTLINKS: URLs emitted per page
	MaxRedirects     int    // TRAWL_MAX_REDIRECTS: redirect hops a crawl follows
	MaxTextBytes     int64  // TRAWL_MAX_TEXT_BYTES: visible text kept per document
	ParseConcurrency int    // TRAWL_PARSE_CONCURRENCY: pages parsed in parallel
	ParseBatch       int    // TRAWL_PARSE_BATCH: messages taken per batch
	ParseInFlight    int    // TRAWL_PARSE_INFLIGHT: batches handled at once
	RobotsAgent      string // TRAWL_ROBOTS_AGENT: token of <meta name=…> robots directives

	ContentDedup     bool // TRAWL_CONTENT_DEDUP: flag exact and near-duplicate documents (needs Redis)
	NearDupDistance  int  // TRAWL_NEAR_DUP_DISTANCE: SimHash bits within which texts are near duplicates
	NearDupMinWords  int  // TRAWL_NEAR_DUP_MIN_WORDS: fewer words are too few for a near-duplicate lookup
	NearDupBucketCap int  // TRAWL_NEAR_DUP_BUCKET_CAP: most originals per SimHash band bucket
	ContentParts     int  // TRAWL_CONTENT_PARTS: partitions of the index, each in its own cluster slot
	// ContentExactCap is TRAWL_CONTENT_EXACT_CAPACITY: most exact entries (original texts)
	// the index keeps (contentdup.Options.ExactCapacity); 0 = no bound.
	ContentExactCap int

	// TRAWL_EMBEDS: auto, on or off: find and publish page requisites.
	Embeds string
	// TRAWL_MAX_EMBED_HOPS: longest chain of requisites from a page; 2 is Heritrix's
	// maxTransHops (a sheet and what it loads, or a frame and its images).
	MaxEmbedHops int
	// TRAWL_EMBED_SCOPE: any (requisites may leave the scope) or crawl.
	EmbedScope string

	SitemapMaxURLs  int   // TRAWL_SITEMAP_MAX_URLS: entries read from one sitemap file
	SitemapMaxBytes int64 // TRAWL_SITEMAP_MAX_BYTES: uncompressed octets read from one sitemap file

	// Recrawl is the interval policy (TRAWL_RECRAWL_*), used when TRAWL_RECRAWL=adaptive.
	Recrawl recrawl.Settings

	// Render is which pages go to a renderer (TRAWL_RENDER, TRAWL_RENDER_HOSTS,
	// TRAWL_RENDER_URLS).
	Render renderconf.Settings
	// Policy is TRAWL_PARSER_POLICY: hold links to the live site policies' scope rules
	// and recrawl bounds (needs Redis, where the rules live). false: the process-wide
	// settings alone, and no Redis when content dedup is off too; the scheduler still
	// applies the rules' scope to the URLs it adds.
	Policy bool
	// Rules are the site policies' settings (TRAWL_POLICY_POLL: how often the rules'
	// version is read).
	Rules policy.Settings
}

// Load reads the configuration; the error lists every value that could not be read.
func Load(r *envconfig.Reader) (Config, error) {
	c := Config{
		Common:           envconfig.LoadCommon(r, DefaultHTTPAddr),
		MaxDepth:         frontierconf.LoadMaxDepth(r),
		Settings:         crawlscope.Load(r),
		MaxOutlinks:      r.Int("MAX_OUTLINKS", 1000),
		MaxRedirects:     r.Int("MAX_REDIRECTS", 5),
		MaxTextBytes:     r.Bytes("MAX_TEXT_BYTES", 256<<10),
		ParseConcurrency: r.Int("PARSE_CONCURRENCY", runtime.GOMAXPROCS(0)),
		ParseBatch:       r.Int("PARSE_BATCH", 32),
		// A batch spends most of its time waiting for Redis and for JetStream to store its
		// documents and links; with one batch at a time the parser was the crawl's bound.
		ParseInFlight:    r.Int("PARSE_INFLIGHT", 4),
		RobotsAgent:      robots.LoadAgent(r),
		ContentDedup:     r.Bool("CONTENT_DEDUP", true),
		NearDupDistance:  r.Int("NEAR_DUP_DISTANCE", simhash.MaxDistance),
		NearDupMinWords:  r.Int("NEAR_DUP_MIN_WORDS", 20),
		NearDupBucketCap: r.Int("NEAR_DUP_BUCKET_CAP", 64),
		ContentParts:     r.Int("CONTENT_PARTS", 1),
		ContentExactCap:  r.Int("CONTENT_EXACT_CAPACITY", DefaultContentExactCap),
		Embeds:           strings.ToLower(strings.TrimSpace(r.String("EMBEDS", EmbedsAuto))),
		MaxEmbedHops:     r.Int("MAX_EMBED_HOPS", 2),
		EmbedScope:       strings.ToLower(strings.TrimSpace(r.String("EMBED_SCOPE", string(scope.EmbedAny)))),
		SitemapMaxURLs:   r.Int("SITEMAP_MAX_URLS", sitemap.MaxURLs),
		SitemapMaxBytes:  r.Bytes("SITEMAP_MAX_BYTES", sitemap.MaxBytes),
		Recrawl:          recrawl.Load(r),
		Render:           renderconf.Load(r),
		Policy:           r.Bool("PARSER_POLICY", true),
		Rules:            policy.Load(r),
	}
	return c, r.Err()
}

// TRAWL_EMBEDS values.
const (
	// EmbedsAuto is on while the archiver's durable consumer of crawl.pages exists: on
	// when archiving, off otherwise, without a setting to keep in step.
	EmbedsAuto = "auto"
	EmbedsOn   = "on"
	EmbedsOff  = "off"
)

// Validate reports every invalid setting.
func (c Config) Validate() error {
	errs := []error{c.Common.Validate()}
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if err := frontierconf.CheckMaxDepth(c.MaxDepth); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Settings.Validate())
	if c.MaxOutlinks < 1 || c.MaxOutlinks > 100000 {
		bad("TRAWL_MAX_OUTLINKS=%d: want 1..100000", c.MaxOutlinks)
	}
	if c.MaxRedirects < 0 || c.MaxRedirects > 20 {
		bad("TRAWL_MAX_REDIRECTS=%d: want 0..20", c.MaxRedirects)
	}
	// A document must fit in one message (8 MiB by default) with its links.
	if c.MaxTextBytes < 0 || c.MaxTextBytes > 4<<20 {
		bad("TRAWL_MAX_TEXT_BYTES=%d: want 0..4MiB", c.MaxTextBytes)
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
	if err := robots.CheckAgent(c.RobotsAgent); err != nil {
		errs = append(errs, err)
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
	if c.ContentExactCap < 0 {
		bad("TRAWL_CONTENT_EXACT_CAPACITY=%d: want 0 (no bound) or more", c.ContentExactCap)
	}
	if c.ContentParts < 1 || c.ContentParts > contentdup.MaxParts {
		bad("TRAWL_CONTENT_PARTS=%d: want 1..%d", c.ContentParts, contentdup.MaxParts)
	}
	if c.Common.Recrawl == envconfig.RecrawlAdaptive {
		errs = append(errs, c.Recrawl.Validate())
	}
	// The protocol's limits are the most a sitemap may hold; a parser may read less.
	if c.SitemapMaxURLs < 1 || c.SitemapMaxURLs > sitemap.MaxURLs {
		bad("TRAWL_SITEMAP_MAX_URLS=%d: want 1..%d", c.SitemapMaxURLs, sitemap.MaxURLs)
	}
	if c.SitemapMaxBytes < 1<<10 || c.SitemapMaxBytes > sitemap.MaxBytes {
		bad("TRAWL_SITEMAP_MAX_BYTES=%d: want 1KiB..50MiB", c.SitemapMaxBytes)
	}
	switch c.Embeds {
	case EmbedsAuto, EmbedsOn, EmbedsOff:
	default:
		bad("TRAWL_EMBEDS=%q: want auto, on or off", c.Embeds)
	}
	if c.MaxEmbedHops < 1 || c.MaxEmbedHops > 16 {
		bad("TRAWL_MAX_EMBED_HOPS=%d: want 1..16", c.MaxEmbedHops)
	}
	if c.Policy {
		errs = append(errs, c.Rules.Validate())
	}
	if _, err := scope.ParseEmbedScope(c.EmbedScope); err != nil {
		bad("TRAWL_EMBED_SCOPE=%q: want any or crawl", c.EmbedScope)
	}
	errs = append(errs, c.Render.Validate())
	return errors.Join(errs...)
}

// SitemapLimits are the bounds of reading one sitemap file.
func (c Config) SitemapLimits() sitemap.Options {
	return sitemap.Options{MaxURLs: c.SitemapMaxURLs, MaxBytes: c.SitemapMaxBytes}
}

// ScopeConfig returns the scope rules. maxBatchBytes bounds one DiscoveredBatch.
func (c Config) ScopeConfig(maxBatchBytes int) (scope.Config, error) {
	mode, err := scope.ParseMode(c.Scope)
	if err != nil {
		return scope.Config{}, err
	}
	inc, exc, err := c.Regexps()
	if err != nil {
		return scope.Config{}, fmt.Errorf("config: %w", err)
	}
	return scope.Config{
		Mode:          mode,
		MaxDepth:      c.MaxDepth,
		MaxURLLength:  c.MaxURLLength,
		MaxOutlinks:   c.MaxOutlinks,
		MaxBatchBytes: maxBatchBytes,
		Include:       inc,
		Exclude:       exc,
		MaxEmbedHops:  c.MaxEmbedHops,
		EmbedScope:    scope.EmbedScope(c.EmbedScope),
	}, nil
}

// ContentDedupOptions returns the duplicate index's options.
func (c Config) ContentDedupOptions() contentdup.Options {
	return contentdup.Options{MaxDistance: c.NearDupDistance, BucketCap: c.NearDupBucketCap, Parts: c.ContentParts, ExactCapacity: int64(c.ContentExactCap)}
}
