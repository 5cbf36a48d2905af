// Package config holds trawlctl's settings: the same TRAWL_* variables the services read,
// so an operator's shell that runs the crawl can run trawlctl unchanged, with flags on top.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/robots"
)

// MaxFrontQueues is the scheduler's upper bound on TRAWL_FRONT_QUEUES.
const MaxFrontQueues = 64

// Config is what the commands need to find and read a crawl.
type Config struct {
	NATSURL     string // TRAWL_NATS_URL
	RedisURL    string // TRAWL_REDIS_URL
	RedisPrefix string // TRAWL_REDIS_PREFIX
	Shards      int    // TRAWL_SHARDS
	// FrontQueues is TRAWL_FRONT_QUEUES; 0 when unset, which makes status probe every
	// queue the scheduler could have instead of guessing the scheduler's setting.
	FrontQueues  int
	RobotsAgent  string // TRAWL_ROBOTS_AGENT: the token the fetchers match robots.txt with
	MaxDepth     int    // TRAWL_MAX_DEPTH
	MaxURLLength int    // TRAWL_MAX_URL_LENGTH
	Scope        string // TRAWL_SCOPE
	Include      string // TRAWL_INCLUDE
	Exclude      string // TRAWL_EXCLUDE
}

// Load reads the variables; r.Err() reports unparseable values.
func Load(r *envconfig.Reader) Config {
	return Config{
		NATSURL:      r.String("NATS_URL", "nats://127.0.0.1:4222"),
		RedisURL:     r.String("REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisPrefix:  r.String("REDIS_PREFIX", "trawl"),
		Shards:       r.Int("SHARDS", 1),
		FrontQueues:  r.Int("FRONT_QUEUES", 0),
		RobotsAgent:  r.String("ROBOTS_AGENT", "trawl"),
		MaxDepth:     r.Int("MAX_DEPTH", 20),
		MaxURLLength: r.Int("MAX_URL_LENGTH", 2048),
		Scope:        r.String("SCOPE", "any"),
		Include:      r.String("INCLUDE", ""),
		Exclude:      r.String("EXCLUDE", ""),
	}
}

// Validate reports every invalid setting, naming the variable (a flag that overrode it
// carries the same value, so the message still points at the right thing).
func (c Config) Validate() error {
	var errs []error
	for name, raw := range map[string]string{"TRAWL_NATS_URL (-nats)": c.NATSURL, "TRAWL_REDIS_URL (-redis)": c.RedisURL} {
		if u, err := url.Parse(raw); err != nil || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s=%q: want a URL with a host", name, raw))
		}
	}
	if c.RedisPrefix == "" {
		errs = append(errs, errors.New("TRAWL_REDIS_PREFIX (-prefix): must not be empty"))
	}
	if c.Shards < 1 || c.Shards > 1024 {
		errs = append(errs, fmt.Errorf("TRAWL_SHARDS (-shards)=%d: want 1..1024", c.Shards))
	}
	if c.FrontQueues < 0 || c.FrontQueues > MaxFrontQueues {
		errs = append(errs, fmt.Errorf("TRAWL_FRONT_QUEUES=%d: want 1..%d (or unset)", c.FrontQueues, MaxFrontQueues))
	}
	if !robots.IsProductToken(c.RobotsAgent) {
		errs = append(errs, fmt.Errorf("TRAWL_ROBOTS_AGENT=%q: want a product token (letters, '-', '_')", c.RobotsAgent))
	}
	if c.MaxDepth < 0 {
		errs = append(errs, fmt.Errorf("TRAWL_MAX_DEPTH=%d: want at least 0", c.MaxDepth))
	}
	if c.MaxURLLength < 0 {
		errs = append(errs, fmt.Errorf("TRAWL_MAX_URL_LENGTH=%d: want at least 0", c.MaxURLLength))
	}
	switch c.Scope {
	case "any", "host", "domain":
	default:
		errs = append(errs, fmt.Errorf("TRAWL_SCOPE=%q: want any, host or domain", c.Scope))
	}
	for name, re := range map[string]string{"TRAWL_INCLUDE": c.Include, "TRAWL_EXCLUDE": c.Exclude} {
		if _, err := regexp.Compile(re); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, re, err))
		}
	}
	return errors.Join(errs...)
}
