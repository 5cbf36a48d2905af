// Package config reads the dedup service's settings from TRAWL_* environment variables.
package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/shared/bloomhash"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/frontierconf"
	"github.com/trawl/trawl/shared/seed"
	"github.com/trawl/trawl/shared/urlnorm"
)

// DefaultHTTPAddr is dedup's /metrics, /healthz and /readyz address.
const DefaultHTTPAddr = ":9104"

// MaxCacheSize bounds TRAWL_DEDUP_CACHE_SIZE: at about 40 bytes an entry, 10 million
// entries are 400 MB, past the point where a bigger cache still pays (the hit rate grows
// with the logarithm of the size).
const MaxCacheSize = 10_000_000

// maxBatch bounds TRAWL_DEDUP_BATCH: messages a batch holds in one seen-test call (the
// consumer's MaxAckPending, topology.SettlingMaxAckPending, is far above it).
const maxBatch = 4096

// Config is everything the service needs.
type Config struct {
	Common       envconfig.Common
	Bloom        bloom.Params  // TRAWL_BLOOM_CAPACITY, _FP_RATE, _KEY_BITS, _GROWTH, _TIGHTEN, _PARTS
	MaxDepth     int           // TRAWL_MAX_DEPTH: URLs deeper than this are dropped
	Batch        int           // TRAWL_DEDUP_BATCH: input messages per Redis call
	FillInterval time.Duration // TRAWL_BLOOM_FILL_INTERVAL: how often the fill ratio is measured; 0 = never
	// MemoTrimInterval (TRAWL_DEDUP_MEMO_TRIM_INTERVAL) is how often memos of messages
	// below the consumer's ack floor are removed.
	MemoTrimInterval time.Duration
	Seeds            []string // TRAWL_SEEDS: URLs published as seeds at start-up
	CacheSize        int      // TRAWL_DEDUP_CACHE_SIZE: entries of the in-process seen cache; 0 = off
	// Norm is applied to every URL before the seen test; the result is also the URL sent
	// to the frontier. TRAWL_STRIP_SESSION_IDS (default true: a crawler keeps no cookies,
	// so without it every visit to a site that rewrites URLs with session ids mints a new
	// URL for every page — the classic crawler trap; Heritrix strips them by default too)
	// and TRAWL_SORT_QUERY (default false: parameter order can matter to a server).
	Norm urlnorm.Options
}

// Load reads the configuration; the error lists every unparseable variable.
func Load(r *envconfig.Reader) (Config, error) {
	c := Config{
		Common: envconfig.LoadCommon(r, DefaultHTTPAddr),
		Bloom: bloom.Params{
			Capacity: uint64(max(0, r.Int("BLOOM_CAPACITY", 10_000_000))),
			FPRate:   r.Float("BLOOM_FP_RATE", 0.01),
			KeyBits:  uint64(max(0, r.Int("BLOOM_KEY_BITS", 1<<31))),
			Growth:   r.Int("BLOOM_GROWTH", bloom.DefaultGrowth),
			Tighten:  r.Float("BLOOM_TIGHTEN", bloom.DefaultTighten),
			Parts:    bloomhash.LoadParts(r),
		},
		MemoTrimInterval: r.Duration("DEDUP_MEMO_TRIM_INTERVAL", 30*time.Second),
		MaxDepth:         frontierconf.LoadMaxDepth(r),
		Batch:            r.Int("DEDUP_BATCH", 256),
		FillInterval:     r.Duration("BLOOM_FILL_INTERVAL", time.Minute),
		Seeds:            r.List("SEEDS", nil),
		CacheSize:        r.Int("DEDUP_CACHE_SIZE", 50_000),
		Norm:             envconfig.LoadURLNorm(r),
	}
	return c, r.Err()
}

// Validate reports every invalid setting, including a filter that cannot be built.
func (c Config) Validate() error {
	errs := []error{c.Common.Validate()}
	p := c.Bloom
	if p.Capacity < bloom.MinCapacity {
		errs = append(errs, fmt.Errorf("TRAWL_BLOOM_CAPACITY=%d: want at least %d", p.Capacity, bloom.MinCapacity))
	}
	if !(p.FPRate > 0 && p.FPRate < 1) {
		errs = append(errs, fmt.Errorf("TRAWL_BLOOM_FP_RATE=%v: want 0 < p < 1", p.FPRate))
	}
	if p.KeyBits == 0 || p.KeyBits > bloom.MaxKeyBits || p.KeyBits%8 != 0 {
		errs = append(errs, fmt.Errorf("TRAWL_BLOOM_KEY_BITS=%d: want a multiple of 8, at most 2^32 (%d)", p.KeyBits, uint64(bloom.MaxKeyBits)))
	}
	if p.Growth < 1 || p.Growth > bloom.MaxGrowth {
		errs = append(errs, fmt.Errorf("TRAWL_BLOOM_GROWTH=%d: want 1..%d", p.Growth, bloom.MaxGrowth))
	}
	if !(p.Tighten > 0 && p.Tighten < 1) {
		errs = append(errs, fmt.Errorf("TRAWL_BLOOM_TIGHTEN=%v: want 0 < r < 1", p.Tighten))
	}
	if err := bloomhash.CheckParts(p.Parts); err != nil {
		errs = append(errs, err)
	}
	if errors.Join(errs[1:]...) == nil {
		// The individual values are fine; check what they imply (number of keys, k).
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("TRAWL_BLOOM_*: %w", err))
		}
	}
	if err := frontierconf.CheckMaxDepth(c.MaxDepth); err != nil {
		errs = append(errs, err)
	}
	if c.Batch < 1 || c.Batch > maxBatch {
		errs = append(errs, fmt.Errorf("TRAWL_DEDUP_BATCH=%d: want 1..%d", c.Batch, maxBatch))
	}
	if c.FillInterval < 0 || (c.FillInterval > 0 && c.FillInterval < time.Second) {
		errs = append(errs, fmt.Errorf("TRAWL_BLOOM_FILL_INTERVAL=%s: want 0 (off) or at least 1s", c.FillInterval))
	}
	if c.MemoTrimInterval < time.Second {
		errs = append(errs, fmt.Errorf("TRAWL_DEDUP_MEMO_TRIM_INTERVAL=%s: want at least 1s", c.MemoTrimInterval))
	}
	if c.CacheSize < 0 || c.CacheSize > MaxCacheSize {
		errs = append(errs, fmt.Errorf("TRAWL_DEDUP_CACHE_SIZE=%d: want 0 (off) to %d", c.CacheSize, MaxCacheSize))
	}
	if _, err := seed.Batches(c.Seeds, 0); err != nil {
		errs = append(errs, fmt.Errorf("TRAWL_SEEDS: %w", err))
	}
	return errors.Join(errs...)
}
