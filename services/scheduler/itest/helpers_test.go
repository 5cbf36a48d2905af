package itest

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/testwait"
)

// t0 is a fixed clock origin: tests of the frontier's rules drive its clock step by step
// (frontier.Options.Clock) instead of waiting on the Redis server's.
var t0 = time.UnixMilli(1_700_000_000_000)

func at(d time.Duration) time.Time { return t0.Add(d) }

func startRedis(t testing.TB) *redis.Client {
	t.Helper()
	srv := redisproc.StartT(t, redisproc.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// testOptions are the defaults under a test key prefix.
func testOptions(shard int) frontier.Options {
	o := frontier.DefaultOptions(shard)
	o.KeyPrefix = "t"
	return o
}

// tf is a frontier under test with the client it runs on. Its helpers fail the test on
// error and check the invariants after every mutating step.
type tf struct {
	*frontier.Frontier
	rdb *redis.Client
	t   testing.TB
	// now is the frontier's clock: the time of the step being run.
	now *time.Time
	// policed: live policies were applied at some point (connections may have been
	// lowered or removed with tasks out).
	policed bool
}

func newTF(t testing.TB, rdb *redis.Client, o frontier.Options) *tf {
	t.Helper()
	return newTFWith(t, rdb, o, prioritize.BreadthFirst{})
}

func newTFWith(t testing.TB, rdb *redis.Client, o frontier.Options, p frontier.Prioritizer) *tf {
	t.Helper()
	now := t0
	o.Clock = func() time.Time { return now }
	return &tf{Frontier: frontier.New(rdb, o, p), rdb: rdb, t: t, now: &now}
}

// addBatch adds one batch with a source page and returns its queued count.
func (f *tf) addBatch(b frontier.Batch) int {
	f.t.Helper()
	got, err := f.AddBatches(testwait.Context(f.t), []frontier.Batch{b})
	if err != nil {
		f.t.Fatalf("AddBatches: %v", err)
	}
	f.check()
	return got[0]
}

// pttl is the remaining time to live of a key: -1 persistent, -2 missing.
func (f *tf) pttl(key string) time.Duration {
	f.t.Helper()
	d, err := f.rdb.PTTL(testwait.Context(f.t), key).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

func urls(depth int, us ...string) []crawlmsg.Discovered {
	out := make([]crawlmsg.Discovered, len(us))
	for i, u := range us {
		out[i] = crawlmsg.Discovered{URL: u, Depth: depth}
	}
	return out
}

func (f *tf) add(id string, us ...crawlmsg.Discovered) int {
	f.t.Helper()
	got, err := f.AddBatches(testwait.Context(f.t), []frontier.Batch{{ID: id, URLs: us}})
	if err != nil {
		f.t.Fatalf("AddBatches: %v", err)
	}
	f.check()
	return got[0]
}

func (f *tf) dispatch(now time.Time, max int) []crawlmsg.FetchTask {
	f.t.Helper()
	*f.now = now
	tasks, err := f.Dispatch(testwait.Context(f.t), max)
	if err != nil {
		f.t.Fatalf("Dispatch: %v", err)
	}
	f.check()
	return tasks
}

func (f *tf) complete(now time.Time, outs ...crawlmsg.Outcome) []frontier.Applied {
	f.t.Helper()
	*f.now = now
	got, err := f.Complete(testwait.Context(f.t), outs)
	if err != nil {
		f.t.Fatalf("Complete: %v", err)
	}
	f.check()
	return got
}

func (f *tf) reap(now time.Time) int {
	f.t.Helper()
	*f.now = now
	n, err := f.Reap(testwait.Context(f.t), now)
	if err != nil {
		f.t.Fatalf("Reap: %v", err)
	}
	f.check()
	return n
}

func (f *tf) stats() frontierkeys.ShardStatus {
	f.t.Helper()
	s, err := f.Stats(testwait.Context(f.t))
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// heapScore returns the host's next fetch time in the heap.
func (f *tf) heapScore(host string) (time.Time, bool) {
	f.t.Helper()
	s, err := f.rdb.ZScore(testwait.Context(f.t), f.Keyspace().Key("heap"), host).Result()
	if err == redis.Nil {
		return time.Time{}, false
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return time.UnixMilli(int64(s)), true
}

func (f *tf) backQueue(host string) []string {
	f.t.Helper()
	l, err := f.rdb.LRange(testwait.Context(f.t), f.Keyspace().Key("bq", host), 0, -1).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

func (f *tf) hostField(host, field string) string {
	f.t.Helper()
	return f.rdb.HGet(testwait.Context(f.t), f.Keyspace().Key("host", host), field).Val()
}

func (f *tf) wantHeap(host string, want time.Time) {
	f.t.Helper()
	got, ok := f.heapScore(host)
	if !ok {
		f.t.Fatalf("host %s not in heap, want score %s", host, want.Sub(t0))
	}
	if !got.Equal(want) {
		f.t.Fatalf("host %s heap score t0+%s, want t0+%s", host, got.Sub(t0), want.Sub(t0))
	}
}

// check reads the shard's whole state and checks what every script must preserve:
//   - accepted = queued + in flight + parked + Σ terminal
//   - the parked counter equals the entries in park lists, and parked names each list
//     with its length
//   - the queued counter equals the entries actually in front and back queues
//   - an active host is either in the heap or in flight, never both; at most B are active
//   - a host in the heap has a non-empty back queue; a back queue belongs to an active host
//   - every in-flight host has exactly one lease
func (f *tf) check() {
	t := f.t
	t.Helper()
	ctx := testwait.Context(t)
	rdb := f.rdb
	s := f.stats()
	if s.Accepted != s.Queued+s.InFlight+s.Parked+s.Terminal() {
		t.Fatalf("accounting broken: accepted %d != queued %d + inflight %d + parked %d + terminal %d (%+v)",
			s.Accepted, s.Queued, s.InFlight, s.Parked, s.Terminal(), s)
	}
	ks := f.Keyspace()
	var inPark int64
	parked := rdb.HGetAll(ctx, ks.Key("parked")).Val()
	piter := rdb.Scan(ctx, 0, ks.Key("park", "*"), 1000).Iterator()
	nLists := 0
	for piter.Next(ctx) {
		k := piter.Val()
		h := strings.TrimPrefix(k, ks.Key("park", ""))
		n := rdb.LLen(ctx, k).Val()
		inPark += n
		nLists++
		if p, ok := frontierkeys.ParseParked(h, parked[h]); !ok || p.Entries != n || p.Reason != frontierkeys.ParkBlocked {
			t.Fatalf("park list of %s holds %d, parked says %q", h, n, parked[h])
		}
	}
	if err := piter.Err(); err != nil {
		t.Fatal(err)
	}
	if inPark != s.Parked || nLists != len(parked) {
		t.Fatalf("parked counter %d but %d entries in %d park lists (parked: %v)", s.Parked, inPark, nLists, parked)
	}
	var inQueues int64
	for _, n := range s.Front {
		inQueues += n
	}
	bqLen := map[string]int64{}
	iter := rdb.Scan(ctx, 0, ks.Key("bq", "*"), 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		n := rdb.LLen(ctx, k).Val()
		bqLen[strings.TrimPrefix(k, ks.Key("bq", ""))] = n
		inQueues += n
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if inQueues != s.Queued {
		t.Fatalf("queued counter %d but %d entries in queues", s.Queued, inQueues)
	}
	hosts := frontierkeys.ActiveHosts(rdb.HKeys(ctx, ks.Key("hosts")).Val())
	heap := set(rdb.ZRange(ctx, ks.Key("heap"), 0, -1).Val())
	slots := rdb.ZRange(ctx, ks.Key("inflight"), 0, -1).Val()
	inflight := map[string]bool{}
	out := map[string]int{}
	for _, sl := range slots {
		inflight[frontierkeys.SlotHost(sl)] = true
		out[frontierkeys.SlotHost(sl)]++
	}
	conns := f.connections(ctx)
	policies := rdb.Exists(ctx, ks.Key("policy")).Val() == 1
	if len(hosts) > f.Options().BackQueues {
		t.Fatalf("%d active hosts > B=%d", len(hosts), f.Options().BackQueues)
	}
	active := set(hosts)
	resolving := set(rdb.HKeys(ctx, ks.Key("resolve")).Val())
	for _, h := range hosts {
		// With several connections a host with a slot free may be in both; so may one
		// whose connections a change lowered, or whose rules were removed, with its tasks
		// out: the dispatch then waits for them (it reads the first lease slot of every
		// due host, and the others while any host has a task out beyond its first).
		both := heap[h] && inflight[h] && (out[h] < conns(h) || policies || f.policed)
		// A host whose limits are stale waits for Go to resolve them, out of the heap.
		waiting := !heap[h] && !inflight[h] && resolving[h]
		if heap[h] == inflight[h] && !both && !waiting {
			t.Fatalf("active host %s: in heap %v, in flight %v (%d of %d connections out)", h, heap[h], inflight[h], out[h], conns(h))
		}
		if heap[h] && bqLen[h] == 0 {
			t.Fatalf("host %s is in the heap with an empty back queue", h)
		}
	}
	for h := range heap {
		if !active[h] {
			t.Fatalf("host %s in heap but not active", h)
		}
	}
	for h := range bqLen {
		if !active[h] {
			t.Fatalf("host %s has a back queue but is not active", h)
		}
	}
	leases := rdb.HKeys(ctx, ks.Key("lease")).Val()
	if int64(len(leases)) != s.InFlight || len(leases) != len(slots) {
		t.Fatalf("%d leases, %d in flight", len(leases), s.InFlight)
	}
	inSlots := set(slots)
	for _, sl := range leases {
		if !inSlots[sl] {
			t.Fatalf("lease slot %q without in-flight entry", sl)
		}
	}
}

// connections returns a host's connections as its stored limits set them (1 when no rule
// does or they are not of the shard's generation).
func (f *tf) connections(ctx context.Context) func(string) int {
	gen := f.rdb.HGet(ctx, f.Keyspace().Key("policy"), frontierkeys.PolicyGenField).Val()
	return func(h string) int {
		g, v, ok := frontierkeys.ParseHostLim(f.hostField(h, frontierkeys.HostLim))
		e, err := frontierkeys.ParsePolicyEntry(v)
		if !ok || g != gen || err != nil || e.Limits.Connections == nil {
			return 1
		}
		return *e.Limits.Connections
	}
}

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func outcome(task crawlmsg.FetchTask, kind crawlmsg.OutcomeKind, status int) crawlmsg.Outcome {
	requested := kind != crawlmsg.OutcomeExpired && kind != crawlmsg.OutcomeDisallowed && kind != crawlmsg.OutcomeBlocked && kind != crawlmsg.OutcomeDeferred
	return crawlmsg.Outcome{V: 1, Shard: task.Shard, Host: task.Host, URL: task.URL, Lease: task.Lease,
		Attempt: task.Attempt, Kind: kind, Status: status, Requested: requested}
}

func ok200(task crawlmsg.FetchTask) crawlmsg.Outcome {
	return outcome(task, crawlmsg.OutcomeFetched, 200)
}

func hostsOf(tasks []crawlmsg.FetchTask) []string {
	var hs []string
	for _, tk := range tasks {
		hs = append(hs, tk.Host)
	}
	sort.Strings(hs)
	return hs
}

func manyHosts(n int) []string {
	hs := make([]string, n)
	for i := range hs {
		hs[i] = "h" + strconv.Itoa(i) + ".example"
	}
	return hs
}
