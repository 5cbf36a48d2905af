// Package inspect explains what the crawl knows about one URL, for `trawlctl explain`:
// whether the seen test has it, whether it is in scope, what the cached robots.txt says,
// where it is in the frontier, the politeness state of its host, and what is known of its
// last fetch. It only reads: every answer comes from the keys documented in
// services/scheduler/README.md, so it never disturbs the crawl.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/bloomhash"
	"github.com/trawl/trawl/shared/crawlscope"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/robotscache"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

// Options describe the deployment the URL is explained against.
type Options struct {
	Prefix      string
	Shards      int
	BloomParts  int // TRAWL_BLOOM_PARTS: the seen filter's parts, as dedup made it; 0 = 1
	FrontQueues int // F; 0 = probe every queue a scheduler may have (64)
	Agent       string
	// Rule is the URL-only scope rule the parser follows links by.
	Rule crawlscope.Rule
	// ScanLimit bounds how many entries of each queue are searched for the URL (queues
	// can hold millions; a list cannot be searched by value cheaply). Default 10000.
	ScanLimit int
	Now       func() time.Time
	// Rules are the live site policies (nil: none could be read, RulesNote says why), and
	// Limits the process-wide settings that decide what no rule sets.
	Rules     *policy.Set
	RulesNote string
	Limits    Limits
}

// Report is the explanation; every section says what it could not know.
type Report struct {
	Input     string         `json:"input"`
	URL       string         `json:"url"` // normalised
	Host      string         `json:"host"`
	Origin    string         `json:"origin"`
	Shard     int            `json:"shard"`
	Seen      SeenReport     `json:"seen"`
	Scope     ScopeReport    `json:"scope"`
	Robots    RobotsReport   `json:"robots"`
	Frontier  FrontierReport `json:"frontier"`
	HostState HostReport     `json:"host_state"`
	LastFetch string         `json:"last_fetch"`
	// Outcome is the URL's newest line in its shard's error log: a retried or failed
	// outcome, or an expired lease, with its reason ("attempts exhausted after N attempts:
	// …" once its attempts ran out). OutcomeNote says where it was looked for when absent.
	Outcome     *frontierkeys.ErrorRecord `json:"outcome,omitempty"`
	OutcomeNote string                    `json:"outcome_note,omitempty"`
	// TaskError is the last error the fetcher holding the URL's task reported (while the
	// task is out, or the host's task if it is another URL's).
	TaskError *frontierkeys.LeaseError `json:"task_error,omitempty"`
	// Recrawl is the URL's recrawl history from CRAWL_RECRAWL (TRAWL_RECRAWL=adaptive);
	// RecrawlNote says why there is none.
	Recrawl     *recrawl.History `json:"recrawl,omitempty"`
	RecrawlNote string           `json:"recrawl_note,omitempty"`
	// Policy is the URL's live site policy: each limit and what decided it.
	Policy PolicyReport `json:"policy"`
	// Render is whether the page was or would be rendered in a browser, and why.
	Render *RenderReport `json:"render,omitempty"`
}

// RenderReport is the parser's render decision for the URL: the last one it kept
// (Kept), or what the settings say when it kept none.
type RenderReport struct {
	Mode   string            `json:"mode"` // TRAWL_RENDER as trawlctl reads it
	Kept   *renderconf.Why   `json:"kept,omitempty"`
	Reason renderconf.Reason `json:"reason,omitempty"` // from the settings when none is kept
	Render bool              `json:"render"`
	Note   string            `json:"note"`
}

// SeenReport is the Bloom filter's answer.
type SeenReport struct {
	State  string          `json:"state"` // "seen", "not seen", "unknown"
	Detail string          `json:"detail"`
	Bits   [][]bool        `json:"bits,omitempty"` // per layer of the filter, oldest first
	Filter *bloomhash.Meta `json:"filter,omitempty"`
}

// ScopeReport is what can be told about scope without the linking page.
type ScopeReport struct {
	Length       int    `json:"length"`
	MaxURLLength int    `json:"max_url_length"`
	TooLong      bool   `json:"too_long"`
	Trap         bool   `json:"trap"`
	Excluded     bool   `json:"excluded"`
	NotIncluded  bool   `json:"not_included"`
	Depth        *int   `json:"depth,omitempty"` // known when the URL was found in a queue
	MaxDepth     int    `json:"max_depth"`
	TooDeep      bool   `json:"too_deep"`
	Verdict      string `json:"verdict"`
}

// RobotsReport is the cached robots.txt verdict for the URL's origin.
type RobotsReport struct {
	Cached     bool          `json:"cached"`
	Key        string        `json:"key"`
	Class      string        `json:"class,omitempty"`
	Status     int           `json:"status,omitempty"`
	FetchedAt  *time.Time    `json:"fetched_at,omitempty"`
	ExpiresIn  time.Duration `json:"expires_in_ns,omitempty"`
	Agent      string        `json:"agent,omitempty"`
	Allowed    *bool         `json:"allowed,omitempty"`
	Reason     string        `json:"reason,omitempty"`
	Rule       string        `json:"rule,omitempty"`
	CrawlDelay time.Duration `json:"crawl_delay_ns,omitempty"`
	Error      string        `json:"error,omitempty"`
	Note       string        `json:"note,omitempty"`
}

// QueueHit is the result of searching one queue for the URL.
type QueueHit = frontierkeys.QueueHit

// FrontierReport is the URL's and its host's place in the shard's frontier.
type FrontierReport struct {
	Paused     bool       `json:"paused"`
	HostActive bool       `json:"host_active"` // holds a back queue
	HeapNext   *time.Time `json:"heap_next,omitempty"`
	Ready      bool       `json:"ready"`
	// Lease is the host's task out, if any.
	LeaseToken    string     `json:"lease_token,omitempty"`
	LeaseDeadline *time.Time `json:"lease_deadline,omitempty"`
	LeaseURL      string     `json:"lease_url,omitempty"`
	InFlight      bool       `json:"in_flight"` // this URL is the task out
	BackQueue     QueueHit   `json:"back_queue"`
	FrontQueues   []QueueHit `json:"front_queues"`
	Summary       string     `json:"summary"`
}

// HostReport is the host's politeness state (host:<host>).
type HostReport struct {
	Known      bool              `json:"known"`
	Next       *time.Time        `json:"next,omitempty"`
	CrawlDelay time.Duration     `json:"crawl_delay_ns,omitempty"`
	ErrStreak  int64             `json:"error_streak"`
	Fails      int64             `json:"fails"`             // consecutive failures toward retirement
	Retired    *time.Time        `json:"retired,omitempty"` // the host was retired after a failure streak
	Pages      *int64            `json:"pages,omitempty"`
	ExpiresIn  time.Duration     `json:"expires_in_ns,omitempty"` // the state of an inactive host expires
	Other      map[string]string `json:"other,omitempty"`         // fields this trawlctl does not know
	// Server is the address the host was last requested at and that address's state
	// (per-server politeness); nil when no outcome named an address.
	Server *ServerReport `json:"server,omitempty"`
}

// ServerReport is a server address's state (politeness.ServerKey).
type ServerReport struct {
	Addr string `json:"addr"`
	// Known: the address has state; without it (never claimed under TRAWL_POLITENESS=ip,
	// or idle for an hour) it is free.
	Known         bool          `json:"known"`
	Busy          bool          `json:"busy"`                      // a request to it is in flight
	InFlightUntil *time.Time    `json:"in_flight_until,omitempty"` // the claim of that request ends by then
	Next          *time.Time    `json:"next,omitempty"`            // no request to it before then
	LastHost      string        `json:"last_host,omitempty"`       // the host last requested at it
	LastResponse  time.Duration `json:"last_response_ns,omitempty"`
}

// ErrURL marks an input that is not a crawlable URL.
var ErrURL = errors.New("invalid URL")

// Explain builds the report for rawURL.
func Explain(ctx context.Context, rdb redis.UniversalClient, o Options, rawURL string) (*Report, error) {
	if o.ScanLimit <= 0 {
		o.ScanLimit = 10000
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	norm, err := urlnorm.Normalize(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrURL, rawURL, err)
	}
	host, err := urlnorm.Host(norm)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrURL, rawURL, err)
	}
	origin, err := urlnorm.Origin(norm)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrURL, rawURL, err)
	}
	r := &Report{Input: rawURL, URL: norm, Host: host, Origin: origin}
	r.Shard = topology.ShardOf(r.Host, o.Shards)
	robotsKey := robotscache.Key(o.Prefix, r.Origin)

	// The robots entry in one round trip; the seen filter and the frontier through their
	// owners' read-only APIs (bloomhash.Reader, frontierkeys.Reader).
	var (
		robotsRaw *redis.StringCmd
		robotsTTL *redis.DurationCmd
	)
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		robotsRaw = p.Get(ctx, robotsKey)
		robotsTTL = p.PTTL(ctx, robotsKey)
		return nil
	})
	// redis.Nil only says one of the keys is absent, which each section reports itself.
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("explain: redis: %w", err)
	}
	fs, err := frontierkeys.OpenReadOnly(rdb, o.Prefix, o.Shards).Explain(ctx, r.Shard, r.Host, norm,
		frontierkeys.ExplainOptions{FrontQueues: o.FrontQueues, ScanLimit: o.ScanLimit})
	if err != nil {
		return nil, err
	}

	if err := r.seen(ctx, bloomhash.OpenReadOnly(rdb, o.Prefix, o.BloomParts)); err != nil {
		return nil, err
	}
	r.robots(robotsKey, robotsRaw, robotsTTL, o.Agent)
	r.host(fs.Host)
	if err := r.server(ctx, rdb, o.Prefix, now()); err != nil {
		return nil, err
	}

	f := &r.Frontier
	f.Paused = fs.Paused
	f.HostActive = fs.HostActive
	if t := fs.HeapNext; t != nil {
		f.HeapNext, f.Ready = t, !t.After(now())
	}
	f.LeaseDeadline = fs.LeaseDeadline
	f.LeaseToken = fs.LeaseToken
	if e := fs.Lease; e != nil {
		f.LeaseURL = e.URL
		if e.URL == norm {
			f.InFlight = true
			d := e.Depth
			r.Scope.Depth = &d
		}
	}
	r.TaskError = fs.TaskError
	r.Outcome = fs.Outcome
	if r.Outcome == nil {
		r.OutcomeNote = fmt.Sprintf("not among the last %d retried or failed outcomes and expired leases of shard %d (%s)", fs.ErrorsRead, r.Shard, fs.ErrorsKey)
	}
	f.BackQueue = fs.BackQueue
	if f.BackQueue.Found {
		d := f.BackQueue.Depth
		r.Scope.Depth = &d
	}
	for _, hit := range fs.FrontQueues {
		if hit.Found && r.Scope.Depth == nil {
			d := hit.Depth
			r.Scope.Depth = &d
		}
		f.FrontQueues = append(f.FrontQueues, hit)
	}
	f.Summary = f.summary(o.ScanLimit)
	rules := o.Rules
	if rules == nil {
		rules = policy.Empty()
		r.Policy.Note = o.RulesNote
	}
	lim := o.Limits
	lim.MaxDepth = o.Rule.MaxDepth
	r.policy(rules, lim, r.Scope.Depth)
	if fs.Parked != "" {
		pr := &ParkReport{Key: fs.ParkKey, Queued: fs.ParkQueued, Reason: fs.Parked}
		if ph := fs.ParkedHost; ph != nil {
			pr.Reason, pr.Entries, pr.Rule = ph.Reason, ph.Entries, ph.Rule
		}
		r.Policy.Parked = pr
	} else if fs.ParkQueued > 0 {
		r.Policy.Parked = &ParkReport{Key: fs.ParkKey, Queued: fs.ParkQueued}
	}
	r.scope(o)
	r.LastFetch = fmt.Sprintf("unknown: JetStream keeps the fetch log (%s) and pages (%s) by sequence and subject, not by URL, so there is no cheap lookup; "+
		"search it with: trawlctl tap -from-start %s | grep -F '\"url\":\"%s\"'",
		topology.FetchedSubject(r.Shard), topology.SubjectPages, topology.FetchedSubject(r.Shard), norm)
	return r, nil
}

func (r *Report) seen(ctx context.Context, f *bloomhash.Reader) error {
	parts := f.Parts()
	m, key, err := f.PartMeta(ctx, r.URL)
	switch {
	case errors.Is(err, bloomhash.ErrNoFilter):
		r.Seen = SeenReport{State: "unknown", Detail: fmt.Sprintf("no Bloom filter under %s (dedup has not started with this TRAWL_REDIS_PREFIX, "+
			"or with another TRAWL_BLOOM_PARTS than %d)", key, parts)}
		return nil
	case errors.Is(err, bloomhash.ErrScheme) || errors.Is(err, bloomhash.ErrMeta):
		r.Seen = SeenReport{State: "unknown", Detail: err.Error()}
		return nil
	case err != nil:
		return fmt.Errorf("explain: redis: %w", err)
	case m.Parts != parts:
		r.Seen = SeenReport{State: "unknown", Detail: fmt.Sprintf("the Bloom filter under %s is made of %d parts, TRAWL_BLOOM_PARTS says %d: set it as dedup has it",
			key, m.Parts, parts)}
		return nil
	}
	bits, seen, err := f.Test(ctx, m, r.URL)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	var counts []string
	layer := -1
	for i, bs := range bits {
		set := 0
		for _, b := range bs {
			if b {
				set++
			}
		}
		if set == len(bs) && layer < 0 {
			layer = i
		}
		counts = append(counts, fmt.Sprintf("%d of %d", set, len(bs)))
	}
	r.Seen = SeenReport{Bits: bits, Filter: &m}
	if seen {
		r.Seen.State = "seen"
		r.Seen.Detail = fmt.Sprintf("all %d bits set in layer %d of %d: dedup has passed this URL on once and drops it now (or it is a false positive, below %g overall)",
			len(bits[layer]), layer, len(bits), m.FPRate)
	} else {
		r.Seen.State = "not seen"
		r.Seen.Detail = fmt.Sprintf("bits set per layer: %s; no layer has them all: dedup would pass it on as new", strings.Join(counts, ", "))
	}
	return nil
}

func (r *Report) robots(key string, raw *redis.StringCmd, ttl *redis.DurationCmd, agent string) {
	rr := &r.Robots
	rr.Key = key
	data, err := raw.Bytes()
	if err != nil {
		rr.Note = "not cached: the next task for this origin fetches robots.txt first"
		return
	}
	e, err := robots.UnmarshalEntry(data)
	if err != nil {
		rr.Note = "cached entry cannot be decoded (" + err.Error() + "): the fetchers treat it as a miss"
		return
	}
	rr.Cached = true
	rr.Class, rr.Status, rr.Agent, rr.Error = e.Class.String(), e.Status, e.Agent, e.Error
	t := e.FetchedAt
	rr.FetchedAt = &t
	if d, err := ttl.Result(); err == nil && d > 0 {
		rr.ExpiresIn = d
	}
	d, err := robots.Decide(e, "", r.URL)
	if err != nil {
		rr.Note = err.Error()
		return
	}
	rr.Allowed = &d.Allowed
	rr.Reason, rr.Rule, rr.CrawlDelay = string(d.Reason), d.Rule, d.CrawlDelay
	if agent != "" && e.Class == robots.Parsed && robots.AgentKey(agent) != e.Agent {
		rr.Note = fmt.Sprintf("the entry was reduced for agent %q, not TRAWL_ROBOTS_AGENT=%q: fetchers with that agent treat it as a miss", e.Agent, robots.AgentKey(agent))
	}
}

func (r *Report) host(h frontierkeys.HostState) {
	if !h.Known {
		return
	}
	r.HostState = HostReport{Known: true, Next: h.Next, CrawlDelay: h.CrawlDelay, ErrStreak: h.ErrStreak, Fails: h.Fails,
		Retired: h.Retired, Pages: h.Pages, ExpiresIn: h.ExpiresIn, Other: h.Other}
	if h.Addr != "" {
		r.HostState.Server = &ServerReport{Addr: h.Addr}
	}
}

// server reads the state of the address the host was last requested at.
func (r *Report) server(ctx context.Context, rdb redis.UniversalClient, prefix string, now time.Time) error {
	sr := r.HostState.Server
	if sr == nil {
		return nil
	}
	addr, err := netip.ParseAddr(sr.Addr)
	if err != nil {
		return nil // reported as stored, with no state to read
	}
	st, err := politeness.ReadServer(ctx, rdb, prefix, addr)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	sr.Known, sr.Busy, sr.LastHost, sr.LastResponse = st.Known, st.Busy(now), st.LastHost, st.LastResponse
	if !st.InFlightUntil.IsZero() {
		t := st.InFlightUntil
		sr.InFlightUntil = &t
	}
	if !st.Next.IsZero() {
		t := st.Next
		sr.Next = &t
	}
	return nil
}

// scope tells every URL-only rule that refuses the URL, where the parser stops at the first.
func (r *Report) scope(o Options) {
	s, rule := &r.Scope, &o.Rule
	s.Length, s.MaxURLLength, s.MaxDepth = len(r.URL), rule.MaxURLLength, rule.MaxDepth
	s.TooLong = rule.TooLong(r.URL)
	s.Trap = rule.Trap(r.URL)
	s.Excluded = rule.Excluded(r.URL)
	s.NotIncluded = rule.NotIncluded(r.URL)
	if s.Depth != nil {
		s.TooDeep = rule.TooDeep(*s.Depth)
	}
	var why []string
	if s.TooLong {
		why = append(why, fmt.Sprintf("longer than TRAWL_MAX_URL_LENGTH (%d > %d)", s.Length, rule.MaxURLLength))
	}
	if s.Trap {
		why = append(why, "a path segment repeats 3+ times (trap rule)")
	}
	if s.Excluded {
		why = append(why, "matches TRAWL_EXCLUDE")
	}
	if s.NotIncluded {
		why = append(why, "does not match TRAWL_INCLUDE")
	}
	if s.TooDeep {
		why = append(why, fmt.Sprintf("queued at depth %d > TRAWL_MAX_DEPTH %d", *s.Depth, rule.MaxDepth))
	}
	if !r.Policy.Admitted && r.Policy.Why != "" {
		why = append(why, "refused by a site policy: "+r.Policy.Why)
	}
	if len(why) > 0 {
		s.Verdict = "out of scope: " + strings.Join(why, "; ") + " (the parser does not follow links to it)"
		return
	}
	s.Verdict = fmt.Sprintf("passes the URL-only rules (length %d ≤ %d, no trap, include/exclude)", s.Length, rule.MaxURLLength)
	if rule.MaxURLLength == 0 {
		s.Verdict = "passes the URL-only rules (no length limit, no trap, include/exclude)"
	}
	if s.Depth == nil {
		s.Verdict += "; scope depends on depth and on the linking page (TRAWL_SCOPE), which an arbitrary URL does not carry"
	}
}

func (f *FrontierReport) summary(limit int) string {
	var parts []string
	switch {
	case f.InFlight:
		parts = append(parts, "in flight now (its host's task)")
	case f.BackQueue.Found:
		parts = append(parts, fmt.Sprintf("waiting in its host's back queue at position %d", f.BackQueue.Index))
	}
	for _, q := range f.FrontQueues {
		if q.Found {
			parts = append(parts, fmt.Sprintf("waiting in front queue %s at position %d", q.Queue, q.Index))
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "; ")
	}
	partial := !f.BackQueue.Complete()
	for _, q := range f.FrontQueues {
		partial = partial || !q.Complete()
	}
	if partial {
		return fmt.Sprintf("not found in the first %d entries of each queue (longer queues were not searched to the end)", limit)
	}
	return "not queued in this shard's frontier (never accepted, already done, or still upstream in crawl.discovered / crawl.frontier)"
}

// sortedKeys is for stable output of maps.
func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
