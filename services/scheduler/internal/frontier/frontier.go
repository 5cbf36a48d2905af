// Package frontier is the scheduler's URL frontier: Mercator's front queues (priority),
// back queues (one per active host) and a heap of hosts by next fetch time, kept in Redis
// under one hash tag per shard. Every step is one Lua script over a whole batch, so several
// scheduler processes may serve the same shard and a crash between steps loses nothing.
// services/scheduler/README.md ("The frontier") states the key layout and the semantics.
package frontier

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/frontierconf"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/urlnorm"
)

//go:embed lua/*.lua
var luaFS embed.FS

var (
	scriptAdd      = load("add.lua")
	scriptDispatch = load("dispatch.lua")
	scriptComplete = load("complete.lua")
	scriptReap     = load("reap.lua")
	scriptPark     = load("park.lua")
	scriptResume   = load("resume.lua")
	scriptOver     = load("over.lua")
	scriptRecheck  = load("recheck.lua")
	scriptSift     = load("sift.lua")
	scriptLimits   = load("limits.lua")
	scriptReadmit  = load("readmit.lua")
)

// The scripts' KEYS and ARGV layout, written once here: New builds the keys and the
// common arguments from these tables, and layoutLua declares the same positions to the
// scripts as the locals lua/common.lua reads (K_STATS = KEYS[1], MIND = tonumber(ARGV[7]),
// …), so no position is written twice.
var shardKeys = []struct {
	lua string
	key func(frontierkeys.Shard) string
}{
	{"K_STATS", frontierkeys.Shard.Stats}, {"K_HEAP", frontierkeys.Shard.Heap},
	{"K_HOSTS", frontierkeys.Shard.Hosts}, {"K_INFLIGHT", frontierkeys.Shard.Inflight},
	{"K_LEASE", frontierkeys.Shard.Lease}, {"K_PAUSED", frontierkeys.Shard.Paused},
	{"K_SEQ", frontierkeys.Shard.Seq}, {"K_BACKLINKS", frontierkeys.Shard.Backlinks},
	{"K_BUSIEST", frontierkeys.Shard.Busiest}, {"K_SLOWEST", frontierkeys.Shard.Slowest},
	{"K_ERRORS", frontierkeys.Shard.Errors}, {"K_APPLIED", frontierkeys.Shard.Applied},
	{"K_LASTERR", frontierkeys.Shard.LastErr}, {"K_POLICY", frontierkeys.Shard.Policy},
	{"K_PARKED", frontierkeys.Shard.Parked}, {"K_PSTATS", frontierkeys.Shard.PolicyStats},
	{"K_PAGELOG", frontierkeys.Shard.PageLog},
}

// callArgs are the common arguments each call sets (Frontier.args): the key prefix, the
// clock (NOW; empty: the server's TIME) and the random seed (SEED, also the call's nonce
// in lease tokens).
var callArgs = []struct {
	lua string
	str bool
}{{"PFX", true}, {"NOW", false}, {"SEED", true}}

// confArgs are the shard's settings in the common arguments, after callArgs: the Lua local
// each is read into (a number unless str) and its value.
var confArgs = []struct {
	lua string
	str bool
	val func(o Options) string
}{
	{lua: "F", val: func(o Options) string { return strconv.Itoa(o.FrontQueues) }},
	{lua: "B", val: func(o Options) string { return strconv.Itoa(o.BackQueues) }},
	{lua: "BIAS", val: func(o Options) string { return strconv.FormatFloat(o.PriorityBias, 'g', -1, 64) }},
	{lua: "MIND", val: func(o Options) string { return msArg(o.MinDelay) }},
	{lua: "KF", val: func(o Options) string { return strconv.FormatFloat(o.DelayFactor, 'g', -1, 64) }},
	{lua: "MAXCD", val: func(o Options) string { return msArg(o.MaxCrawlDelay) }},
	{lua: "MAXBO", val: func(o Options) string { return msArg(o.MaxBackoff) }},
	{lua: "RETRYB", val: func(o Options) string { return msArg(o.RetryBackoff) }},
	{lua: "MAXR", val: func(o Options) string { return strconv.Itoa(o.MaxRetries) }},
	{lua: "LEASE", val: func(o Options) string { return msArg(o.LeaseTTL) }},
	{lua: "MAXPH", val: func(o Options) string { return strconv.FormatInt(o.MaxPagesPerHost, 10) }},
	{lua: "MAXP", val: func(o Options) string { return strconv.FormatInt(o.MaxPages, 10) }},
	{lua: "ROUTE_LIMIT", val: func(o Options) string { return strconv.Itoa(o.RouteLimit) }},
	{lua: "SHARD", str: true, val: func(o Options) string { return strconv.Itoa(o.Shard) }},
	{lua: "RETIRE", val: func(o Options) string { return strconv.Itoa(o.RetireAfter) }},
	{lua: "HOSTTTL", val: func(o Options) string { return msArg(o.HostStateTTL) }},
	{lua: "TOPKEEP", val: func(o Options) string { return strconv.Itoa(o.TopHosts) }},
	{lua: "ERRKEEP", val: func(o Options) string { return strconv.Itoa(o.RecentErrors) }},
	{lua: "BLKEEP", val: func(o Options) string { return strconv.Itoa(o.BacklinkHosts) }},
}

func msArg(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Positions after the tables: the front queues follow the fixed KEYS (then, when kept,
// the recrawl outbox), and a script's own arguments follow the common ARGV.
var (
	fixedKeys = len(shardKeys)
	argStart  = len(callArgs) + len(confArgs) + 1
)

// layoutLua declares the layout to the scripts: a local per key and argument, fq(p) (front
// queue p's key), K_OUTBOX (nil when not kept) and A (the first of a script's own
// arguments). It adds no local beyond those: the scripts are near Lua's limit of 200.
var layoutLua = func() redisx.Lua {
	var b strings.Builder
	b.WriteString("-- KEYS and ARGV layout from Go (frontier.go: shardKeys, callArgs, confArgs)\n")
	for i, k := range shardKeys {
		fmt.Fprintf(&b, "local %s = KEYS[%d]\n", k.lua, i+1)
	}
	arg := func(name string, str bool, pos int) {
		if str {
			fmt.Fprintf(&b, "local %s = ARGV[%d]\n", name, pos)
		} else {
			fmt.Fprintf(&b, "local %s = tonumber(ARGV[%d])\n", name, pos)
		}
	}
	for i, c := range callArgs {
		arg(c.lua, c.str, i+1)
	}
	for i, c := range confArgs {
		arg(c.lua, c.str, len(callArgs)+i+1)
	}
	fmt.Fprintf(&b, "local function fq(p) return KEYS[%d + p] end\n", fixedKeys+1)
	fmt.Fprintf(&b, "local K_OUTBOX = KEYS[%d + F]\n", fixedKeys+1)
	fmt.Fprintf(&b, "local A = %d\n", argStart)
	return redisx.Lua{Name: "layout", Source: b.String()}
}()

// names are the constants of frontierkeys that the scripts use.
var names = redisx.Names(
	"SLOT_SEP", frontierkeys.LeaseSlotSep, "TOKEN_SLOT", frontierkeys.LeaseTokenSep,
	"PARK_BLOCKED", frontierkeys.ParkBlocked,
	"WIDE", frontierkeys.Wide, "WIDE_VALUE", frontierkeys.WideValue,
)

// pstatNames are the per-rule counters' names (frontierkeys.PolicyStat*), as the table
// PSTAT: a script may have 200 locals, and the frontier's are near that.
var pstatNames = redisx.Table("PSTAT",
	"HOSTS", frontierkeys.PolicyStatHosts, "REQUESTS", frontierkeys.PolicyStatRequests,
	"BLOCKED", frontierkeys.PolicyStatBlocked, "PARKED", frontierkeys.PolicyStatParked,
	"EXCLUDED", frontierkeys.PolicyStatExcluded,
)

// Scripts are the frontier's scripts by file name, for a test of what Redis makes of them
// (redisx.Source).
func Scripts() map[string]*redis.Script {
	return map[string]*redis.Script{
		"add.lua": scriptAdd, "dispatch.lua": scriptDispatch, "complete.lua": scriptComplete,
		"reap.lua": scriptReap, "park.lua": scriptPark, "resume.lua": scriptResume,
		"over.lua": scriptOver, "recheck.lua": scriptRecheck, "sift.lua": scriptSift,
		"limits.lua": scriptLimits, "readmit.lua": scriptReadmit,
	}
}

// load builds a frontier script: the names from Go, the common prelude, the politeness and
// policy modules, the shared steps, the script.
func load(name string) *redis.Script {
	return redisx.Script(names, pstatNames, politeness.PolicyNames, politeness.HostNames, layoutLua, redisx.Lua{FS: luaFS, Name: "lua/common.lua"}, politeness.Module,
		politeness.PolicyModule, redisx.Lua{FS: luaFS, Name: "lua/steps.lua"},
		redisx.Lua{FS: luaFS, Name: "lua/" + name})
}

// Options configure one shard's frontier. Start from DefaultOptions: zero is meaningful
// for several fields (MinDelay 0 = no politeness floor, MaxRetries 0 = no retry). The
// settings are frontierconf's and politeness's, validated where they are read; the
// frontier takes them as given.
type Options struct {
	// Shard is this frontier's shard of Shards (TRAWL_SHARDS), which name its keys
	// (frontierkeys.ForShard).
	Shard, Shards int
	// KeyPrefix is the deployment prefix of every key (TRAWL_REDIS_PREFIX, default "trawl").
	KeyPrefix string
	// Settings: F front queues (queue 0 the highest), B back queues, the router's bias
	// (queue i weighs bias^i), retries, depth, budgets (0 = unlimited), retirement, host
	// state lifetime, backlink hosts.
	frontierconf.Settings
	// Rules space the requests to a host (the gap) and back off its errors; the scripts
	// apply them with the politeness module.
	politeness.Rules
	// LeaseTTL is how long a dispatched task holds its host.
	LeaseTTL time.Duration
	// RouteLimit bounds the front-queue entries one script moves, and so its run time.
	RouteLimit int
	// ReapLimit bounds the leases one Reap call returns.
	ReapLimit int
	// TopHosts bounds the status page's views of the busiest and the slowest hosts (keys
	// busiest and slowest); RecentErrors bounds its log of failed and retried outcomes
	// (key errors).
	TopHosts     int
	RecentErrors int
	// KeepFailedRecrawls (adaptive recrawl) keeps the recrawled URLs that end failed
	// without a page in the shard's outbox (FailedRecrawls), with their state, in the step
	// that fails them.
	KeepFailedRecrawls bool
	// Clock, when set, replaces the Redis server's clock in every script. Only tests that
	// drive time step by step set it; a scheduler uses the one clock its processes share.
	Clock func() time.Time
}

// DefaultOptions returns the documented defaults for shard, of one shard (Shards 1).
func DefaultOptions(shard int) Options {
	return Options{
		Shard:        shard,
		Shards:       1,
		KeyPrefix:    redisx.DefaultPrefix,
		Settings:     frontierconf.Defaults,
		Rules:        politeness.Defaults,
		LeaseTTL:     envconfig.DefaultLeaseTTL,
		RouteLimit:   4096,
		ReapLimit:    1000,
		TopHosts:     1000,
		RecentErrors: 100,
	}
}

// Prioritizer maps a URL to a front queue in [0, queues).
type Prioritizer interface {
	Priority(u crawlmsg.Discovered, queues int) int
}

// BacklinkScorer is a Prioritizer whose score also counts the backlinks of the URL's host,
// which only Redis knows: the score is X·IB(host) + LinkScore(u) with
// IB = log2(1 + backlinks), and the add script maps it to queue F-1-⌊score⌋, clamped.
// With a BacklinkScorer the frontier keeps the backlink counts (key backlinks).
type BacklinkScorer interface {
	Prioritizer
	// BacklinkWeight is X.
	BacklinkWeight() float64
	// LinkScore is the part of the score known from the URL itself (Y·IL).
	LinkScore(u crawlmsg.Discovered) float64
}

// Batch is the URLs of one frontier message. ID (natsx.MsgID of the message) makes the
// batch idempotent: a batch whose ID has a marker is not queued again. The marker is kept
// under Seq, the message's stream sequence, until TrimApplied passes it: a message the
// frontier consumer has acknowledged is never delivered again. Source is the page the URLs
// were found on (empty for seeds); a BacklinkScorer counts it as a backlink of every other
// host in the batch.
type Batch struct {
	ID     string
	Seq    uint64
	Source string
	URLs   []crawlmsg.Discovered
}

// Duplicate is AddBatches' count for a batch that was applied before.
const Duplicate = -1

// Frontier is one shard's frontier. It is safe for concurrent use, and several Frontiers
// (in several processes) may share a shard.
type Frontier struct {
	rdb  redis.UniversalClient
	o    Options
	p    Prioritizer
	bs   BacklinkScorer // p, when it scores backlinks
	k    frontierkeys.Shard
	keys []string
	conf []any // the confArgs values, after callArgs
	// rules are the live site policies (UsePolicy); nil: none.
	rules func() *policy.Set
	// sifted is what the policy passes sifted last (siftParked).
	sifted siftMemo
	// excluded, when set, is given the queued URLs a scope recheck ended (LogExcluded).
	excluded func(context.Context, []Refused)
	// res is the rules SyncPolicy last brought the shard in line with, resolved per host:
	// AddBatches passes its hosts' limits from it, ResolvePending stores them.
	res atomic.Pointer[politeness.Resolved]
}

// UsePolicy makes AddBatches check each URL against the live site policies' depth,
// include and exclude (Resolved.Admit). Call it before the frontier is used.
func (f *Frontier) UsePolicy(rules func() *policy.Set) { f.rules = rules }

// LogExcluded makes RecheckScope give fn the queued URLs each of its steps ended out of
// scope, once that step is done (a chunk at a time: nothing gathers a whole queue).
func (f *Frontier) LogExcluded(fn func(context.Context, []Refused)) { f.excluded = fn }

// New returns the frontier of o.Shard. The bounds that are not settings (RouteLimit,
// ReapLimit, TopHosts, RecentErrors) take their defaults when zero.
func New(rdb redis.UniversalClient, o Options, p Prioritizer) *Frontier {
	def := DefaultOptions(o.Shard)
	if o.RouteLimit <= 0 {
		o.RouteLimit = def.RouteLimit
	}
	if o.ReapLimit <= 0 {
		o.ReapLimit = def.ReapLimit
	}
	if o.TopHosts <= 0 {
		o.TopHosts = def.TopHosts
	}
	if o.RecentErrors <= 0 {
		o.RecentErrors = def.RecentErrors
	}

	k := frontierkeys.ForShard(o.KeyPrefix, o.Shard, o.Shards)
	keys := make([]string, 0, fixedKeys+o.FrontQueues+1)
	for _, sk := range shardKeys {
		keys = append(keys, sk.key(k))
	}
	for q := range o.FrontQueues {
		keys = append(keys, k.FrontQueue(q))
	}
	if o.KeepFailedRecrawls {
		// After the front queues: lua/common.lua's K_OUTBOX, absent when not kept.
		keys = append(keys, k.RecrawlOutbox())
	}
	conf := make([]any, len(confArgs))
	for i, c := range confArgs {
		conf[i] = c.val(o)
	}
	bs, _ := p.(BacklinkScorer)
	return &Frontier{rdb: rdb, o: o, p: p, bs: bs, k: k, keys: keys, conf: conf}
}

// Options returns the effective options.
func (f *Frontier) Options() Options { return f.o }

// Keyspace returns the shard's key names (tests, operators).
func (f *Frontier) Keyspace() redisx.Keyspace { return f.k.Keyspace() }

// args builds the common ARGV prefix followed by extra capacity for n script arguments.
// The clock argument is empty: the script reads the Redis server's TIME, so every process
// serving a shard decides by the same clock whatever its own says.
func (f *Frontier) args(n int) []any {
	a := make([]any, 0, argStart-1+n)
	now := ""
	if f.o.Clock != nil {
		now = strconv.FormatInt(f.o.Clock().UnixMilli(), 10)
	}
	a = append(a, f.k.Prefix(), now, strconv.FormatInt(int64(rand.Int32N(2147483646)+1), 10))
	return append(a, f.conf...)
}

// Now is the frontier's clock: the Redis server's TIME (or Options.Clock in tests).
func (f *Frontier) Now(ctx context.Context) (time.Time, error) {
	if f.o.Clock != nil {
		return f.o.Clock(), nil
	}
	t, err := f.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("frontier: shard %d: time: %w", f.o.Shard, err)
	}
	return t, nil
}

// run runs one frontier step. Every step changes state, so it runs at most once per call
// (redisx.RunOnce): a step whose reply was lost fails, and its caller's retry finds what
// the step did (add markers, lease tokens) instead of doing it again.
func (f *Frontier) run(ctx context.Context, s *redis.Script, args []any) (any, error) {
	v, err := redisx.RunOnce(ctx, f.rdb, s, f.keys, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("frontier: shard %d: %w", f.o.Shard, err)
	}
	return v, nil
}

// AddBatches is Add's count of URLs queued per batch, or Duplicate for a batch applied
// before.
func (f *Frontier) AddBatches(ctx context.Context, batches []Batch) ([]int, error) {
	added, err := f.Add(ctx, batches)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(added))
	for i, a := range added {
		out[i] = a.Queued
	}
	return out, nil
}

// Added is what Add did with one batch.
type Added struct {
	// Queued is the number of URLs queued, or Duplicate for a batch applied before.
	Queued int
	// Refused are the URLs the batch brought that ended at admission, with their reason.
	// A Duplicate batch lists only those refused in Go (scope, depth): what the script
	// refused at its first application is not kept.
	Refused []Refused
}

// Refused is a URL that ended at admission without being queued.
type Refused struct {
	URL, Host string
	Reason    string // crawlmsg.Reason…
	Detail    string // the rule or budget that refused it
}

// Add queues the URLs of each batch in one script call. A URL deeper than MaxDepth or a
// rule's max depth is accepted and counted out of scope (too deep); so is one with
// negative counters, whose host cannot be determined, or that a rule's include or exclude
// leaves out; one of a retired host is accepted and counted failed; one beyond a page
// budget is accepted and counted over budget. Each refused URL is returned with its reason.
// With a BacklinkScorer each batch also counts its Source as a backlink of every other
// host in it.
func (f *Frontier) Add(ctx context.Context, batches []Batch) ([]Added, error) {
	if len(batches) == 0 {
		return nil, nil
	}
	n := 4
	for _, b := range batches {
		n += 5 + 3*len(b.URLs)
	}
	args := f.args(n)
	args = append(args, strconv.Itoa(len(batches)), "")
	if f.bs != nil {
		args[len(args)-1] = strconv.FormatFloat(max(f.bs.BacklinkWeight(), 0), 'g', -1, 64)
	}
	// The hosts' limits, resolved under the rules the shard was last brought in line with,
	// go first: the script stores each in the host's state.
	res := f.res.Load()
	if res != nil && res.Gen() == "" {
		res = nil
	}
	args = append(args, "", "0")
	limAt := len(args)
	var limHosts map[string]bool
	if res != nil {
		args[limAt-2] = res.Gen()
		limHosts = map[string]bool{}
	}
	var buf []byte
	var set *policy.Set
	if f.rules != nil {
		if set = f.rules(); set != nil && len(set.Rules()) == 0 {
			set = nil
		}
	}
	out := make([]Added, len(batches))
	// sent[b] are the URLs of batch b given to the script, in order, when it refused one
	// of them (the script names them by place).
	sent := make([][]crawlmsg.Discovered, len(batches))
	for bi, b := range batches {
		hdr := len(args)
		args = append(args, b.ID, strconv.FormatUint(b.Seq, 10), f.sourceHost(b.Source), "0", "0")
		oos, ok := 0, 0
		for ui, u := range b.URLs {
			host, reason, why := f.admissible(u)
			if reason == "" && set != nil {
				// A rule's depth, include and exclude; its block is the router's (parked).
				// Set.Admit looks only at the rules that limit the scope.
				if in, w := set.Admit(u.URL, u.Depth); !in {
					reason, why = crawlmsg.ReasonOutOfScope, w
					if strings.HasPrefix(w, string(policy.FMaxDepth)+" ") {
						reason = crawlmsg.ReasonTooDeep
					}
				}
			}
			var ext string
			if reason == "" {
				var err error
				if ext, err = u.Extra().Encode(); err != nil {
					reason, why = crawlmsg.ReasonOutOfScope, err.Error()
				}
			}
			if reason != "" {
				oos++
				out[bi].Refused = append(out[bi].Refused, Refused{URL: u.URL, Host: host, Reason: reason, Detail: why})
				if sent[bi] == nil {
					// From here on the places differ: keep the URLs sent.
					sent[bi] = append(make([]crawlmsg.Discovered, 0, len(b.URLs)), b.URLs[:ui]...)
				}
				continue
			}
			if sent[bi] != nil {
				sent[bi] = append(sent[bi], u)
			}
			buf = frontierkeys.Entry{Depth: u.Depth, Hops: u.Hops, URL: u.URL, Ext: ext}.Append(buf[:0])
			args = append(args, f.priority(u), host, string(buf))
			ok++
			if limHosts != nil {
				limHosts[host] = true
			}
		}
		if sent[bi] == nil {
			sent[bi] = b.URLs
		}
		args[hdr+3] = strconv.Itoa(oos)
		args[hdr+4] = strconv.Itoa(ok)
	}
	if len(limHosts) > 0 {
		lims := make([]any, 0, 2*len(limHosts))
		for h := range limHosts {
			lims = append(lims, h, res.Value(h))
		}
		args[limAt-1] = strconv.Itoa(len(limHosts))
		args = slices.Insert(args, limAt, lims...)
	}
	v, err := f.run(ctx, scriptAdd, args)
	if err != nil {
		return nil, err
	}
	arr, isArr := v.([]any)
	if !isArr || len(arr) != len(batches) {
		return nil, fmt.Errorf("frontier: add: unexpected reply %v", v)
	}
	for bi, e := range arr {
		if err := f.addReply(&out[bi], e, sent[bi]); err != nil {
			return nil, fmt.Errorf("frontier: add: batch %d: %w", bi, err)
		}
	}
	return out, nil
}

// addReply reads the script's reply for one batch into a: its count, or {count, place,
// why, …} for the URLs the script refused (add.lua), sent being the batch's URLs as given.
func (f *Frontier) addReply(a *Added, e any, sent []crawlmsg.Discovered) error {
	switch x := e.(type) {
	case int64:
		a.Queued = int(x)
		return nil
	case []any:
		r, err := redisx.Int64s(x)
		if err != nil || len(r)%2 != 1 {
			return fmt.Errorf("unexpected reply %v: %w", x, err)
		}
		a.Queued = int(r[0])
		for j := 1; j < len(r); j += 2 {
			k := int(r[j]) - 1
			if k < 0 || k >= len(sent) {
				return fmt.Errorf("refused URL %d of %d", k+1, len(sent))
			}
			u := sent[k]
			host, _, _ := f.admissible(u)
			ref := Refused{URL: u.URL, Host: host, Reason: crawlmsg.ReasonOverBudget}
			switch r[j+1] {
			case 1:
				ref.Reason, ref.Detail = crawlmsg.ReasonRetired, "host retired"
			case 2:
				ref.Detail = "host budget"
			default:
				ref.Detail = "crawl budget (TRAWL_MAX_PAGES)"
			}
			a.Refused = append(a.Refused, ref)
		}
		return nil
	}
	return fmt.Errorf("unexpected reply %T", e)
}

// priority is the script's priority argument: the front queue, or with a BacklinkScorer
// the URL's own part of the score.
func (f *Frontier) priority(u crawlmsg.Discovered) string {
	if f.bs != nil {
		sc := f.bs.LinkScore(u)
		if math.IsNaN(sc) || sc < 0 {
			sc = 0
		}
		return strconv.FormatFloat(min(sc, 1e6), 'g', -1, 64)
	}
	p := min(u.Depth, f.o.FrontQueues-1)
	if f.p != nil {
		p = f.p.Priority(u, f.o.FrontQueues)
	}
	return strconv.Itoa(min(max(p, 0), f.o.FrontQueues-1))
}

// sourceHost is the host a backlink comes from, or "" when nothing is counted (no
// backlink scoring, a seed, or a source the scripts could not compare).
func (f *Frontier) sourceHost(source string) string {
	if f.bs == nil || source == "" {
		return ""
	}
	h, err := urlnorm.Host(source)
	if err != nil {
		return ""
	}
	return h
}

// admissible returns the URL's host if the URL may be queued, else why not: a reason
// (crawlmsg.Reason…) and its detail.
func (f *Frontier) admissible(u crawlmsg.Discovered) (host, reason, why string) {
	if u.Depth > f.o.MaxDepth {
		return urlnorm.HostOf(u.URL), crawlmsg.ReasonTooDeep, "TRAWL_MAX_DEPTH"
	}
	if u.Depth < 0 || u.Hops < 0 || u.Embeds < 0 || !u.Kind.Valid() {
		return urlnorm.HostOf(u.URL), crawlmsg.ReasonOutOfScope, "invalid link counters or kind"
	}
	// A queue entry ends its URL at the first space (frontierkeys.Entry); a normalised URL
	// has none.
	if strings.ContainsAny(u.URL, " \t\r\n") {
		return "", crawlmsg.ReasonOutOfScope, "not a crawlable URL"
	}
	if !strings.HasPrefix(u.URL, "http://") && !strings.HasPrefix(u.URL, "https://") {
		return "", crawlmsg.ReasonOutOfScope, "not an http(s) URL"
	}
	host, err := urlnorm.Host(u.URL)
	if err != nil || host != urlnorm.HostOf(u.URL) || strings.ContainsAny(host, " \t\r\n") {
		return "", crawlmsg.ReasonOutOfScope, "no valid host"
	}
	return host, "", ""
}

// Dispatch hands out up to max tasks, one per host whose next fetch time has come by the
// Redis clock, each holding its host's lease until that clock's now+LeaseTTL. It first
// lets the router fill free back queues. Nothing is dispatched while the shard is paused.
//
// A step whose reply is lost (the connection dropped after Redis ran it) may have leased
// hosts: they are found by the call's nonce, which every lease token of the call ends
// with, and returned with the error, so the caller publishes them instead of leaving them
// to the reaper.
//
// A host whose stored limits are of older rules is not leased: the step hands it to Go,
// which stores its limits (ResolvePending) and, when that leaves room, runs the step once
// more, so such a host is dispatched by the same call.
func (f *Frontier) Dispatch(ctx context.Context, max int) ([]crawlmsg.FetchTask, error) {
	if max <= 0 {
		return nil, nil
	}
	tasks, pend, err := f.dispatch(ctx, max)
	if err != nil || pend == 0 {
		return tasks, err
	}
	n, err := f.ResolvePending(ctx)
	if err != nil || n == 0 || len(tasks) >= max {
		return tasks, err
	}
	more, _, err := f.dispatch(ctx, max-len(tasks))
	return append(tasks, more...), err
}

// dispatch runs the dispatch step once; pend is how many hosts wait for their limits.
func (f *Frontier) dispatch(ctx context.Context, max int) (tasks []crawlmsg.FetchTask, pend int64, err error) {
	args := append(f.args(1), strconv.Itoa(max))
	v, err := f.run(ctx, scriptDispatch, args)
	if err != nil {
		nonce, _ := args[2].(string)
		tasks, rerr := f.recoverDispatch(ctx, nonce)
		if rerr != nil {
			return nil, 0, fmt.Errorf("%w (its leases, if it ran, are left to the reaper: %w)", err, rerr)
		}
		return tasks, 0, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, 0, fmt.Errorf("frontier: dispatch: unexpected reply %T", v)
	}
	if len(arr) < 2 {
		return nil, 0, nil
	}
	deadline, _ := arr[0].(int64)
	pend, _ = arr[1].(int64)
	rest := arr[2:]
	tasks = make([]crawlmsg.FetchTask, 0, len(rest)/3)
	for i := 0; i+2 < len(rest); i += 3 {
		host, _ := rest[i].(string)
		tok, _ := rest[i+1].(string)
		entry, _ := rest[i+2].(string)
		t, err := f.task(host, tok, entry, deadline)
		if err != nil {
			// The lease is recorded; expiry will account for the task.
			return tasks, pend, err
		}
		tasks = append(tasks, t)
	}
	return tasks, pend, nil
}

// task is the fetch task of one lease.
func (f *Frontier) task(host, tok, entry string, deadline int64) (crawlmsg.FetchTask, error) {
	e, err := frontierkeys.ParseEntry(entry)
	if err != nil {
		return crawlmsg.FetchTask{}, fmt.Errorf("frontier: dispatch: host %s: %w", host, err)
	}
	x, err := crawlmsg.DecodeExtra(e.Ext)
	if err != nil {
		return crawlmsg.FetchTask{}, fmt.Errorf("frontier: dispatch: host %s: %w", host, err)
	}
	return crawlmsg.FetchTask{
		V: crawlmsg.Version, Shard: f.o.Shard, Host: host, URL: e.URL,
		Depth: e.Depth, Hops: e.Hops, Attempt: e.Attempt, Kind: x.Kind, Embeds: x.Embeds, Recrawl: x.Recrawl, Under: x.Under,
		Lease: tok, Deadline: deadline, Dispatched: deadline - f.o.LeaseTTL.Milliseconds(),
	}, nil
}

// recoverDispatch returns the tasks of the leases a failed dispatch call made, found by
// its nonce (the last part of each lease token; lua/dispatch.lua). It reads the lease
// table, so it runs only after a failed call, under its own short deadline: the caller's
// context may be what ended the call.
func (f *Frontier) recoverDispatch(ctx context.Context, nonce string) ([]crawlmsg.FetchTask, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recoverTimeout)
	defer cancel()
	suffix := "-" + nonce
	var slots, toks, entries []string
	var cursor uint64
	for {
		kv, next, err := f.rdb.HScan(ctx, f.k.Lease(), cursor, "", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("frontier: shard %d: find the leases of a failed dispatch: %w", f.o.Shard, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			tok, entry, ok := strings.Cut(kv[i+1], " ")
			// A token of lease slot k ≥ 1 ends "~<k>" after the nonce.
			bare, _, _ := strings.Cut(tok, frontierkeys.LeaseTokenSep)
			if ok && strings.HasSuffix(bare, suffix) {
				slots, toks, entries = append(slots, kv[i]), append(toks, tok), append(entries, entry)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if len(slots) == 0 {
		return nil, nil
	}
	dl, err := f.rdb.ZMScore(ctx, f.k.Inflight(), slots...).Result()
	if err != nil {
		return nil, fmt.Errorf("frontier: shard %d: deadlines of a failed dispatch's leases: %w", f.o.Shard, err)
	}
	tasks := make([]crawlmsg.FetchTask, 0, len(slots))
	for i, s := range slots {
		if i >= len(dl) || dl[i] == 0 {
			continue
		}
		t, err := f.task(frontierkeys.SlotHost(s), toks[i], entries[i], int64(dl[i]))
		if err != nil {
			continue
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// recoverTimeout bounds the search for a failed dispatch's leases.
const recoverTimeout = 2 * time.Second

// Entry is a decoded queue entry "<depth> <hops> <attempt> <url>".
type Entry = frontierkeys.Entry

// ErrBadEntry marks a queue entry that is not "<depth> <hops> <attempt> <url>".
var ErrBadEntry = frontierkeys.ErrBadEntry

// ParseEntry decodes a queue entry (tests and tools reading Redis directly).
func ParseEntry(s string) (Entry, error) { return frontierkeys.ParseEntry(s) }

// Reap returns the URLs of leases whose deadline is at or before cutoff to the head of
// their host queues (counting an attempt) and re-arms each host after its delay. It
// returns how many leases expired. The caller picks cutoff on the frontier's clock (Now)
// a grace period back, after the outcomes that could still release those leases were
// applied: a lease with an outcome waiting must not be reaped.
func (f *Frontier) Reap(ctx context.Context, cutoff time.Time) (int, error) {
	n, _, err := f.ReapCounted(ctx, cutoff)
	return n, err
}

// ReapCounted is Reap that also says how many of the reaped URLs ended failed because their
// attempts ran out ("attempts exhausted").
func (f *Frontier) ReapCounted(ctx context.Context, cutoff time.Time) (reaped, exhausted int, err error) {
	total := 0
	for {
		args := append(f.args(2), strconv.Itoa(f.o.ReapLimit), strconv.FormatInt(cutoff.UnixMilli(), 10))
		v, err := f.run(ctx, scriptReap, args)
		if err != nil {
			return total, exhausted, err
		}
		r, err := redisx.Int64s(v)
		if err != nil || len(r) < 3 {
			return total, exhausted, fmt.Errorf("frontier: reap: unexpected reply %v: %w", v, err)
		}
		total += int(r[0])
		exhausted += int(r[2])
		if int(r[0]) < f.o.ReapLimit {
			return total, exhausted, nil
		}
	}
}

// Overdue counts the leases whose deadline is at or before cutoff.
func (f *Frontier) Overdue(ctx context.Context, cutoff time.Time) (int64, error) {
	n, err := f.rdb.ZCount(ctx, f.k.Inflight(), "-inf", strconv.FormatInt(cutoff.UnixMilli(), 10)).Result()
	if err != nil {
		return 0, fmt.Errorf("frontier: shard %d: overdue leases: %w", f.o.Shard, err)
	}
	return n, nil
}

// Pause stops dispatching on this shard (for every scheduler process) until Resume.
func (f *Frontier) Pause(ctx context.Context) error {
	if err := f.rdb.Set(ctx, f.k.Paused(), "1", 0).Err(); err != nil {
		return fmt.Errorf("frontier: pause: %w", err)
	}
	return nil
}

// Resume undoes Pause.
func (f *Frontier) Resume(ctx context.Context) error {
	if err := f.rdb.Del(ctx, f.k.Paused()).Err(); err != nil {
		return fmt.Errorf("frontier: resume: %w", err)
	}
	return nil
}

// NextWake returns how long until the earliest next fetch time in the heap, by the Redis
// clock. ok is false when the heap is empty or the shard is paused: no host will become
// due by itself.
func (f *Frontier) NextWake(ctx context.Context) (wait time.Duration, ok bool, err error) {
	var paused *redis.IntCmd
	var first *redis.ZSliceCmd
	var now *redis.TimeCmd
	_, err = f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		paused = p.Exists(ctx, f.k.Paused())
		first = p.ZRangeWithScores(ctx, f.k.Heap(), 0, 0)
		now = p.Time(ctx)
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("frontier: next wake: %w", err)
	}
	if paused.Val() > 0 || len(first.Val()) == 0 {
		return 0, false, nil
	}
	t := now.Val()
	if f.o.Clock != nil {
		t = f.o.Clock()
	}
	return time.UnixMilli(int64(first.Val()[0].Score)).Sub(t), true, nil
}

// TrimApplied drops the markers of frontier messages at or below stream sequence floor
// and returns how many went. Pass the frontier consumer's ack floor: a message at or
// below it was acknowledged and will not be delivered again.
func (f *Frontier) TrimApplied(ctx context.Context, floor uint64) (int64, error) {
	if floor == 0 {
		return 0, nil
	}
	n, err := f.rdb.ZRemRangeByScore(ctx, f.k.Applied(), "-inf", strconv.FormatUint(floor, 10)).Result()
	if err != nil {
		return 0, fmt.Errorf("frontier: shard %d: trim applied markers: %w", f.o.Shard, err)
	}
	return n, nil
}

// Stats reads the shard's counters and queue sizes in one round trip, its due hosts counted
// by this process's clock (Options.Clock in tests): Status without top hosts or errors.
func (f *Frontier) Stats(ctx context.Context) (frontierkeys.ShardStatus, error) {
	now := time.Now()
	if f.o.Clock != nil {
		now = f.o.Clock()
	}
	st, err := f.Status(ctx, now, 0, 0)
	return st.ShardStatus, err
}

// FailedRecrawl is a recrawled URL that ended failed without a page (its host retired, its
// retries spent, its lease reaped past them), kept with its state in the step that failed
// it (Options.KeepFailedRecrawls) until its next schedule is written.
type FailedRecrawl struct {
	// Raw is the outbox item, which DropFailedRecrawls takes.
	Raw string
	// At is when it failed (the frontier's clock); Requested says a request was made for it
	// (an outcome), so the failure counts as a fetch of the URL.
	At        time.Time
	Requested bool
	Entry     Entry
}

// FailedRecrawls returns up to n of the oldest kept failed recrawls. Items that do not
// parse come back with err set in bad (their Raw), so the caller can drop them.
func (f *Frontier) FailedRecrawls(ctx context.Context, n int) (kept []FailedRecrawl, bad []string, err error) {
	raws, err := f.rdb.LRange(ctx, f.k.RecrawlOutbox(), 0, int64(n)-1).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("frontier: shard %d: read failed recrawls: %w", f.o.Shard, err)
	}
	for _, raw := range raws {
		fr, ok := parseFailedRecrawl(raw)
		if !ok {
			bad = append(bad, raw)
			continue
		}
		kept = append(kept, fr)
	}
	return kept, bad, nil
}

func parseFailedRecrawl(raw string) (FailedRecrawl, bool) {
	ms, rest, ok := strings.Cut(raw, " ")
	if !ok {
		return FailedRecrawl{}, false
	}
	req, entry, ok := strings.Cut(rest, " ")
	at, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || (req != "0" && req != "1") {
		return FailedRecrawl{}, false
	}
	e, err := frontierkeys.ParseEntry(entry)
	if err != nil {
		return FailedRecrawl{}, false
	}
	return FailedRecrawl{Raw: raw, At: time.UnixMilli(at), Requested: req == "1", Entry: e}, true
}

// DropFailedRecrawls removes outbox items (FailedRecrawl.Raw) whose schedules are
// written. Each goes by value, so several processes draining one shard remove only what
// they wrote, and one already removed is no error.
func (f *Frontier) DropFailedRecrawls(ctx context.Context, raws []string) error {
	if len(raws) == 0 {
		return nil
	}
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range raws {
			p.LRem(ctx, f.k.RecrawlOutbox(), 1, r)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("frontier: shard %d: drop failed recrawls: %w", f.o.Shard, err)
	}
	return nil
}

// SpooledSkips is one item of the shard's skip spool (frontierkeys.Shard.SkipSpool): queued
// URLs one step ended without a request (over budget, or failed with their retired host),
// waiting to be listed on the skip log.
type SpooledSkips struct {
	// Raw is the spool item, which DropSpooledSkips takes; it is unique (the step's time
	// and random seed), so it names the item's skip log entry across redeliveries.
	Raw     string
	At      time.Time
	Reason  string // crawlmsg.ReasonOverBudget or crawlmsg.ReasonRetired
	Entries []Entry
}

// spoolReasons maps the word after an item's "<ms> <seed> <i>" (common.lua's spool) to
// the skip log's reason; none is over budget.
var spoolReasons = map[string]string{"": crawlmsg.ReasonOverBudget, "retired": crawlmsg.ReasonRetired}

// SpooledSkips returns up to n of the oldest items of the skip spool. Items that do not
// parse come back in bad (their Raw), so the caller can drop them.
func (f *Frontier) SpooledSkips(ctx context.Context, n int) (items []SpooledSkips, bad []string, err error) {
	raws, err := f.rdb.LRange(ctx, f.k.SkipSpool(), 0, int64(n)-1).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("frontier: shard %d: read skip spool: %w", f.o.Shard, err)
	}
	for _, raw := range raws {
		it, ok := parseSpooled(raw)
		if !ok {
			bad = append(bad, raw)
			continue
		}
		items = append(items, it)
	}
	return items, bad, nil
}

func parseSpooled(raw string) (SpooledSkips, bool) {
	head, body, ok := strings.Cut(raw, "\n")
	f := strings.Fields(head)
	if !ok || len(f) < 3 || len(f) > 4 {
		return SpooledSkips{}, false
	}
	at, err := strconv.ParseInt(f[0], 10, 64)
	why := ""
	if len(f) == 4 {
		why = f[3]
	}
	reason, known := spoolReasons[why]
	if err != nil || !known {
		return SpooledSkips{}, false
	}
	it := SpooledSkips{Raw: raw, At: time.UnixMilli(at), Reason: reason}
	for line := range strings.SplitSeq(body, "\n") {
		e, err := frontierkeys.ParseEntry(line)
		if err != nil {
			return SpooledSkips{}, false
		}
		it.Entries = append(it.Entries, e)
	}
	return it, true
}

// DropSpooledSkips removes skip spool items (SpooledSkips.Raw) once they are listed. Each
// goes by value, so several processes draining one shard remove only what they listed,
// and one already removed is no error.
func (f *Frontier) DropSpooledSkips(ctx context.Context, raws []string) error {
	if len(raws) == 0 {
		return nil
	}
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range raws {
			p.LRem(ctx, f.k.SkipSpool(), 1, r)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("frontier: shard %d: drop skip spool items: %w", f.o.Shard, err)
	}
	return nil
}
