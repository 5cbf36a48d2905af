package crawlmsg

import (
	"fmt"
)

// The outcome of a fetch task, gathered in batches per shard (crawl.fetched.<shard>).

// OutcomeKind classifies what happened to a fetch task.
type OutcomeKind string

const (
	// OutcomeFetched: an HTTP response was received (any status; see Status).
	OutcomeFetched OutcomeKind = "fetched"
	// OutcomeError: the request failed without a response (timeout, refused, reset, DNS).
	OutcomeError OutcomeKind = "error"
	// OutcomeRobots: the task's request was robots.txt for the host, not the URL; the URL
	// goes back to the head of its host queue and waits the host's delay.
	OutcomeRobots OutcomeKind = "robots"
	// OutcomeRobotsUnavailable: robots.txt answered 5xx/429 or was unreachable; the RFC says
	// assume disallow all, so the URL is retried later like a failed fetch.
	OutcomeRobotsUnavailable OutcomeKind = "robots-unavailable"
	// OutcomeDisallowed: robots.txt forbids the URL; no request was made.
	OutcomeDisallowed OutcomeKind = "disallowed"
	// OutcomeBlocked: the URL may not be fetched at all (unsafe address, bad scheme,
	// unparseable); permanent, no request to the host.
	OutcomeBlocked OutcomeKind = "blocked"
	// OutcomeExpired: the fetcher got the task after its lease deadline and dropped it.
	OutcomeExpired OutcomeKind = "expired"
	// OutcomeTooLarge: a response was received but its page message cannot be stored
	// (its metadata, mostly the response headers, exceeds the largest message the stream
	// or the server accepts). Terminal: the same response would be refused again.
	OutcomeTooLarge OutcomeKind = "too-large"
	// OutcomeDeferred: the task made no request because another server it needed was busy
	// (the target of a robots.txt redirect to another host, inside that host's gap); the
	// URL goes back to the head of its host queue, not counted as an attempt, and the host
	// waits RetryAfter before its next task.
	OutcomeDeferred OutcomeKind = "deferred"
	// OutcomeServerBusy: the task made no request because the server address its host
	// resolves to was busy (per-server politeness, TRAWL_POLITENESS=ip: another request to
	// the address is in flight or inside its gap). Applied as OutcomeDeferred: the URL goes
	// back to the head of its host queue, not counted as an attempt, and the host waits
	// RetryAfter (the address's wait) before its next task.
	OutcomeServerBusy OutcomeKind = "server-busy"
	// OutcomeParked: the task made no request because a live site policy blocks its URL
	// (shared/policy). The URL is parked with the reason "blocked", not counted as an
	// attempt, and resumes when the block is lifted; unless the scheduler's rules, newer
	// than PolicyVersion, no longer block it: then it goes back to its queue, counting an
	// attempt.
	OutcomeParked OutcomeKind = "parked"
	// OutcomeOutOfScope: the task made no request because a live site policy narrowed the
	// crawl's scope since its URL was queued (a lower max_depth, an include it misses, an
	// exclude it matches): the URL ends out of scope, as the frontier's recheck would end it;
	// unless the scheduler's rules, newer than PolicyVersion, admit it: then it goes back to
	// its queue, counting an attempt.
	OutcomeOutOfScope OutcomeKind = "out-of-scope"
)

// Outcome is one fetch log entry: what the scheduler needs to release the host and set its
// next fetch time. It travels inside an OutcomeBatch, where it carries no version of its
// own (V stays 0 and is omitted).
type Outcome struct {
	V       int         `json:"v,omitempty"`
	Shard   int         `json:"shard"`
	Host    string      `json:"host"`
	URL     string      `json:"url"`
	Lease   string      `json:"lease"`
	Attempt int         `json:"attempt"`
	Kind    OutcomeKind `json:"kind"`
	// Requested says a request reached the network for this task (page or robots.txt).
	// When false the host's last request is older and no new delay is owed for it.
	Requested  bool    `json:"requested"`
	Status     int     `json:"status,omitempty"`      // HTTP status when Kind is fetched, robots or robots-unavailable
	StartedAt  int64   `json:"started_at,omitempty"`  // unix ms when the request started
	DurationMs int64   `json:"duration_ms,omitempty"` // request time to last body byte
	Bytes      int64   `json:"bytes,omitempty"`
	CrawlDelay float64 `json:"crawl_delay,omitempty"` // seconds, from the host's robots.txt (uncapped)
	// Robots says the task fetched the host's robots.txt first and then, the host's gap
	// after it having passed already, made the URL's own request or decision: CrawlDelay is
	// the fresh file's (0 = none), as in a robots outcome.
	Robots     bool    `json:"robots,omitempty"`
	RetryAfter float64 `json:"retry_after,omitempty"` // seconds, from a 429/503 Retry-After header
	Location   string  `json:"location,omitempty"`    // normalised redirect target for 3xx
	// Addr is the server address the task's request went to, or would have gone to (a
	// server-busy outcome); "" when unknown (no connection, or through a proxy).
	Addr  string `json:"addr,omitempty"`
	Error string `json:"error,omitempty"`
	// Permanent marks an error that retrying cannot fix (e.g. no such host).
	Permanent bool `json:"permanent,omitempty"`
	// PolicyVersion is the version of the site policies a parked or out-of-scope outcome
	// was decided by (policy.Set.Version; 0: unknown, or no rule ever set). The scheduler
	// checks such an outcome again when its own rules are newer.
	PolicyVersion int64 `json:"policy_version,omitempty"`
	// Depth is the task's depth, in an out-of-scope outcome, for that check (max_depth).
	Depth int `json:"depth,omitempty"`
	// Recrawl is set for a recrawled URL whose task stored no page (an error, a block, a
	// page too large, robots.txt unavailable): the parser never sees it, so should the URL
	// end failed, the scheduler writes its next schedule from this.
	Recrawl *RecrawlEntry `json:"recrawl,omitempty"`
	// PageSeq is the CRAWL_PAGES stream sequence of the page the task stored (0: none, or
	// a fetcher of an earlier release). The scheduler keeps it with the URL until the page
	// is parsed, so that a NATS rolled back past the page puts the URL back in its queue
	// (shared/durability/README.md "Durability").
	PageSeq uint64 `json:"page_seq,omitempty"`
	// PageParts is how many pages the message at PageSeq carries when it is a bundle
	// (Bundle); 0 when the page went alone. The page log judges the URLs logged under one
	// sequence by it: one message's, or a sequence a rolled-back NATS gave twice.
	PageParts int `json:"page_parts,omitempty"`
}

// OutcomeBatchVersion is the version of OutcomeBatch. Batches replaced single outcomes
// (version 1) on the same subjects, so they have their own number: a reader that knows only
// single outcomes rejects a batch instead of misreading it.
const OutcomeBatchVersion = 2

// OutcomeBatch is the payload on crawl.fetched.<shard>: the outcomes of many tasks of that
// shard, published together by one fetcher (one stored message for many tasks).
type OutcomeBatch struct {
	V        int       `json:"v"`
	Outcomes []Outcome `json:"outcomes"`
}

// DecodeOutcomes reads a message of crawl.fetched. A batch (version 2) gives its outcomes;
// a single outcome of version 1 (written by a fetcher of an earlier release during a
// rolling upgrade) gives a batch of one. Outcomes that lack host, lease or kind are not
// returned but counted in invalid: the batch's other outcomes stand on their own, so one
// bad entry does not lose them. A message that does not decode, carries another version or
// holds no outcome at all wraps ErrMalformed or ErrVersion (permanent).
func DecodeOutcomes(data []byte) (outs []Outcome, invalid int, err error) {
	var b OutcomeBatch
	if err := decode(data, &b); err != nil {
		return nil, 0, fmt.Errorf("%w: %T: %v", ErrMalformed, &b, err)
	}
	switch b.V {
	case OutcomeBatchVersion:
	case Version:
		var o Outcome
		if err := Unmarshal(data, &o); err != nil {
			return nil, 0, err
		}
		o.V = 0
		return []Outcome{o}, 0, nil
	default:
		return nil, 0, fmt.Errorf("%w: outcome batch has v=%d, want %d", ErrVersion, b.V, OutcomeBatchVersion)
	}
	if len(b.Outcomes) == 0 {
		return nil, 0, fmt.Errorf("%w: outcome batch holds no outcome", ErrMalformed)
	}
	outs = b.Outcomes[:0]
	for _, o := range b.Outcomes {
		if !o.valid() {
			invalid++
			continue
		}
		outs = append(outs, o)
	}
	return outs, invalid, nil
}

func (o *Outcome) valid() bool { return o.Host != "" && o.Lease != "" && o.Kind != "" }
