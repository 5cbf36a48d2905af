package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

// The site policy tests: each sets rules through the store (as trawlctl policy does) and
// judges what they did from the synthetic web's own request log.

// policyPrefix is the Redis key prefix of the stacks these tests run.
const policyPrefix = "trawl"

// policyCrawl is a running crawl whose rules were in Redis before any service started, so
// that every service reads them at start and the very first request obeys them.
type policyCrawl struct {
	web   *synthweb.Web
	st    *stack.Stack
	redis *redisproc.Server
	rdb   redis.UniversalClient
	store *policy.Store
	env   crawlEnv
	opts  stack.Options
	start time.Time
}

// startPolicyCrawl starts the web, a redis-server (AOF on, fsync always, as the stack runs
// it), applies the rules made for the web, then starts the services on that Redis and seeds the web's home
// pages. opts.Env gets env's settings where it does not set them.
func startPolicyCrawl(t *testing.T, wcfg synthweb.Config, env crawlEnv, opts stack.Options, rules func(*synthweb.Web) []policy.Change) *policyCrawl {
	t.Helper()
	ctx := testwait.Context(t)
	web, err := synthweb.Start(ctx, wcfg)
	if err != nil {
		t.Fatalf("synthetic web: %v", err)
	}
	t.Cleanup(func() { web.Close() })
	rs := redisproc.StartT(t, redisproc.Options{AppendOnly: true, FsyncAlways: true})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { rdb.Close() })
	pc := &policyCrawl{web: web, redis: rs, rdb: rdb, store: policy.NewStore(rdb, policyPrefix), env: env}
	if rules != nil {
		pc.apply(t, rules(web)...)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	opts.BinDir = binDir
	opts.RedisURL = rs.URL()
	opts.Env = maps.Clone(opts.Env)
	if opts.Env == nil {
		opts.Env = map[string]string{}
	}
	for k, v := range env.vars() {
		if _, set := opts.Env[k]; !set {
			opts.Env[k] = v
		}
	}
	pc.opts = opts
	pc.st = startStack(t, ctx, opts)
	pc.start = time.Now()
	if err := pc.st.Seed(ctx, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	return pc
}

// apply makes the changes in one apply and returns when the store answered: the moment a
// change's 2-second bound counts from.
func (pc *policyCrawl) apply(t *testing.T, changes ...policy.Change) time.Time {
	t.Helper()
	v, diffs, err := pc.store.Apply(testwait.Context(t), changes, "e2e", 0)
	if err != nil {
		t.Fatalf("apply %s: %v", describeChanges(changes), err)
	}
	if len(diffs) == 0 {
		t.Fatalf("apply %s: nothing changed (version %d)", describeChanges(changes), v)
	}
	return time.Now()
}

func describeChanges(cs []policy.Change) string {
	var s []string
	for _, c := range cs {
		if c.Remove {
			s = append(s, "rm "+c.Rule.Scope.String())
		} else {
			s = append(s, "set "+c.Rule.Scope.String())
		}
	}
	return strings.Join(s, ", ")
}

// wait waits until the crawl is idle and no service exited on its own.
func (pc *policyCrawl) wait(t *testing.T) stack.Progress {
	t.Helper()
	p, err := pc.st.WaitIdle(testwait.Context(t), 250*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("crawl did not finish: %v", err)
	}
	for _, proc := range pc.st.Procs() {
		if exited, perr := proc.Exited(); exited && !proc.Stopped() {
			t.Errorf("%s exited during the crawl: %v", proc.ID(), perr)
		}
	}
	return p
}

// hostRule is a rule for one host of the web (its name, no port: the politeness key).
func hostRule(host string, r policy.Rule) policy.Change {
	r.Scope = policy.Scope{Kind: policy.KindHost, Value: host}
	return policy.Change{Rule: r}
}

func ptr[T any](v T) *T { return &v }

func pdur(d time.Duration) *policy.Duration { return ptr(policy.Duration(d)) }

// of are the requests to one host (robots.txt included), in start order.
func of(reqs []synthweb.Request, host string) []synthweb.Request {
	var out []synthweb.Request
	for _, q := range reqs {
		if q.Host == host {
			out = append(out, q)
		}
	}
	return out
}

// pagesOf are the requests to one host other than robots.txt.
func pagesOf(reqs []synthweb.Request, host string) []synthweb.Request {
	return slices.DeleteFunc(of(reqs, host), func(q synthweb.Request) bool { return q.Path == "/robots.txt" })
}

// maxInFlight is the most requests to one host the server had in flight at once, and
// when: a request counts from its Start to its End. reqs are one host's, in start order.
func maxInFlight(reqs []synthweb.Request) (n int, at time.Time) {
	type edge struct {
		t     time.Time
		delta int
	}
	var edges []edge
	for _, q := range reqs {
		edges = append(edges, edge{q.Start, 1}, edge{q.End, -1})
	}
	// An end at the same instant as a start is counted first: the two were not in flight
	// together.
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(a.t.Compare(b.t), cmp.Compare(a.delta, b.delta)) })
	cur := 0
	for _, e := range edges {
		cur += e.delta
		if cur > n {
			n, at = cur, e.t
		}
	}
	return n, at
}

// policyStat sums one per-rule counter over the shards.
func policyStat(t *testing.T, rdb redis.UniversalClient, shards int, scope policy.Scope, counter string) int64 {
	t.Helper()
	var sum int64
	for s := range shards {
		v, err := rdb.HGet(testwait.Context(t), frontierkeys.ForShard(policyPrefix, s, shards).PolicyStats(), scope.String()+"\t"+counter).Int64()
		if err != nil && err != redis.Nil {
			t.Fatalf("policy stats of %s: %v", scope, err)
		}
		sum += v
	}
	return sum
}

// parkedEntries is how many queue entries of host the shards hold parked, and the reasons
// and rules given (Shard.Parked, frontierkeys.ParseParked).
func parkedEntries(t *testing.T, rdb redis.UniversalClient, shards int, host string) (int64, []string) {
	t.Helper()
	var n int64
	var reasons []string
	for s := range shards {
		ks := frontierkeys.ForShard(policyPrefix, s, shards)
		// Both read in one transaction: a resume or a park between two reads would show
		// the hash and the list disagreeing though each script keeps them in step.
		var hget *redis.StringCmd
		var llen *redis.IntCmd
		_, err := rdb.TxPipelined(testwait.Context(t), func(p redis.Pipeliner) error {
			hget, llen = p.HGet(testwait.Context(t), ks.Parked(), host), p.LLen(testwait.Context(t), ks.Park(host))
			return nil
		})
		v, herr := hget.Result()
		if herr == redis.Nil {
			continue
		}
		if err != nil {
			t.Fatalf("parked hosts: %v", err)
		}
		p, ok := frontierkeys.ParseParked(host, v)
		if !ok {
			t.Fatalf("%s of %s is %q: want \"<reason> <entries>[ <rule>]\"", ks.Parked(), host, v)
		}
		// The park list itself must hold what the hash says.
		if l, err := llen.Result(); err != nil || l != p.Entries {
			t.Errorf("shard %d: %s says %d entries of %s parked, its park list holds %d (%v)", s, ks.Parked(), p.Entries, host, l, err)
		}
		n += p.Entries
		reasons = append(reasons, strings.TrimSpace(p.Reason+" "+p.Rule))
	}
	return n, reasons
}

// writeSecrets writes each secret as a file of a new TRAWL_SECRETS_DIR.
func writeSecrets(t *testing.T, secrets map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range secrets {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// hostsOfKind are the web's hosts of one kind, in address order.
func hostsOfKind(web *synthweb.Web, k synthweb.HostKind) []synthweb.HostInfo {
	var out []synthweb.HostInfo
	for _, h := range web.Hosts() {
		if h.Kind == k {
			out = append(out, h)
		}
	}
	return out
}

func reqString(q synthweb.Request) string {
	return fmt.Sprintf("%s%s [%s .. %s]", q.Host, q.Path, q.Start.Format("15:04:05.000"), q.End.Format("15:04:05.000"))
}

// waitRequests waits until the web has served at least n requests to host.
func waitRequests(t *testing.T, web *synthweb.Web, host string, n int) {
	t.Helper()
	testwait.EventuallyState(t, time.Minute, fmt.Sprintf("%d requests to %s", n, host), func() (bool, string) {
		got := len(pagesOf(web.Requests(), host))
		return got >= n, fmt.Sprintf("%d so far", got)
	})
}

// problems collects a test's findings by kind and reports each kind once: how many, and
// the first few, so that a rule that failed on every request does not bury the rest.
type problems struct {
	order []string
	by    map[string][]string
}

func (p *problems) add(kind, format string, args ...any) {
	if p.by == nil {
		p.by = map[string][]string{}
	}
	if _, ok := p.by[kind]; !ok {
		p.order = append(p.order, kind)
	}
	p.by[kind] = append(p.by[kind], fmt.Sprintf(format, args...))
}

func (p *problems) report(t *testing.T) {
	t.Helper()
	const shown = 3
	for _, k := range p.order {
		all := p.by[k]
		more := ""
		if len(all) > shown {
			more = fmt.Sprintf("\n\t… and %d more", len(all)-shown)
		}
		t.Errorf("%s: %d times:\n\t%s%s", k, len(all), strings.Join(all[:min(shown, len(all))], "\n\t"), more)
	}
}
