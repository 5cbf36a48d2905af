package polite

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/robotscache"
	"github.com/trawl/trawl/shared/urlnorm"
)

// RobotsMaxHops is how many redirects of a robots.txt are followed: RFC 9309 §2.3.1.2's
// "at least five consecutive redirects". A chain still redirecting after them counts as
// unavailable (robots.FromStatus).
const RobotsMaxHops = 5

// AcceptRobots is the Accept header of a robots.txt request, and AcceptEncoding the
// content coding it asks for (decoded by the client under the robots.txt limit): a host
// is asked for its robots.txt alike whichever process asks (RobotsHeader).
const (
	AcceptRobots   = "text/plain,*/*;q=0.8"
	AcceptEncoding = "gzip"
)

// RobotsHeader sets a robots.txt request's Accept and Accept-Encoding on hdr.
func RobotsHeader(hdr http.Header) {
	hdr["Accept"] = []string{AcceptRobots}
	hdr["Accept-Encoding"] = []string{AcceptEncoding}
}

// FollowRobots says whether a robots.txt chain goes on to location after its hop n (0:
// the origin's own /robots.txt): a redirect with a usable Location, within RobotsMaxHops.
func FollowRobots(n int, location string) bool { return location != "" && n < RobotsMaxHops }

// RobotsSettings are how long a robots.txt is kept and how much of it is read. The
// fetchers and the renderers fill and read one cache (robotscache), so both read these
// from the same variables, with the same defaults and ranges.
type RobotsSettings struct {
	TTL      time.Duration // TRAWL_ROBOTS_TTL: a robots.txt fetched
	ErrorTTL time.Duration // TRAWL_ROBOTS_ERROR_TTL: a robots.txt that could not be fetched
	MaxBytes int64         // TRAWL_ROBOTS_MAX_BYTES: how much of a robots.txt is parsed
}

// LoadRobotsSettings reads the robots.txt settings; Validate holds their ranges.
func LoadRobotsSettings(r *envconfig.Reader) RobotsSettings {
	return RobotsSettings{
		TTL:      r.Duration("ROBOTS_TTL", robotscache.DefaultTTL),
		ErrorTTL: r.Duration("ROBOTS_ERROR_TTL", robotscache.DefaultErrorTTL),
		MaxBytes: r.Bytes("ROBOTS_MAX_BYTES", robots.DefaultMaxBytes),
	}
}

// Validate accepts a TTL of at least a minute, an error TTL from a second to the TTL, and
// from RFC 9309's minimum (500 KiB) to 16 MiB of a file.
func (s RobotsSettings) Validate() error {
	var errs []error
	if s.TTL < time.Minute {
		errs = append(errs, fmt.Errorf("TRAWL_ROBOTS_TTL=%s: want at least 1m", s.TTL))
	}
	if s.ErrorTTL < time.Second || s.ErrorTTL > s.TTL {
		errs = append(errs, fmt.Errorf("TRAWL_ROBOTS_ERROR_TTL=%s: want 1s..TRAWL_ROBOTS_TTL", s.ErrorTTL))
	}
	if s.MaxBytes < robots.DefaultMaxBytes || s.MaxBytes > 16<<20 {
		errs = append(errs, fmt.Errorf("TRAWL_ROBOTS_MAX_BYTES=%d: want %d (500KiB, RFC 9309's minimum)..16MiB", s.MaxBytes, robots.DefaultMaxBytes))
	}
	return errors.Join(errs...)
}

// StoreOptions are the options of agent's robots.txt cache under prefix.
func (s RobotsSettings) StoreOptions(prefix, agent string) robotscache.StoreOptions {
	return robotscache.StoreOptions{Prefix: prefix, Agent: agent, TTL: s.TTL, ErrorTTL: s.ErrorTTL}
}

// RobotsMaxBytes is how much of a robots.txt is parsed. A fetch reads one octet more, so
// that robots.Parse knows the file went on and drops a cut line.
func (q *Requests) RobotsMaxBytes() int64 { return q.s.RobotsMaxBytes }

// RobotsAgent is the product token robots.txt is read for when r's requests are made: a
// policy's User-Agent names its own (robots.UserAgentToken), else TRAWL_ROBOTS_AGENT.
// robotscache.AgentPrefix keeps each token's entries apart.
func (q *Requests) RobotsAgent(r policy.Resolved) string {
	if r.UserAgent == nil {
		return q.s.RobotsAgent
	}
	tok := robots.UserAgentToken(*r.UserAgent)
	if tok == "" || tok == robots.AgentKey(q.s.RobotsAgent) {
		return q.s.RobotsAgent
	}
	return tok
}

// RobotsStores are the robots.txt caches of one process: TRAWL_ROBOTS_AGENT's, and one
// per agent token the site policies name, each under its own keys.
type RobotsStores struct {
	kv    robotscache.KV
	o     robotscache.StoreOptions
	def   *robotscache.Store
	mu    sync.Mutex
	other map[string]*robotscache.Store
}

// maxRobotsAgents bounds the caches kept; past it, a new agent's cache is built per call
// (its local copy is then lost, the Redis entry is not).
const maxRobotsAgents = 256

// NewRobotsStores returns the caches over kv; o is the default agent's (o.Agent is
// TRAWL_ROBOTS_AGENT, o.Prefix TRAWL_REDIS_PREFIX), the others' differ in agent and prefix.
func NewRobotsStores(kv robotscache.KV, o robotscache.StoreOptions) *RobotsStores {
	return &RobotsStores{kv: kv, o: o, def: robotscache.NewStore(kv, o), other: map[string]*robotscache.Store{}}
}

// Default is TRAWL_ROBOTS_AGENT's cache.
func (rs *RobotsStores) Default() *robotscache.Store { return rs.def }

// For is the cache of agent, a token Requests.RobotsAgent gave.
func (rs *RobotsStores) For(agent string) *robotscache.Store {
	if agent == rs.o.Agent {
		return rs.def
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if st, ok := rs.other[agent]; ok {
		return st
	}
	o := rs.o
	o.Prefix, o.Agent = robotscache.AgentPrefix(rs.o.Prefix, agent), agent
	st := robotscache.NewStore(rs.kv, o)
	if len(rs.other) < maxRobotsAgents {
		rs.other[agent] = st
	}
	return st
}

// Decide is the robots.txt decision for a request to u, e being its origin's entry for
// the agent its rule reads robots.txt for (RobotsAgent, RobotsStores.For): e's rules for
// u's path and query. An unreachable robots.txt refuses every request, /robots.txt itself
// included (which RFC 9309 would allow): the host is down, and waits.
func Decide(e *robots.Entry, u *url.URL) robots.Decision {
	d := e.Decide(u.RequestURI())
	if d.Class == robots.Unreachable {
		d.Allowed = false
	}
	return d
}

// IsRedirect says whether status is a redirect whose Location a client follows.
func IsRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// Location is where a response of status with the Location header loc sent from base
// redirects: resolved against base and normalised (urlnorm.Resolve), or "" when status is
// no redirect or loc is absent or unusable.
func Location(status int, base *url.URL, loc string) string {
	if !IsRedirect(status) || loc == "" {
		return ""
	}
	abs, err := urlnorm.Resolve(base, loc)
	if err != nil {
		return ""
	}
	return abs
}
