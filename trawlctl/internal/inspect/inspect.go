// Package inspect explains what the crawl knows about one URL, for `trawlctl explain`:
// whether the seen test has it, whether it is in scope, what the cached robots.txt says,
// where it is in the frontier, the politeness state of its host, and what is known of its
// last fetch. It only reads: every answer comes from the keys documented in
// docs/architecture.md, so it never disturbs the crawl.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

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
	"github.com/trawl/trawl/trawlctl/internal/bloom"
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
	State  string      `json:"state"` // "seen", "not seen", "unknown"
	Detail string      `json:"detail"`
	Bits   [][]bool    `json:"bits,omitempty"` // per layer of the filter, oldest first
	Filter *bloom.Meta `json:"filter,omitempty"`
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
type QueueHit struct {
	Queue   string `json:"queue"`
	Len     int64  `json:"len"`
	Scanned int64  `json:"scanned"`
	Found   bool   `json:"found"`
	Index   int64  `json:"index,omitempty"` // 0 = head (next to go)
	Depth   int    `json:"depth,omitempty"`
	Hops    int    `json:"hops,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
}

// Complete says the whole queue was searched.
func (q QueueHit) Complete() bool { return q.Scanned >= q.Len }

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
	probe := o.FrontQueues <= 0
	if probe {
		o.FrontQueues = frontierkeys.MaxFrontQueues
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	norm, err := urlnorm.Normalize(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrURL, rawURL, err)
	}
	u, err := url.Parse(norm)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrURL, rawURL, err)
	}
	r := &Report{Input: rawURL, URL: norm, Host: strings.ToLower(u.Hostname()), Origin: u.Scheme + "://" + u.Host}
	r.Shard = topology.ShardOf(r.Host, o.Shards)
	ks := frontierkeys.ForShard(o.Prefix, r.Shard)
	robotsKey := robotscache.Key(o.Prefix, r.Origin)

	// Everything but the Bloom bits and the queue scans in one round trip.
	var (
		meta, hostHash           *redis.MapStringStringCmd
		robotsRaw, lease         *redis.StringCmd
		lastErr                  *redis.StringCmd
		errLog                   *redis.StringSliceCmd
		robotsTTL, hostTTL       *redis.DurationCmd
		active                   *redis.BoolCmd
		paused, bqLen            *redis.IntCmd
		heapScore, inflightScore *redis.FloatCmd
		parked                   *redis.StringCmd
		parkLen                  *redis.IntCmd
		fqLen                    = make([]*redis.IntCmd, o.FrontQueues)
	)
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HGetAll(ctx, bloom.MetaKey(o.Prefix, bloom.Tag(norm, o.BloomParts)))
		robotsRaw = p.Get(ctx, robotsKey)
		robotsTTL = p.PTTL(ctx, robotsKey)
		active = p.HExists(ctx, ks.Hosts(), r.Host)
		heapScore = p.ZScore(ctx, ks.Heap(), r.Host)
		inflightScore = p.ZScore(ctx, ks.Inflight(), r.Host)
		lease = p.HGet(ctx, ks.Lease(), r.Host)
		lastErr = p.HGet(ctx, ks.LastErr(), r.Host)
		errLog = p.LRange(ctx, ks.Errors(), 0, -1)
		hostHash = p.HGetAll(ctx, ks.Host(r.Host))
		hostTTL = p.PTTL(ctx, ks.Host(r.Host))
		paused = p.Exists(ctx, ks.Paused())
		bqLen = p.LLen(ctx, ks.BackQueue(r.Host))
		parked = p.HGet(ctx, ks.Parked(), r.Host)
		parkLen = p.LLen(ctx, ks.Park(r.Host))
		for q := range fqLen {
			fqLen[q] = p.LLen(ctx, ks.FrontQueue(q))
		}
		return nil
	})
	// redis.Nil only says one of the keys is absent, which each section reports itself.
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("explain: redis: %w", err)
	}

	if err := r.seen(ctx, rdb, o.Prefix, max(1, o.BloomParts), meta.Val()); err != nil {
		return nil, err
	}
	r.robots(robotsKey, robotsRaw, robotsTTL, o.Agent)
	r.host(hostHash.Val(), hostTTL)
	if err := r.server(ctx, rdb, o.Prefix, now()); err != nil {
		return nil, err
	}

	f := &r.Frontier
	f.Paused = paused.Val() > 0
	f.HostActive = active.Val()
	if s, err := heapScore.Result(); err == nil {
		t := time.UnixMilli(int64(s))
		f.HeapNext, f.Ready = &t, !t.After(now())
	}
	if s, err := inflightScore.Result(); err == nil {
		t := time.UnixMilli(int64(s))
		f.LeaseDeadline = &t
	}
	if v, err := lease.Result(); err == nil {
		tok, e, err := frontierkeys.ParseLease(v)
		f.LeaseToken = tok
		if err == nil {
			f.LeaseURL = e.URL
			if e.URL == norm {
				f.InFlight = true
				r.Scope.Depth = &e.Depth
			}
		}
	}
	if v, err := lastErr.Result(); err == nil {
		if le, ok := frontierkeys.ParseLeaseError(v); ok && le.Token == f.LeaseToken {
			r.TaskError = &le
		}
	}
	for _, line := range errLog.Val() {
		if rec, ok := frontierkeys.ParseErrorRecord(line); ok && rec.URL == norm {
			r.Outcome = &rec
			break
		}
	}
	if r.Outcome == nil {
		r.OutcomeNote = fmt.Sprintf("not among the last %d retried or failed outcomes and expired leases of shard %d (%s)", len(errLog.Val()), r.Shard, ks.Errors())
	}
	f.BackQueue, err = scan(ctx, rdb, ks.BackQueue(r.Host), frontierkeys.BackQueueName(r.Host), bqLen.Val(), norm, o.ScanLimit)
	if err != nil {
		return nil, err
	}
	if f.BackQueue.Found {
		d := f.BackQueue.Depth
		r.Scope.Depth = &d
	}
	shown := len(fqLen)
	if probe {
		// Report the scheduler's default eight, or up to the last queue holding anything.
		shown = 8
		for q, c := range fqLen {
			if c.Val() > 0 {
				shown = max(shown, q+1)
			}
		}
	}
	for q, c := range fqLen[:shown] {
		hit, err := scan(ctx, rdb, ks.FrontQueue(q), frontierkeys.FrontQueueName(q), c.Val(), norm, o.ScanLimit)
		if err != nil {
			return nil, err
		}
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
	if v, err := parked.Result(); err == nil {
		pr := &ParkReport{Key: ks.Park(r.Host), Queued: parkLen.Val(), Reason: v}
		if ph, ok := frontierkeys.ParseParked(r.Host, v); ok {
			pr.Reason, pr.Entries, pr.Rule = ph.Reason, ph.Entries, ph.Rule
		}
		r.Policy.Parked = pr
	} else if n := parkLen.Val(); n > 0 {
		r.Policy.Parked = &ParkReport{Key: ks.Park(r.Host), Queued: n}
	}
	r.scope(o)
	r.LastFetch = fmt.Sprintf("unknown: JetStream keeps the fetch log (%s) and pages (%s) by sequence and subject, not by URL, so there is no cheap lookup; "+
		"search it with: trawlctl tap -from-start %s | grep -F '\"url\":\"%s\"'",
		topology.FetchedSubject(r.Shard), topology.SubjectPages, topology.FetchedSubject(r.Shard), norm)
	return r, nil
}

func (r *Report) seen(ctx context.Context, rdb redis.UniversalClient, prefix string, parts int, h map[string]string) error {
	tag := bloom.Tag(r.URL, parts)
	m, err := bloom.ParseMeta(h)
	switch {
	case errors.Is(err, bloom.ErrNoFilter):
		r.Seen = SeenReport{State: "unknown", Detail: fmt.Sprintf("no Bloom filter under %s (dedup has not started with this TRAWL_REDIS_PREFIX, "+
			"or with another TRAWL_BLOOM_PARTS than %d)", bloom.MetaKey(prefix, tag), parts)}
		return nil
	case err != nil:
		r.Seen = SeenReport{State: "unknown", Detail: err.Error()}
		return nil
	case m.Parts != parts:
		r.Seen = SeenReport{State: "unknown", Detail: fmt.Sprintf("the Bloom filter under %s is made of %d parts, TRAWL_BLOOM_PARTS says %d: set it as dedup has it",
			bloom.MetaKey(prefix, tag), m.Parts, parts)}
		return nil
	}
	bits, seen, err := m.Test(ctx, rdb, prefix, tag, r.URL)
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

func (r *Report) host(h map[string]string, ttl *redis.DurationCmd) {
	hr := &r.HostState
	if len(h) == 0 {
		return
	}
	hr.Known = true
	if d, err := ttl.Result(); err == nil && d > 0 {
		hr.ExpiresIn = d
	}
	for k, v := range h {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case k == frontierkeys.HostNext && err == nil:
			t := time.UnixMilli(n)
			hr.Next = &t
		case k == frontierkeys.HostCD && err == nil:
			hr.CrawlDelay = time.Duration(n) * time.Millisecond
		case k == frontierkeys.HostErr && err == nil:
			hr.ErrStreak = n
		case k == frontierkeys.HostFails && err == nil:
			hr.Fails = n
		case k == frontierkeys.HostRetired && err == nil:
			t := time.UnixMilli(n)
			hr.Retired = &t
		case k == frontierkeys.HostPages && err == nil:
			hr.Pages = &n
		case k == frontierkeys.HostAddr:
			hr.Server = &ServerReport{Addr: v}
		case k == frontierkeys.HostPolicy:
			// The frontier's copy of the policy lookup; explain reports the rules themselves.
		default:
			if hr.Other == nil {
				hr.Other = map[string]string{}
			}
			hr.Other[k] = v
		}
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

// scanChunk is how many entries one LRANGE returns.
const scanChunk = 1000

// scan searches the first limit entries of a list for the URL, a chunk per round trip.
func scan(ctx context.Context, rdb redis.UniversalClient, key, name string, length int64, u string, limit int) (QueueHit, error) {
	hit := QueueHit{Queue: name, Len: length}
	end := min(length, int64(limit))
	for start := int64(0); start < end; start += scanChunk {
		stop := min(start+scanChunk, end) - 1
		es, err := rdb.LRange(ctx, key, start, stop).Result()
		if err != nil {
			return hit, fmt.Errorf("explain: scan %s: %w", key, err)
		}
		for i, e := range es {
			en, err := frontierkeys.ParseEntry(e)
			if err == nil && en.URL == u {
				hit.Found, hit.Index, hit.Depth, hit.Hops, hit.Attempt = true, start+int64(i), en.Depth, en.Hops, en.Attempt
				hit.Scanned = start + int64(i) + 1
				return hit, nil
			}
		}
		hit.Scanned = start + int64(len(es))
		if int64(len(es)) < stop-start+1 {
			break // the list shrank under us
		}
	}
	return hit, nil
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
