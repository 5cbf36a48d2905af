// Package progress reads a snapshot of a running crawl for `trawlctl status`: the
// frontier's queues and counters (through shared/frontierkeys's read-only Reader) and each
// pipeline stage's backlog from JetStream.
package progress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/backlog"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/topology"
)

// Counters are the frontier's `stats` hash (summed over shards).
type Counters struct {
	Accepted   int64 `json:"accepted"`
	Queued     int64 `json:"queued"`
	Dispatched int64 `json:"dispatched"`
	Fetched    int64 `json:"fetched"`
	Failed     int64 `json:"failed"`
	Disallowed int64 `json:"disallowed"`
	OutOfScope int64 `json:"out_of_scope"`
	OverBudget int64 `json:"over_budget"`
	Expired    int64 `json:"expired"`
	// RetiredHosts counts hosts the scheduler gave up on after a failure streak.
	RetiredHosts int64 `json:"retired_hosts"`
}

// hostsOf is a frontier's (or a shard's) hosts as a snapshot shows them.
func hostsOf(st frontierkeys.ShardStatus) Hosts {
	return Hosts{Active: st.Active, InHeap: st.InHeap, Ready: st.Ready, Waiting: st.InHeap - st.Ready, InFlight: st.InFlight}
}

// countersOf is a frontier's (or a shard's) counters as a snapshot shows them.
func countersOf(h frontierkeys.Counters) Counters {
	return Counters{
		Accepted: h.Accepted, Queued: h.Queued, Dispatched: h.Dispatched,
		Fetched: h.Fetched, Failed: h.Failed, Disallowed: h.Disallowed,
		OutOfScope: h.OutOfScope, OverBudget: h.OverBudget, Expired: h.Expired,
		RetiredHosts: h.Retired,
	}
}

// Hosts describes the back-queue side of the frontier.
type Hosts struct {
	Active   int64 `json:"active"`    // hosts holding a back queue (Shard.CountActive)
	InHeap   int64 `json:"in_heap"`   // idle active hosts (ZCARD heap)
	Ready    int64 `json:"ready"`     // of them, due now (ZCOUNT heap -inf now)
	Waiting  int64 `json:"waiting"`   // of them, waiting out their politeness delay
	InFlight int64 `json:"in_flight"` // hosts with a task out (ZCARD inflight)
}

// Shard is one scheduler shard.
type Shard struct {
	Shard    int      `json:"shard"`
	Paused   bool     `json:"paused"`
	Front    []int64  `json:"front_queues"` // LLEN fq:<p>, p = 0 (highest priority) …
	Hosts    Hosts    `json:"hosts"`
	Counters Counters `json:"stats"`
}

// Stream is one JetStream stream's state.
type Stream struct {
	Msgs    uint64 `json:"msgs"`
	Bytes   uint64 `json:"bytes"`
	LastSeq uint64 `json:"last_seq"`
}

// Snapshot is the whole report; -json prints it as is.
type Snapshot struct {
	At       time.Time `json:"at"`
	Prefix   string    `json:"prefix"`
	Shards   []Shard   `json:"shards"`
	Paused   bool      `json:"paused"` // any shard paused
	Front    []int64   `json:"front_queues"`
	Queued   int64     `json:"front_queued"` // Σ front queues (URLs not yet routed to a host)
	Hosts    Hosts     `json:"hosts"`
	Counters Counters  `json:"stats"`
	// PagesPerSec is the rate of the `fetched` counter between two samples; nil when only
	// one sample was taken.
	PagesPerSec *float64 `json:"pages_per_sec,omitempty"`
	// Errors is the `failed` counter: URLs that ended failed after retries.
	Errors int64 `json:"errors"`
	// Backlog is the messages not yet handled by each stage: dedup, scheduler, fetch
	// (work-queue stream sizes), outcomes, parser (consumer pending + unacked).
	Backlog backlog.Backlog   `json:"backlog"`
	Streams map[string]Stream `json:"streams"`
	// Dispatch is what holds the schedulers' dispatch back, as they last published it;
	// nil when no scheduler ran lately.
	Dispatch *Dispatch `json:"dispatch,omitempty"`
	// Waits is what the frontier waits on: hosts backing off (with their last error), in
	// Crawl-delay or in the politeness delay, retired hosts, the slowest host's next time.
	Waits frontierkeys.Waits `json:"waits"`
	// Stuck are the tasks out that make no progress — overdue, failing, or out for more
	// than half the lease TTL (frontierkeys.StuckLease.Stuck) — oldest first, at most
	// stuckShown, judged at StuckNow (the frontier's clock).
	Stuck    []frontierkeys.StuckLease `json:"stuck,omitempty"`
	StuckNow time.Time                 `json:"stuck_now,omitzero"`
	// Recrawl is the recrawl schedule's backlog (TRAWL_RECRAWL=adaptive); nil otherwise.
	Recrawl *recrawl.Backlog `json:"recrawl,omitempty"`
	// Rules are the live site policies in force and the most active of them with their
	// counters summed over the shards; nil when Options.Rules is 0 or they cannot be read.
	Rules *frontierkeys.ActiveRules `json:"rules,omitempty"`
	// Warnings name what could not be read (e.g. a stream that does not exist yet).
	Warnings []string `json:"warnings,omitempty"`
}

// Dispatch is the schedulers' dispatch gate (hash <prefix>:dispatch, services/scheduler/README.md
// "Leases and recovery"): backpressure from later stages and the fetchers' capacity.
type Dispatch struct {
	// Held names the stages over their threshold ("" = dispatching); Holds counts holds.
	Held  string `json:"held"`
	Holds int64  `json:"holds"`
	// FetchQueued tasks wait for a fetcher, at most FetchQueuedLimit; FetchBusy are held
	// by fetchers.
	FetchQueued      int64 `json:"fetch_queued"`
	FetchBusy        int64 `json:"fetch_busy"`
	FetchQueuedLimit int64 `json:"fetch_queued_limit"`
}

// waitSample bounds the waiting hosts a snapshot classifies.
const waitSample = 32

// stuckShown bounds the stuck tasks a snapshot lists.
const stuckShown = 20

// recrawlSample is how many recrawl schedules a snapshot reads for its median interval and
// 304 share.
const recrawlSample = 256

// Options say what to read.
type Options struct {
	Prefix string
	Shards int
	// FrontQueues is F; 0 reads every possible queue and reports up to the last non-empty
	// one (at least 8, the scheduler's default).
	FrontQueues int
	// Now is the clock used for "ready" hosts (default time.Now).
	Now func() time.Time
	// LeaseTTL is TRAWL_LEASE_TTL, which dates the tasks out (0: undated; overdue and
	// failing tasks are still named stuck).
	LeaseTTL time.Duration
	// Rules is how many of the most active site-policy rules are listed (0: none read).
	Rules int
}

// ErrFrontierUnreadable marks a snapshot that could not be taken because Redis did not
// answer: no numbers are better than zeros that read as an empty crawl.
var ErrFrontierUnreadable = errors.New("the frontier cannot be read from Redis")

// Reader takes snapshots. js may be nil (Redis-only report).
type Reader struct {
	RDB redis.UniversalClient
	JS  jetstream.JetStream
	O   Options
	// rules is the last rule set loaded, reloaded only when the store's version moves
	// (a -watch of a crawl with 10,000 rules reads one key per refresh, not every rule).
	rules *policy.Set
}

// Read takes one snapshot.
func (r *Reader) Read(ctx context.Context) (*Snapshot, error) {
	now := time.Now
	if r.O.Now != nil {
		now = r.O.Now
	}
	s := &Snapshot{At: now(), Prefix: r.O.Prefix, Backlog: backlog.Backlog{}, Streams: map[string]Stream{}}
	fr := frontierkeys.OpenReadOnly(r.RDB, r.O.Prefix, r.O.Shards)
	if err := r.readRedis(ctx, fr, s); err != nil {
		return nil, err
	}
	w, err := fr.Waits(ctx, waitSample)
	if err != nil {
		return nil, fmt.Errorf("progress: %w: %w", ErrFrontierUnreadable, err)
	}
	s.Waits = w
	if w.InFlight > 0 {
		if s.Stuck, s.StuckNow, err = fr.Stuck(ctx, r.O.LeaseTTL, stuckShown); err != nil {
			return nil, fmt.Errorf("progress: %w: %w", ErrFrontierUnreadable, err)
		}
	}
	if r.O.Rules > 0 {
		if err := r.readRules(ctx, fr, s); err != nil {
			s.Warnings = append(s.Warnings, "site policies: "+err.Error())
		}
	}
	if r.JS != nil {
		if err := r.readJetStream(ctx, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// readRules reads the rules in force and their counters (frontierkeys.TopRules).
func (r *Reader) readRules(ctx context.Context, fr *frontierkeys.Reader, s *Snapshot) error {
	st := policy.NewStore(r.RDB, r.O.Prefix)
	v, err := st.Version(ctx)
	if err != nil {
		return err
	}
	if r.rules == nil || r.rules.Version() != v {
		if r.rules, err = st.Load(ctx); err != nil {
			return err
		}
	}
	stats, err := fr.PolicyStats(ctx)
	if err != nil {
		return err
	}
	rs := r.rules.Rules()
	scopes := make([]string, len(rs))
	for i, x := range rs {
		scopes[i] = x.Scope.String()
	}
	ar := frontierkeys.TopRules(stats, scopes, r.rules.Version(), r.O.Rules)
	s.Rules = &ar
	return nil
}

func (r *Reader) readRedis(ctx context.Context, fr *frontierkeys.Reader, s *Snapshot) error {
	st, err := fr.Status(ctx, s.At, r.O.FrontQueues)
	if err != nil {
		return fmt.Errorf("progress: %w: %w", ErrFrontierUnreadable, err)
	}
	total := frontierkeys.ShardStatus{Front: make([]int64, st.Front)}
	for _, c := range st.Shards {
		sh := Shard{Shard: c.Shard, Paused: c.Paused, Front: c.Front, Hosts: hostsOf(c), Counters: countersOf(c.Counters)}
		s.Shards = append(s.Shards, sh)
		total.Add(c)
	}
	s.Front, s.Paused, s.Hosts = total.Front, total.Paused, hostsOf(total)
	for _, n := range total.Front {
		s.Queued += n
	}
	s.Counters = countersOf(total.Counters)
	s.Errors = s.Counters.Failed
	if g := st.Dispatch; g != nil {
		s.Dispatch = &Dispatch{Held: g.Held, Holds: g.Holds, FetchQueued: g.FetchQueued, FetchBusy: g.FetchBusy,
			FetchQueuedLimit: g.FetchLimit}
	}
	return nil
}

// streams are the streams whose state a snapshot shows; the first three are also the
// backlogs of dedup, the scheduler and the fetchers (work queues).
var streams = []string{topology.StreamDiscovered, topology.StreamFrontier, topology.StreamFetch,
	topology.StreamFetched, topology.StreamPages, topology.StreamDocs, topology.StreamDead}

func (r *Reader) readJetStream(ctx context.Context, s *Snapshot) error {
	warn := func(ms []backlog.Missing) {
		for _, m := range ms {
			if m.Consumer == "" {
				s.Warnings = append(s.Warnings, fmt.Sprintf("stream %s does not exist (no service has started against this NATS?)", m.Stream))
			} else {
				s.Warnings = append(s.Warnings, fmt.Sprintf("consumer %s/%s does not exist", m.Stream, m.Consumer))
			}
		}
	}
	rd, err := backlog.Read(ctx, r.JS, backlog.Request{Streams: streams, Stages: []string{backlog.Dedup, backlog.Scheduler, backlog.Fetch}})
	if err != nil {
		return fmt.Errorf("progress: %w", err)
	}
	warn(rd.Missing)
	for name, st := range rd.Streams {
		s.Streams[name] = Stream{Msgs: st.Msgs, Bytes: st.Bytes, LastSeq: st.LastSeq}
	}
	if d := s.Streams[topology.StreamDead]; d.Msgs > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("dead letters: %d in %s, messages the stages gave up on (trawlctl dead ls)", d.Msgs, topology.StreamDead))
	}
	maps.Copy(s.Backlog, rd.Backlog)
	b, err := recrawl.ReadBacklog(ctx, r.JS, r.O.Shards, recrawlSample, s.At)
	if err != nil {
		s.Warnings = append(s.Warnings, err.Error())
	}
	s.Recrawl = b
	rd, err = backlog.Read(ctx, r.JS, backlog.Request{Stages: []string{backlog.Parser, backlog.Outcomes}, Shards: r.O.Shards})
	if err != nil {
		return fmt.Errorf("progress: %w", err)
	}
	warn(rd.Missing)
	maps.Copy(s.Backlog, rd.Backlog)
	return nil
}

// Rate sets cur's pages/s from the fetched counters of two snapshots.
func Rate(prev, cur *Snapshot) {
	if prev == nil {
		return
	}
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 {
		return
	}
	r := float64(cur.Counters.Fetched-prev.Counters.Fetched) / dt
	if r < 0 {
		r = 0 // the counters were reset between the samples
	}
	cur.PagesPerSec = &r
}
