// Package frontierkeys owns the Redis layout of Trawl's URL frontier. The scheduler's
// frontier (services/scheduler/internal/frontier, with shared/politeness's module in its
// scripts) writes it, besides NoteLeaseError (fetchers) and SetPaused (trawlctl pause);
// everyone else — trawlctl (status, explain, policy, pause), the
// scheduler's status page and devstack (the progress line of `make run`) — reads it
// through the read-only Reader (OpenReadOnly: stats, status, explain, waits, stuck leases,
// parked hosts, rule counters) and names no key itself (devstack/workspace
// TestStoresHaveOneOwner). It lives in shared/ rather than under the scheduler's internal/
// because trawlctl and devstack are other modules.
//
// Every key of shard s of n lives under one hash tag, "<prefix>:{<ShardTag(s, n)>}:", so
// that a script's keys fall in one Redis Cluster slot; Shard names them. Queue entries are
// "<depth> <hops> <attempt> <url>" (Entry), a lease is "<token> <entry>", and the `stats`
// hash holds the shard's counters (Counters). services/scheduler/README.md ("The frontier") is the
// key table; the scripts in services/scheduler/internal/frontier/lua build the per-host keys
// (bq:, host:) from the same prefix.
package frontierkeys

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/redisx"
)

// MaxFrontQueues is the most front queues a scheduler may have (TRAWL_FRONT_QUEUES ≤ 64):
// a reader that does not know F probes this many.
const MaxFrontQueues = 64

// DefaultFrontQueues is the scheduler's default F (shared/frontierconf's default
// TRAWL_FRONT_QUEUES), the front queues a reader that does not know F shows at least.
const DefaultFrontQueues = 8

// Shard names the keys of one scheduler shard.
type Shard struct {
	ks redisx.Keyspace
}

// ForShard returns the key names of shard of shards (TRAWL_SHARDS) under the deployment
// prefix (TRAWL_REDIS_PREFIX; "" means "trawl").
func ForShard(prefix string, shard, shards int) Shard {
	return Shard{ks: redisx.NewKeyspace(prefix, ShardTag(shard, shards))}
}

// ShardTag is the hash tag of shard of shards: "s0" when the deployment has one shard (the
// layout of every release before shards were spread), else redisx.CentredTag("s", shard,
// shards), "s:<shard>:<j>", whose slot lies in the middle of the shard's own 1/shards of
// the slot space. A Redis Cluster's masters own equal contiguous slot ranges, so with
// shards a multiple of the masters each master holds the same number of shards — where
// "s<shard>" hashed at random put 4, 3 and 5 of twelve shards on three masters, and the
// frontier's memory and load with them. Tags are memoised: the claimer names a shard's
// keys at every claim.
func ShardTag(shard, shards int) string {
	if shards <= 1 {
		return "s" + strconv.Itoa(shard)
	}
	k := [2]int{shard, shards}
	if t, ok := shardTags.Load(k); ok {
		return t.(string)
	}
	t := redisx.CentredTag("s", shard, shards)
	shardTags.Store(k, t)
	return t
}

var shardTags sync.Map // [2]int{shard, shards} → ShardTag

// Prefix is "<prefix>:{<ShardTag>}:", the start of every key of the shard; the scripts get
// it as an argument to build per-host keys.
func (s Shard) Prefix() string { return s.ks.Prefix() }

// Keyspace is the shard's redisx.Keyspace.
func (s Shard) Keyspace() redisx.Keyspace { return s.ks }

// Stats is the hash of the shard's counters (see Counters).
func (s Shard) Stats() string { return s.ks.Key("stats") }

// Heap is the zset of active, idle hosts scored by next fetch time (unix ms).
func (s Shard) Heap() string { return s.ks.Key("heap") }

// Hosts is the host table: active host → "1", and the field Wide, which is no host: read
// the active hosts with ActiveHosts and CountActive. A host's live-policy limits are in
// the policy table only (Policy).
func (s Shard) Hosts() string { return s.ks.Key("hosts") }

// Wide is a field the frontier keeps in the host table (Shard.Hosts) and the per-rule
// counters (Shard.PolicyStats), with WideValue, which names no host and no rule. Redis keeps
// a hash of up to 512 short entries (hash-max-listpack-entries, -value) as a listpack,
// which every lookup searches from the start; a value longer than hash-max-listpack-value
// (64 bytes by default) turns the hash into a hash table for good. The frontier looks
// hosts up in its host table at every step, so with a few hundred active hosts the listpack
// cost more than the rest of the lookup.
const Wide = "#wide"

// WideValue is Wide's value: longer than Redis's default hash-max-listpack-value.
var WideValue = strings.Repeat("-", 128)

// ActiveHosts are the hosts among the host table's fields (HKEYS of Shard.Hosts), kept in
// fields' own array.
func ActiveHosts(fields []string) []string {
	return slices.DeleteFunc(fields, func(f string) bool { return f == Wide })
}

// CountActive queues on p what counts the shard's active hosts; the returned function
// reads the count once p has run.
func (s Shard) CountActive(ctx context.Context, p redis.Pipeliner) func() int64 {
	n, wide := p.HLen(ctx, s.Hosts()), p.HExists(ctx, s.Hosts(), Wide)
	return func() int64 {
		if wide.Val() {
			return max(n.Val()-1, 0)
		}
		return n.Val()
	}
}

// Inflight is the zset of hosts with a task out, scored by lease deadline (unix ms).
func (s Shard) Inflight() string { return s.ks.Key("inflight") }

// Lease is the hash host → "<token> <entry>" of the task out.
func (s Shard) Lease() string { return s.ks.Key("lease") }

// Paused is set while the shard dispatches nothing.
func (s Shard) Paused() string { return s.ks.Key("paused") }

// Seq is the counter behind lease tokens.
func (s Shard) Seq() string { return s.ks.Key("seq") }

// Backlinks is the zset host → linking pages on other hosts.
func (s Shard) Backlinks() string { return s.ks.Key("backlinks") }

// Busiest is the zset host → pages fetched (the top hosts).
func (s Shard) Busiest() string { return s.ks.Key("busiest") }

// Slowest is the zset host → moving-average response time in ms (the top hosts).
func (s Shard) Slowest() string { return s.ks.Key("slowest") }

// Errors is the list of the last retried or failed outcomes, newest first.
func (s Shard) Errors() string { return s.ks.Key("errors") }

// Applied is the zset message id → stream sequence of applied frontier messages.
func (s Shard) Applied() string { return s.ks.Key("applied") }

// PageLog is the zset of the URLs whose pages wait for the parser, scored by the page's
// CRAWL_PAGES sequence, each member "<lease token>\n<host>\n<entry>" (the page's id is
// topology.PageID of the token). complete.lua adds one with the outcome that ends a URL
// fetched; the scheduler drops those at or below the parser consumer's ack floor, and at
// its start puts back in the queues the URLs whose pages NATS lost (a rollback after an OS
// crash).
func (s Shard) PageLog() string { return s.ks.Key("pagelog") }

// RecrawlOutbox is the list of recrawled URLs that ended failed without a page, each
// "<unix ms> <requested 0|1> <entry>", waiting for the scheduler to write their next
// schedules (adaptive recrawl only).
func (s Shard) RecrawlOutbox() string { return s.ks.Key("recrawl-outbox") }

// SkipSpool is the list of queued URLs the frontier's scripts ended without a request:
// over budget (a host's, a domain's or the crawl's page budget spent while they waited)
// or failed with their retired host, each item "<unix ms> <seed> <i>[ retired]\n<entry>
// \n<entry>…" (at most 256 entries, Entry), which the scheduler lists on the skip log and
// then removes. Its URLs are counted already; it holds at most what the queues it came
// from held.
func (s Shard) SkipSpool() string { return s.ks.Key("skip-spool") }

// Policy is the hash holding the generation of the live site policies in force on the
// shard (PolicyGenField); a host's limits are in its own state (HostLim).
func (s Shard) Policy() string { return s.ks.Key("policy") }

// Resolve is the hash of the active hosts whose limits (HostLim) are not of the shard's
// generation, to be resolved in Go before they are dispatched: host → "1" when its
// admission is still to be counted under its rules (PolicyStatHosts), else "0".
func (s Shard) Resolve() string { return s.ks.Key("resolve") }

// Park is the list of a blocked host's parked queue entries, in queue order.
func (s Shard) Park(host string) string { return s.ks.Key("park", host) }

// Parked is the hash host → "<reason> <entries>" of the hosts with a park list.
func (s Shard) Parked() string { return s.ks.Key("parked") }

// PolicyStats is the hash of per-rule counters: field "<scope>\t<counter>" (PolicyStat*).
func (s Shard) PolicyStats() string { return s.ks.Key("policy-stats") }

// Per-rule counters (Shard.PolicyStats), summed over shards by the status page.
const (
	PolicyStatHosts    = "hosts"    // hosts whose limits the rule decided, when admitted
	PolicyStatRequests = "requests" // tasks dispatched under the rule
	PolicyStatBlocked  = "blocked"  // URLs parked or refused by the rule's block
	PolicyStatParked   = "parked"   // URLs parked now
	PolicyStatExcluded = "excluded" // queued URLs that left the frontier when the rule narrowed its scope
)

// FrontQueue is front queue q (0 = highest priority).
func (s Shard) FrontQueue(q int) string { return s.ks.Key("fq", strconv.Itoa(q)) }

// FrontQueueName is the name of front queue q within the shard, "fq:<q>".
func FrontQueueName(q int) string { return "fq:" + strconv.Itoa(q) }

// BackQueue is the back queue of an active host.
func (s Shard) BackQueue(host string) string { return s.ks.Key("bq", host) }

// BackQueueName is the name of host's back queue within the shard, "bq:<host>".
func BackQueueName(host string) string { return "bq:" + host }

// Host is the hash of a host's politeness state (the Host* fields).
func (s Shard) Host(host string) string { return s.ks.Key("host", host) }

// Fields of a host's state hash (Shard.Host).
const (
	HostNext    = "next"    // next fetch time, unix ms
	HostCD      = "cd"      // robots.txt Crawl-delay, ms
	HostErr     = "err"     // backoff streak
	HostFails   = "fails"   // consecutive failed URLs toward retirement (a URL's retries count once)
	HostWindow  = "win"     // the host's recent answers, one '0' (2xx-4xx) or '1' (5xx) per URL, newest last
	HostRetired = "retired" // when the host was retired, unix ms
	HostPages   = "pages"   // pages charged to a per-host budget
	HostFetched = "fetched" // URLs ended fetched
	HostRT      = "rt"      // last response time, ms
	HostRTAvg   = "rtavg"   // moving-average response time, ms
	HostAddr    = "addr"    // the server address last requested for the host
	// HostSlots is how many of the host's lease slots, from the first, a task of it may be
	// out on: one past the highest slot a dispatch gave it (connections > 1), brought down
	// to its connections once no task is out beyond them, so that connections lowered with
	// tasks out on later slots still count those tasks. Absent: its connections.
	HostSlots = "slots"
	// HostLim is the host's live-policy limits under a generation (HostLimValue).
	HostLim = "lim"
)

// Dispatch is the one per-deployment key: the hash where the schedulers publish the
// dispatch gate's figures (the Dispatch* fields; ParseDispatch reads them).
func Dispatch(prefix string) string {
	if prefix == "" {
		prefix = redisx.DefaultPrefix
	}
	return prefix + ":dispatch"
}

// Fields of the dispatch hash, as DispatchFigures describes them.
const (
	DispatchHeld           = "held"
	DispatchHolds          = "holds"
	DispatchFetchQueued    = "fetch_queued"
	DispatchFetchBusy      = "fetch_busy"
	DispatchFetchLimit     = "fetch_limit"
	DispatchParser         = "parser"
	DispatchDedup          = "dedup"
	DispatchFrontier       = "frontier"
	DispatchPagesBytes     = "pages_bytes"
	DispatchPagesMaxBytes  = "pages_max_bytes"
	DispatchBodiesBytes    = "bodies_bytes"
	DispatchBodiesMaxBytes = "bodies_max_bytes"
	DispatchDocsLag        = "docs_lag"
	DispatchDocsMaxBytes   = "docs_max_bytes"
	DispatchIndexers       = "indexers"
)

// Entry is a queue entry "<depth> <hops> <attempt> <url>", or "<depth> <hops> <attempt>
// <url> <ext>" when the URL carries more (crawlmsg.Extra, encoded). A normalised URL has no
// space, so the first space after the URL starts Ext; the scripts keep "<url> <ext>" as one
// field and never need to look inside it.
type Entry struct {
	Depth, Hops, Attempt int
	URL                  string
	Ext                  string
}

// ErrBadEntry marks a queue entry that is not "<depth> <hops> <attempt> <url>[ <ext>]".
var ErrBadEntry = errors.New("frontier: malformed queue entry")

// String is the entry as queued.
func (e Entry) String() string {
	return string(e.Append(make([]byte, 0, len(e.URL)+len(e.Ext)+17)))
}

// Append appends the entry as queued to dst.
func (e Entry) Append(dst []byte) []byte {
	dst = strconv.AppendInt(dst, int64(e.Depth), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(e.Hops), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(e.Attempt), 10)
	dst = append(dst, ' ')
	dst = append(dst, e.URL...)
	if e.Ext != "" {
		dst = append(dst, ' ')
		dst = append(dst, e.Ext...)
	}
	return dst
}

// ParseEntry decodes a queue entry.
func ParseEntry(s string) (Entry, error) {
	var nums [3]int
	for i := range nums {
		field, rest, ok := strings.Cut(s, " ")
		if !ok {
			return Entry{}, fmt.Errorf("%w: %q", ErrBadEntry, s)
		}
		n, err := strconv.Atoi(field)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: %q", ErrBadEntry, s)
		}
		nums[i], s = n, rest
	}
	u, ext, _ := strings.Cut(s, " ")
	if u == "" {
		return Entry{}, fmt.Errorf("%w: no url", ErrBadEntry)
	}
	return Entry{Depth: nums[0], Hops: nums[1], Attempt: nums[2], URL: u, Ext: ext}, nil
}

// ParseLease decodes a lease value "<token> <entry>". The token is returned even when the
// entry is malformed, so that a reader can still name the lease.
func ParseLease(v string) (token string, e Entry, err error) {
	token, entry, _ := strings.Cut(v, " ")
	e, err = ParseEntry(entry)
	return token, e, err
}

// Counters are the fields of a shard's `stats` hash. Fetched, Failed, Disallowed,
// OutOfScope and OverBudget are terminal: Accepted = Queued + in flight + Parked +
// Terminal().
type Counters struct {
	Accepted   int64
	Queued     int64 // in front or back queues, retries not yet due included
	Parked     int64 // in park lists (Shard.Park): blocked by a live policy
	Dispatched int64
	Fetched    int64
	Failed     int64
	Disallowed int64
	OutOfScope int64
	OverBudget int64
	Pages      int64 // the crawl-wide budget's charge
	Expired    int64 // leases that expired
	Retired    int64 // hosts retired after a failure streak
}

// ParseStats decodes a `stats` hash; absent or unreadable fields count 0.
func ParseStats(h map[string]string) Counters {
	get := func(k string) int64 { n, _ := strconv.ParseInt(h[k], 10, 64); return n }
	return Counters{
		Accepted: get("accepted"), Queued: get("queued"), Dispatched: get("dispatched"),
		Fetched: get("fetched"), Failed: get("failed"), Disallowed: get("disallowed"),
		OutOfScope: get("out_of_scope"), OverBudget: get("over_budget"),
		Pages: get("pages"), Expired: get("expired"), Retired: get("retired"),
		Parked: get("parked"),
	}
}

// Add adds o's counters to c: the crawl's counters are the sum of its shards'.
func (c *Counters) Add(o Counters) {
	c.Accepted += o.Accepted
	c.Queued += o.Queued
	c.Parked += o.Parked
	c.Dispatched += o.Dispatched
	c.Fetched += o.Fetched
	c.Failed += o.Failed
	c.Disallowed += o.Disallowed
	c.OutOfScope += o.OutOfScope
	c.OverBudget += o.OverBudget
	c.Pages += o.Pages
	c.Expired += o.Expired
	c.Retired += o.Retired
}

// Terminal is the number of URLs in a terminal state.
func (c Counters) Terminal() int64 {
	return c.Fetched + c.Failed + c.Disallowed + c.OutOfScope + c.OverBudget
}

// ErrorRecord is one line of a shard's error log (Shard.Errors): an outcome that was
// retried or failed, or a lease that expired (Kind "lease-expired"). A line is
// "<unix ms>\t<result>\t<kind>\t<status>\t<host>\t<url>\t<error>".
type ErrorRecord struct {
	At time.Time
	// Result is what became of the URL: "retry", "failed", or "retired" (the outcome
	// retired its host).
	Result string
	Kind   string
	Status int
	Host   string
	URL    string
	Error  string
}

// ParseErrorRecord decodes an error log line; ok is false for a line it cannot read.
func ParseErrorRecord(line string) (ErrorRecord, bool) {
	f := strings.SplitN(line, "\t", 7)
	if len(f) != 7 {
		return ErrorRecord{}, false
	}
	ms, err1 := strconv.ParseInt(f[0], 10, 64)
	status, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		return ErrorRecord{}, false
	}
	return ErrorRecord{At: time.UnixMilli(ms), Result: f[1], Kind: f[2], Status: status,
		Host: f[4], URL: f[5], Error: f[6]}, true
}
