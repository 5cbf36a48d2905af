// Package config reads the renderer's settings from TRAWL_* environment variables.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/trawl/trawl/shared/crawlscope"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/urlnorm"
)

// DefaultHTTPAddr is the renderer's /metrics address.
const DefaultHTTPAddr = ":9105"

// Config is the renderer's configuration.
type Config struct {
	Common envconfig.Common
	// Scope is the crawl's scope settings; a browser request is refused by TRAWL_EXCLUDE
	// and TRAWL_MAX_URL_LENGTH (see services/renderer/README.md, "The renderer").
	Scope crawlscope.Settings
	// Norm is the URL form dedup gives every URL (TRAWL_STRIP_SESSION_IDS,
	// TRAWL_SORT_QUERY): a browser request is put in it before it is judged, claimed and
	// made, as the fetchers' URLs are.
	Norm urlnorm.Options
	// Policy is how the live site policies are followed (TRAWL_POLICY_POLL,
	// TRAWL_SECRETS_DIR): a blocked URL or one a rule excludes is refused in the page, and
	// a request carries its rule's request settings, as a fetcher's does.
	Policy policy.Settings
	// Politeness is the hosts' gap rule, the one the scheduler applies to fetchers: every
	// browser request claims its host under it (politeness.Claimer).
	Politeness politeness.Rules

	Chromium       string        // TRAWL_CHROMIUM: the browser binary
	Tabs           int           // TRAWL_RENDER_TABS: pages rendered at once
	Timeout        time.Duration // TRAWL_RENDER_TIMEOUT: one page, from load to DOM
	Settle         time.Duration // TRAWL_RENDER_SETTLE: network quiet after load before the DOM is taken
	JSHeap         int64         // TRAWL_RENDER_JS_HEAP: V8 old-space limit per page (bytes)
	MaxRSS         int64         // TRAWL_RENDER_MAX_RSS: the browser's resident memory, all processes (shared pages once), before it is restarted
	MaxAttempts    int           // TRAWL_RENDER_MAX_ATTEMPTS: deliveries of a task before the page is passed on unrendered
	RequestTimeout time.Duration // TRAWL_RENDER_REQUEST_TIMEOUT: one browser request Trawl makes, body included
	MaxBody        int64         // TRAWL_RENDER_MAX_BODY: largest subresource body
	CacheTTL       time.Duration // TRAWL_RENDER_CACHE_TTL: how long a fetched subresource is served to other pages
	CacheMaxBytes  int64         // TRAWL_RENDER_CACHE_BYTES: the shared subresource cache's size
	CacheMaxEntry  int64         // TRAWL_RENDER_CACHE_MAX_ENTRY: largest body cached
	// BrowserUser is "uid:gid", the user the browser runs as when the renderer runs as root
	// (TRAWL_RENDER_BROWSER_USER): Chromium's sandbox refuses root.
	BrowserUser      string
	BrowserUID       int
	BrowserGID       int
	AllowUnsandboxed bool // TRAWL_RENDER_ALLOW_UNSANDBOXED: run the browser without its sandbox where the kernel has none

	UserAgent   string                // TRAWL_USER_AGENT
	RobotsAgent string                // TRAWL_ROBOTS_AGENT
	Robots      polite.RobotsSettings // the fetchers' settings: both fill one cache
	// RequestSettings are TRAWL_DIAL_TIMEOUT, TRAWL_BODY_INLINE_MAX, TRAWL_ALLOW_CIDRS and
	// TRAWL_RESOLVE, the fetchers' settings.
	polite.RequestSettings

	userErr error
}

// Load reads the configuration; Validate checks the values.
func Load(r *envconfig.Reader) (Config, error) {
	c := Config{
		Common:         envconfig.LoadCommon(r, DefaultHTTPAddr),
		Scope:          crawlscope.Load(r),
		Norm:           envconfig.LoadURLNorm(r),
		Politeness:     politeness.Load(r),
		Policy:         policy.Load(r),
		Chromium:       r.String("CHROMIUM", "/usr/bin/chromium"),
		Tabs:           r.Int("RENDER_TABS", 4),
		Timeout:        r.Duration("RENDER_TIMEOUT", 60*time.Second),
		Settle:         r.Duration("RENDER_SETTLE", 500*time.Millisecond),
		JSHeap:         r.Bytes("RENDER_JS_HEAP", 256<<20),
		MaxRSS:         r.Bytes("RENDER_MAX_RSS", 2<<30),
		MaxAttempts:    r.Int("RENDER_MAX_ATTEMPTS", 3),
		RequestTimeout: r.Duration("RENDER_REQUEST_TIMEOUT", 15*time.Second),
		MaxBody:        r.Bytes("RENDER_MAX_BODY", 8<<20),
		CacheTTL:       r.Duration("RENDER_CACHE_TTL", time.Hour),
		CacheMaxBytes:  r.Bytes("RENDER_CACHE_BYTES", 1<<30),
		CacheMaxEntry:  r.Bytes("RENDER_CACHE_MAX_ENTRY", 2<<20),
		BrowserUser:    r.String("RENDER_BROWSER_USER", "65534:65534"),
		// Off unless the operator accepts what it risks (see services/renderer/README.md, "The renderer").
		AllowUnsandboxed: r.Bool("RENDER_ALLOW_UNSANDBOXED", false),
		UserAgent:        robots.LoadUserAgent(r),
		RobotsAgent:      robots.LoadAgent(r),
		Robots:           polite.LoadRobotsSettings(r),
		RequestSettings:  polite.LoadRequestSettings(r),
	}
	c.BrowserUID, c.BrowserGID, c.userErr = parseUser(c.BrowserUser)
	return c, r.Err()
}

// parseUser reads "uid:gid", numeric ids of a user that is not root.
func parseUser(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	if ok {
		uid, err = strconv.Atoi(u)
		if err == nil {
			gid, err = strconv.Atoi(g)
		}
	}
	switch {
	case !ok || err != nil || uid < 0 || gid < 0:
		return 0, 0, errors.New("want numeric uid:gid")
	case uid == 0 || gid == 0:
		return 0, 0, errors.New("want a user and group that are not root: Chromium's sandbox refuses root")
	}
	return uid, gid, nil
}

// Defaults is the configuration with every variable unset.
func Defaults() Config {
	c, _ := Load(&envconfig.Reader{Lookup: func(string) (string, bool) { return "", false }})
	return c
}

// Polite are the settings the renderer's requests are resolved with (polite.New), as
// every process making requests reads them.
func (c Config) Polite() polite.Settings {
	return polite.Settings{RobotsAgent: c.RobotsAgent, RobotsMaxBytes: c.Robots.MaxBytes, SecretsDir: c.Policy.SecretsDir}
}

// Validate reports every invalid setting at once.
func (c Config) Validate() error {
	errs := []error{c.Common.Validate(), c.RequestSettings.Validate(), c.Politeness.Validate(), c.Scope.Validate(), c.Policy.Validate()}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Chromium == "" {
		bad("TRAWL_CHROMIUM is empty: want the path of a Chromium binary")
	}
	if c.Tabs < 1 || c.Tabs > 64 {
		bad("TRAWL_RENDER_TABS=%d: want 1..64", c.Tabs)
	}
	if c.Timeout < 2*time.Second || c.Timeout > 10*time.Minute {
		bad("TRAWL_RENDER_TIMEOUT=%s: want 2s..10m", c.Timeout)
	}
	if c.Settle < 0 || c.Settle >= c.Timeout {
		bad("TRAWL_RENDER_SETTLE=%s: want 0..TRAWL_RENDER_TIMEOUT (%s)", c.Settle, c.Timeout)
	}
	if c.JSHeap != 0 && (c.JSHeap < 16<<20 || c.JSHeap > 16<<30) {
		bad("TRAWL_RENDER_JS_HEAP=%d: want 0 (Chromium's own) or 16MiB..16GiB", c.JSHeap)
	}
	if c.MaxRSS != 0 && c.MaxRSS < 128<<20 {
		bad("TRAWL_RENDER_MAX_RSS=%d: want 0 (no watch) or at least 128MiB", c.MaxRSS)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 20 {
		bad("TRAWL_RENDER_MAX_ATTEMPTS=%d: want 1..20", c.MaxAttempts)
	}
	if c.RequestTimeout < time.Second || c.RequestTimeout > c.Timeout {
		bad("TRAWL_RENDER_REQUEST_TIMEOUT=%s: want 1s..TRAWL_RENDER_TIMEOUT (%s)", c.RequestTimeout, c.Timeout)
	}
	if c.MaxBody < 1<<10 || c.MaxBody > 64<<20 {
		bad("TRAWL_RENDER_MAX_BODY=%d: want 1KiB..64MiB", c.MaxBody)
	}
	if c.CacheTTL < 0 || c.CacheTTL > 7*24*time.Hour {
		bad("TRAWL_RENDER_CACHE_TTL=%s: want 0 (no cache)..168h", c.CacheTTL)
	}
	if c.CacheTTL > 0 && c.CacheMaxBytes < 1<<20 {
		bad("TRAWL_RENDER_CACHE_BYTES=%d: want at least 1MiB", c.CacheMaxBytes)
	}
	if c.CacheMaxEntry < 0 || c.CacheMaxEntry > c.MaxBody {
		bad("TRAWL_RENDER_CACHE_MAX_ENTRY=%d: want 0..TRAWL_RENDER_MAX_BODY", c.CacheMaxEntry)
	}
	// A task is marked in progress every third of the ack wait; the wait must leave room.
	if c.Common.AckWait < 3*time.Second {
		bad("TRAWL_ACK_WAIT=%s: the renderer wants at least 3s", c.Common.AckWait)
	}
	if err := robots.CheckAgent(c.RobotsAgent); err != nil {
		errs = append(errs, err)
	}
	if err := robots.CheckUserAgent(c.UserAgent); err != nil {
		errs = append(errs, err)
	}
	if err := c.Robots.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.userErr != nil {
		bad("TRAWL_RENDER_BROWSER_USER=%q: %w", c.BrowserUser, c.userErr)
	}
	return errors.Join(errs...)
}
