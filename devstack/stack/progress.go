package stack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/backlog"
	"github.com/trawl/trawl/shared/crawlid"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/topology"
)

// Progress is a snapshot of a crawl: the frontier's counters from Redis (summed over
// shards) and the pipeline's backlog from JetStream.
type Progress struct {
	At         time.Time
	Accepted   int64 // URLs accepted into the frontier
	Queued     int64 // waiting in front or back queues (including retries not yet due)
	InFlight   int64 // tasks out with a fetcher
	Dispatched int64
	Expired    int64 // leases that expired (their fetcher died or was too slow)
	Fetched    int64
	Failed     int64
	Disallowed int64
	OutOfScope int64
	OverBudget int64
	Hosts      int64 // active back queues
	// Backlog is messages not yet handled by each pipeline stage, by stage name.
	Backlog backlog.Backlog
	// Seqs are the streams' last sequence numbers; unchanged Seqs between two snapshots
	// mean nothing was published in between.
	Seqs     map[string]uint64
	PageMsgs uint64 // messages published to crawl.pages: a page each, or a bundle of pages
	Docs     uint64 // documents published to crawl.docs
	// Waits is what the frontier waits on: hosts backing off, in Crawl-delay or in the
	// politeness delay, retired hosts, and the slowest host's next time.
	Waits frontierkeys.Waits
	// Stuck are the tasks out that make no progress (frontierkeys.StuckLease.Stuck), oldest
	// first, at most stuckShown; StuckNow is the frontier's clock they were judged by.
	Stuck    []frontierkeys.StuckLease
	StuckNow time.Time
}

// stuckShown bounds the stuck tasks a snapshot reads; the line names the first two.
const stuckShown = 8

// waitSample bounds the waiting hosts a progress snapshot classifies.
const waitSample = 32

// Terminal is the number of URLs that reached a terminal state.
func (p Progress) Terminal() int64 {
	return p.Fetched + p.Failed + p.Disallowed + p.OutOfScope + p.OverBudget
}

// Quiet reports that nothing is queued, in flight or waiting in any stage.
func (p Progress) Quiet() bool {
	if p.Accepted == 0 || p.Queued != 0 || p.InFlight != 0 {
		return false
	}
	for _, n := range p.Backlog {
		if n != 0 {
			return false
		}
	}
	return true
}

func (p Progress) sameSeqs(q Progress) bool {
	if len(p.Seqs) != len(q.Seqs) {
		return false
	}
	for k, v := range p.Seqs {
		if q.Seqs[k] != v {
			return false
		}
	}
	return true
}

// String is the one-line progress report of `make run`.
func (p Progress) String() string {
	var waiting []string
	for _, k := range []string{backlog.Dedup, backlog.Scheduler, backlog.Fetch, backlog.Outcomes, backlog.Parser, backlog.Archiver} {
		if n := p.Backlog[k]; n > 0 {
			waiting = append(waiting, fmt.Sprintf("%s=%d", k, n))
		}
	}
	bl := "none"
	if len(waiting) > 0 {
		bl = strings.Join(waiting, " ")
	}
	line := fmt.Sprintf("fetched=%d failed=%d disallowed=%d over-budget=%d | queued=%d in-flight=%d active-hosts=%d | docs=%d | backlog: %s",
		p.Fetched, p.Failed, p.Disallowed, p.OverBudget, p.Queued, p.InFlight, p.Hosts, p.Docs, bl)
	if w := p.Waits.String(); w != "" {
		line += " | " + w
	}
	if len(p.Stuck) > 0 {
		line += fmt.Sprintf(" | STUCK %d:", len(p.Stuck))
		for i, l := range p.Stuck[:min(2, len(p.Stuck))] {
			if i > 0 {
				line += ";"
			}
			line += " " + l.Describe(p.StuckNow)
		}
		if len(p.Stuck) > 2 {
			line += fmt.Sprintf(" (+%d more: trawlctl status)", len(p.Stuck)-2)
		}
	}
	return line
}

// Parked reports that the crawl can only go on once hosts that wait longer than bound are
// due: nothing is due, in flight or in any stage's backlog, and the earliest waiting host's
// next fetch time is more than bound away on the frontier's clock.
func (p Progress) Parked(bound time.Duration) bool {
	if p.Queued == 0 || p.InFlight != 0 || p.Waits.Due != 0 || p.Waits.InFlight != 0 || p.Waits.Waiting == 0 {
		return false
	}
	for _, n := range p.Backlog {
		if n != 0 {
			return false
		}
	}
	return p.Waits.Earliest.Sub(p.Waits.Now) > bound
}

// Progress reads a snapshot.
func (s *Stack) Progress(ctx context.Context) (Progress, error) {
	// A request lost with the NATS server it went to (a cluster node that died) is never
	// answered: the reading fails and the caller reads again instead of hanging.
	ctx, cancel := context.WithTimeout(ctx, progressTimeout)
	defer cancel()
	return ReadProgress(ctx, s.js, s.rdb, s.prefix, s.shards, s.leaseTTL)
}

// progressTimeout bounds one Progress reading.
const progressTimeout = 10 * time.Second

// ReadProgress reads a snapshot of any deployment: prefix is TRAWL_REDIS_PREFIX, shards
// TRAWL_SHARDS and leaseTTL TRAWL_LEASE_TTL (which dates the tasks out). It relies only on the documented Redis keys of the scheduler
// (services/scheduler/README.md) and the stream and consumer names in shared/topology. An error
// wrapping crawlid.ErrLost means Redis no longer holds the crawl NATS knows: the counters
// would read zero and the crawl can never finish.
func ReadProgress(ctx context.Context, js jetstream.JetStream, rdb redis.UniversalClient, prefix string, shards int, leaseTTL time.Duration) (Progress, error) {
	p := Progress{At: time.Now(), Backlog: backlog.Backlog{}, Seqs: map[string]uint64{}}
	known, err := crawlid.Known(ctx, js, prefix)
	if err != nil {
		return p, fmt.Errorf("stack: progress: %w", err)
	}
	if known != nil {
		stored, err := crawlid.Read(ctx, rdb, prefix)
		if err != nil {
			return p, fmt.Errorf("stack: progress: %w", err)
		}
		if stored == nil || stored.ID != known.ID {
			return p, fmt.Errorf("stack: progress: %w: crawl %s (started %s) is missing from Redis (%s); the services have stopped consuming",
				crawlid.ErrLost, known.ID, known.Created.Format(time.RFC3339), crawlid.Key(prefix))
		}
	}
	fr := frontierkeys.OpenReadOnly(rdb, prefix, shards)
	cs, err := fr.Counters(ctx)
	if err != nil {
		return p, fmt.Errorf("stack: progress: redis: %w", err)
	}
	c := frontierkeys.Sum(cs)
	p.Accepted, p.Queued, p.Dispatched, p.Expired = c.Accepted, c.Queued, c.Dispatched, c.Expired
	p.Fetched, p.Failed, p.Disallowed, p.OutOfScope, p.OverBudget = c.Fetched, c.Failed, c.Disallowed, c.OutOfScope, c.OverBudget
	p.InFlight, p.Hosts = c.InFlight, c.Active
	if p.Waits, err = fr.Waits(ctx, waitSample); err != nil {
		return p, fmt.Errorf("stack: progress: %w", err)
	}
	if p.InFlight > 0 {
		if p.Stuck, p.StuckNow, err = fr.Stuck(ctx, leaseTTL, stuckShown); err != nil {
			return p, fmt.Errorf("stack: progress: %w", err)
		}
	}
	// Read every few hundred milliseconds during a measured crawl: one request per stream
	// or consumer. A render task stays in its work queue until a renderer acked it,
	// rendering included: a crawl is not over while a page waits for its rendering. The
	// archiver's consumer exists only once an archiver ran (TRAWL_ARCHIVE_DIR); a crawl is
	// not over while pages wait for it either: `make run` would stop it before they are
	// written.
	rd, err := backlog.Read(ctx, js, backlog.Request{
		Streams: []string{topology.StreamDiscovered, topology.StreamFrontier, topology.StreamFetch, topology.StreamFetched, topology.StreamPages, topology.StreamDocs, topology.StreamRender},
		Stages:  []string{backlog.Dedup, backlog.Scheduler, backlog.Fetch, backlog.Render, backlog.Parser, backlog.Archiver, backlog.Outcomes},
		Shards:  shards,
	})
	if err != nil {
		return p, fmt.Errorf("stack: progress: %w", err)
	}
	for _, m := range rd.Missing {
		if m.Consumer != topology.ConsumerArchiver {
			return p, fmt.Errorf("stack: progress: %w", m.Err)
		}
	}
	p.Backlog = rd.Backlog
	for name, st := range rd.Streams {
		p.Seqs[name] = st.LastSeq
	}
	p.PageMsgs = rd.Streams[topology.StreamPages].LastSeq
	p.Docs = rd.Streams[topology.StreamDocs].LastSeq
	return p, nil
}

// WaitIdle polls every interval until the crawl is over: nothing queued, in flight or in
// any stage's backlog, in two consecutive snapshots with no message published between
// them. report, if set, gets every snapshot.
func (s *Stack) WaitIdle(ctx context.Context, every time.Duration, report func(Progress)) (Progress, error) {
	return WaitIdle(ctx, every, func(ctx context.Context) (Progress, error) { return s.Progress(ctx) }, report)
}

// WaitIdleOrParked is WaitIdle that also stops once the crawl is parked (see the function
// WaitIdleOrParked).
func (s *Stack) WaitIdleOrParked(ctx context.Context, every, parkAfter time.Duration, report func(Progress)) (Progress, bool, error) {
	return WaitIdleOrParked(ctx, every, parkAfter, func(ctx context.Context) (Progress, error) { return s.Progress(ctx) }, report)
}

// ParkedHost is a host left in the frontier when a crawl is parked, with the head of its
// back queue.
type ParkedHost struct {
	frontierkeys.HostWait
	Queued int64                // URLs in its back queue
	URLs   []frontierkeys.Entry // the first of them, next to go first
}

// Parked lists up to maxHosts waiting hosts (latest due first) with up to maxURLs of each
// one's queued URLs. The frontier is only read: a later crawl of the same state resumes
// them.
func (s *Stack) Parked(ctx context.Context, maxHosts, maxURLs int) ([]ParkedHost, error) {
	fr := frontierkeys.OpenReadOnly(s.rdb, s.prefix, s.shards)
	w, err := fr.Waits(ctx, maxHosts)
	if err != nil {
		return nil, fmt.Errorf("stack: parked hosts: %w", err)
	}
	qs, err := fr.BackQueues(ctx, w.Hosts, maxURLs)
	if err != nil {
		return nil, fmt.Errorf("stack: parked hosts: %w", err)
	}
	hosts := make([]ParkedHost, len(w.Hosts))
	for i, h := range w.Hosts {
		hosts[i] = ParkedHost{HostWait: h, Queued: qs[i].Len, URLs: qs[i].Head}
	}
	return hosts, nil
}

// WaitIdle is the polling loop behind Stack.WaitIdle, for any source of snapshots. It
// returns at once with an error wrapping crawlid.ErrLost when Redis has lost the crawl.
func WaitIdle(ctx context.Context, every time.Duration, read func(context.Context) (Progress, error), report func(Progress)) (Progress, error) {
	p, _, err := WaitIdleOrParked(ctx, every, 0, read, report)
	return p, err
}

// WaitIdleOrParked is WaitIdle that also returns, with parked true, once the crawl is
// Parked(parkAfter) in two consecutive snapshots with no message published between them:
// only hosts that wait longer than parkAfter hold it. parkAfter 0 never parks. A failed
// reading (Redis or NATS unreachable) is retried at the next tick and breaks the run of
// consecutive snapshots.
func WaitIdleOrParked(ctx context.Context, every, parkAfter time.Duration, read func(context.Context) (Progress, error), report func(Progress)) (Progress, bool, error) {
	var prev Progress
	var havePrev bool
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		p, err := read(ctx)
		if errors.Is(err, crawlid.ErrLost) {
			return prev, false, err
		}
		if err != nil {
			// Nothing is known while a reading fails (Redis unreachable): the crawl is over
			// only after two readings in a row that say so, taken after it.
			havePrev = false
		} else {
			if report != nil {
				report(p)
			}
			if p.Quiet() && havePrev && prev.Quiet() && p.sameSeqs(prev) {
				return p, false, nil
			}
			if parkAfter > 0 && p.Parked(parkAfter) && havePrev && prev.Parked(parkAfter) && p.sameSeqs(prev) {
				return p, true, nil
			}
			prev, havePrev = p, true
		}
		select {
		case <-ctx.Done():
			return prev, false, waitEnded(ctx, prev, err)
		case <-t.C:
		}
	}
}

// waitEnded is the error of a wait cut short by ctx: for a time limit (trawl-dev -timeout)
// it says so and what was left, from the last reading that succeeded (a reading cut by the
// limit itself only says the limit came); a reading that failed otherwise is named too.
func waitEnded(ctx context.Context, last Progress, readErr error) error {
	if readErr != nil && ctx.Err() != nil && errors.Is(readErr, ctx.Err()) {
		readErr = nil
	}
	failed := ""
	if readErr != nil {
		failed = fmt.Sprintf(" (the last reading failed: %v)", readErr)
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("stack: wait idle: %w; last progress: %s%s", ctx.Err(), last, failed)
	}
	if last.At.IsZero() {
		return fmt.Errorf("stack: time limit reached (%w) before the crawl's progress could be read%s", ctx.Err(), failed)
	}
	return fmt.Errorf("stack: time limit reached (%w) with the crawl not over: %d URL(s) left queued on %d active host(s) (%d waiting), %d in flight, as of %s%s; last progress: %s",
		ctx.Err(), last.Queued, last.Hosts, last.Waits.Waiting, last.InFlight, last.At.Format(time.TimeOnly), failed, last)
}

// Ready reports whether the process answers /readyz now.
func (p *Proc) Ready(ctx context.Context) bool { return probe(ctx, p.HTTPAddr) }

func probe(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
