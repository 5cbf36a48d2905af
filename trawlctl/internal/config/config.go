// Package config holds trawlctl's settings: the same TRAWL_* variables the services read,
// so an operator's shell that runs the crawl can run trawlctl unchanged, with flags on top.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/trawl/trawl/shared/bloomhash"
	"github.com/trawl/trawl/shared/crawlscope"
	"github.com/trawl/trawl/shared/digestindex"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/frontierconf"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/safedial"
)

// Config is what the commands need to find and read a crawl.
type Config struct {
	// Conn finds the crawl, as it does for the services.
	envconfig.Conn
	// FrontQueues is TRAWL_FRONT_QUEUES; 0 when unset, which makes status probe every
	// queue the scheduler could have instead of guessing the scheduler's setting.
	FrontQueues int
	RobotsAgent string // TRAWL_ROBOTS_AGENT: the token the fetchers match robots.txt with
	UserAgent   string // TRAWL_USER_AGENT: the User-Agent header of robots check's fetch
	MaxDepth    int    // TRAWL_MAX_DEPTH
	BloomParts  int    // TRAWL_BLOOM_PARTS: the parts dedup split the seen filter into
	// LeaseTTL is TRAWL_LEASE_TTL: status dates the tasks out by it to name stuck ones.
	LeaseTTL time.Duration
	// Settings are the parser's scope settings, which explain applies.
	crawlscope.Settings
	// Render is which pages the parser sends to a renderer (TRAWL_RENDER*), which explain
	// applies when no decision of the parser is kept.
	Render renderconf.Settings
	// The process-wide limits a site policy's rule can override, which explain names
	// when no rule decides them.
	Politeness      politeness.Rules // TRAWL_MIN_DELAY, TRAWL_DELAY_FACTOR, TRAWL_MAX_CRAWL_DELAY …
	MaxPagesPerHost int64            // TRAWL_MAX_PAGES_PER_HOST: 0 = unlimited
	Recrawl         recrawl.Settings // TRAWL_RECRAWL_MIN, TRAWL_RECRAWL_MAX …
	// DedupIndex is TRAWL_ARCHIVE_DEDUP_INDEX: the archive's payload digest index that
	// archive seed-index and archive forget change ("": the crawl's prefix).
	DedupIndex string
	// AllowCIDRs is TRAWL_ALLOW_CIDRS: the ranges robots check's fetch may reach beside
	// the public addresses, as the fetchers' address policy lets them through.
	AllowCIDRs []netip.Prefix
	// Robots holds TRAWL_ROBOTS_MAX_BYTES, how much of a robots.txt robots check parses,
	// read and checked as the fetchers read it (with the TTLs, which it does not use).
	Robots polite.RobotsSettings

	allowRaw []string
	cidrErr  error
}

// Load reads the variables; r.Err() reports unparseable values.
func Load(r *envconfig.Reader) Config {
	c := Config{
		Conn:        envconfig.LoadConn(r),
		FrontQueues: frontierconf.LoadFrontQueuesIfSet(r),
		RobotsAgent: robots.LoadAgent(r),
		UserAgent:   robots.LoadUserAgent(r),
		MaxDepth:    frontierconf.LoadMaxDepth(r),
		BloomParts:  bloomhash.LoadParts(r),
		LeaseTTL:    envconfig.LoadLeaseTTL(r),
		Settings:    crawlscope.Load(r),
		Render:      renderconf.Load(r),
		Politeness:  politeness.Load(r),
		// Read by frontierconf's rule; its other settings are the scheduler's.
		MaxPagesPerHost: frontierconf.Load(r).MaxPagesPerHost,
		Recrawl:         recrawl.Load(r),
		DedupIndex:      digestindex.LoadName(r),
		Robots:          polite.LoadRobotsSettings(r),
		allowRaw:        r.List("ALLOW_CIDRS", nil),
	}
	c.AllowCIDRs, c.cidrErr = safedial.ParseCIDRs(c.allowRaw)
	return c
}

// connFlags are the flags that override the settings that find a crawl.
var connFlags = map[string]string{
	"TRAWL_NATS_URL": "-nats", "TRAWL_REDIS_URL": "-redis", "TRAWL_REDIS_PREFIX": "-prefix", "TRAWL_SHARDS": "-shards",
}

// Validate reports every invalid setting, naming the variable (a flag that overrode it
// carries the same value, so the message still points at the right thing).
func (c Config) Validate() error {
	errs := []error{c.Conn.Validate(func(v string) string { return connFlags[v] })}
	if c.FrontQueues != 0 {
		if err := frontierconf.CheckFrontQueues(c.FrontQueues); err != nil {
			errs = append(errs, fmt.Errorf("%w (or unset)", err))
		}
	}
	if err := robots.CheckAgent(c.RobotsAgent); err != nil {
		errs = append(errs, err)
	}
	if err := bloomhash.CheckParts(c.BloomParts); err != nil {
		errs = append(errs, err)
	}
	if err := robots.CheckUserAgent(c.UserAgent); err != nil {
		errs = append(errs, err)
	}
	if err := frontierconf.CheckMaxDepth(c.MaxDepth); err != nil {
		errs = append(errs, err)
	}
	if c.cidrErr != nil {
		errs = append(errs, fmt.Errorf("TRAWL_ALLOW_CIDRS=%q: %w", strings.Join(c.allowRaw, ","), c.cidrErr))
	}
	errs = append(errs, digestindex.CheckName(c.DedupIndex), c.Settings.Validate(), c.Politeness.Validate(), c.Render.Validate(),
		c.Robots.Validate())
	return errors.Join(errs...)
}
