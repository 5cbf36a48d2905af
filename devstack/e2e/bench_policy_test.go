package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
)

// benchRuleCount is how many live site policies BenchmarkPolicyRules loads.
const benchRuleCount = 10_000

// benchPolicyDelay is the politeness delay that paces BenchmarkPolicyRules' alternating
// rounds (TRAWL_BENCH_POLICY_ALTERNATE): 250 hosts at one request per 100 ms and response
// time give about 2,200 pages/s, half of what the 2-core machine gives an unpaced crawl.
const benchPolicyDelay = 100 * time.Millisecond

// benchSideDelay paces the two crawls BenchmarkPolicyRules runs side by side: about 900
// pages/s each, which together with their webs leave the 2-core machine some room, so
// that neither crawl waits for the CPU.
const benchSideDelay = 250 * time.Millisecond

// benchMatching is how many of the web's hosts a rule of the benchmark names: the others
// are for hosts, domains, URL prefixes and address blocks the crawl never meets.
const benchMatching = 100

// BenchmarkPolicyRules measures what live site policies cost a crawl: the plain web
// crawled with no rule and with 10,000 rules loaded (benchMatching of them for hosts of the
// web, setting limits equal to the process-wide ones, a header and the depth; the rest for
// hosts, domains, URL prefixes and address blocks it never meets). Reported: CPU-ms per
// page per process and pages/s of each (the median round's), and how far the rules move
// them, in percent: the median round, the pairs' median and mean with its 95% confidence
// interval, and every round pooled.
//
// A crawl's CPU per page on a shared machine moves from one minute to the next by as
// much as the rules cost. So each round runs its two crawls side by side: each on its own
// stack and web, seeded at the same moment (startLine), and paced by politeness
// (benchSideDelay per host) to a rate that leaves the two cores some room, so that both
// meet the same machine and neither waits for the CPU.
//
// TRAWL_BENCH_POLICY_ALTERNATE=1 runs the two crawls one after the other instead, in
// alternating rounds paced by benchPolicyDelay, which averages the machine's drift out
// only over many rounds; profiling (TRAWL_BENCH_PROFILE) implies it. With
// TRAWL_BENCH_POLICY_UNPACED=1 (alternating too) the pipeline takes the machine's two
// cores; any work added then slows the crawl, every stage batches less, and the CPU per
// page of every process rises, NATS's too, which the rules do not touch.
func BenchmarkPolicyRules(b *testing.B) {
	natsBin := buildNATS(b)
	if only := os.Getenv(envBenchOnly); only != "" && !strings.Contains("policy-rules", only) {
		b.Skipf("%s=%s", envBenchOnly, only)
	}
	// One pair's difference spreads by about ±2% side by side (±9% alternating) on a
	// 2-core machine: a verdict on a bound of 3% needs many rounds.
	rounds := benchRounds(b, 15)
	base := benchScenario{name: "side-by-side", hosts: 250, pages: 80, replicas: 1, minDelay: benchSideDelay}
	side := os.Getenv(envBenchAlternate) == "" && os.Getenv(envBenchUnpaced) == "" && os.Getenv(envBenchProfile) == ""
	switch {
	case os.Getenv(envBenchUnpaced) != "":
		base.name, base.minDelay = "plain", 0
	case !side:
		base.name, base.minDelay = "paced", benchPolicyDelay
	}
	withRules := base
	withRules.name, withRules.rules = fmt.Sprintf("%s/rules=%d", base.name, benchRuleCount), benchRuleCount
	for range b.N {
		var none, rules []benchResult
		for range rounds {
			if !side {
				none = append(none, runPipelineBench(b, base, natsBin))
				rules = append(rules, runPipelineBench(b, withRules, natsBin))
				continue
			}
			var n, r benchResult
			var wg sync.WaitGroup
			line := newStartLine(2)
			a, c := base, withRules
			a.together, c.together = line.lane(), line.lane()
			wg.Go(func() { n = runPipelineBench(b, a, natsBin) })
			wg.Go(func() { r = runPipelineBench(b, c, natsBin) })
			wg.Wait()
			if b.Failed() {
				b.FailNow()
			}
			none, rules = append(none, n), append(rules, r)
		}
		n, r := medianRound(none), medianRound(rules)
		n.report(b, none)
		r.report(b, rules)
		// Each round's crawl with rules against the crawl without them just before it,
		// and the median of those: the machine's drift over a run falls on both crawls of a
		// pair, where the two median rounds may come from different minutes.
		pairs := make([]float64, len(none))
		var each []string
		for i := range none {
			pairs[i] = 100 * (rules[i].totalCPU() - none[i].totalCPU()) / none[i].totalCPU()
			each = append(each, fmt.Sprintf("%+.1f%%", pairs[i]))
		}
		slices.Sort(pairs)
		paired := pairs[len(pairs)/2]
		if len(pairs)%2 == 0 {
			paired = (pairs[len(pairs)/2-1] + pairs[len(pairs)/2]) / 2
		}
		cpu := 100 * (r.totalCPU() - n.totalCPU()) / n.totalCPU()
		rate := 100 * (r.trawl.pagesPerSec() - n.trawl.pagesPerSec()) / n.trawl.pagesPerSec()
		b.ReportMetric(paired, "rules-cpu-paired-%")
		b.ReportMetric(cpu, "rules-cpu-%")
		b.ReportMetric(rate, "rules-pages/s-%")
		np, _ := n.perPage()
		rp, _ := r.perPage()
		var per []string
		for _, role := range benchRoles {
			per = append(per, fmt.Sprintf("%s %+.1f%%", role, 100*(rp[role]-np[role])/np[role]))
		}
		fmt.Printf("\n%d rules against none (median rounds): total CPU-ms/page %+.1f%% (%s), pages/s %+.1f%% (bound: under 3%%)\n",
			benchRuleCount, cpu, strings.Join(per, ", "), rate)
		fmt.Printf("%d rules against none, round by round: total CPU-ms/page %s; median %+.1f%% (bound: under 3%%)\n",
			benchRuleCount, strings.Join(each, ", "), paired)
		// On a shared 2-core machine one pair's difference spreads by ±10% about the
		// rules' cost, so a bound of a few percent needs many rounds and the pairs' mean
		// with its confidence interval; the pooled figures say where the CPU went.
		mean, half := meanCI(pairs)
		pool := func(rs []benchResult) map[string]float64 {
			out := map[string]float64{}
			var pages float64
			for _, r := range rs {
				pages += float64(r.trawl.pages)
				for id, d := range r.cpu {
					out[roleOf(id)] += float64(d) / float64(time.Millisecond)
					if id != "bench" {
						out["total"] += float64(d) / float64(time.Millisecond)
					}
				}
			}
			for k := range out {
				out[k] /= pages
			}
			return out
		}
		pn, pr := pool(none), pool(rules)
		per = per[:0]
		for _, role := range benchRoles {
			per = append(per, fmt.Sprintf("%s %+.1f%%", role, 100*(pr[role]-pn[role])/pn[role]))
		}
		pooled := 100 * (pr["total"] - pn["total"]) / pn["total"]
		b.ReportMetric(mean, "rules-cpu-mean-%")
		b.ReportMetric(mean+half, "rules-cpu-ci95-high-%")
		b.ReportMetric(pooled, "rules-cpu-pooled-%")
		fmt.Printf("%d rules against none, the pairs' mean: total CPU-ms/page %+.1f%% ± %.1f%% (95%% confidence, %d pairs); every round pooled: %+.1f%% (%s) (bound: under 3%%)\n",
			benchRuleCount, mean, half, len(pairs), pooled, strings.Join(per, ", "))
	}
}

// meanCI is the mean of xs and the half-width of its 95% confidence interval (Student's t,
// two-sided; the normal quantile beyond 30 samples).
func meanCI(xs []float64) (mean, half float64) {
	n := float64(len(xs))
	for _, x := range xs {
		mean += x
	}
	mean /= n
	if len(xs) < 2 {
		return mean, math.Inf(1)
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / (n - 1))
	t := 1.96
	if df := len(xs) - 1; df <= 30 {
		t = []float64{12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
			2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
			2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}[df-1]
	}
	return mean, t * sd / math.Sqrt(n)
}

// loadBenchRules applies n rules before the services start: benchMatching for hosts of the
// web, whose limits equal the process-wide ones of the benchmark so that only the rules'
// own cost shows, and the rest for hosts, domains, URL prefixes and address blocks the crawl
// never meets.
func loadBenchRules(ctx context.Context, rdb redis.UniversalClient, web *synthweb.Web, n int, minDelay time.Duration) error {
	hosts := web.Hosts()
	var cs []policy.Change
	for i := 0; len(cs) < n; i++ {
		var (
			r     policy.Rule
			scope string
		)
		switch {
		case i < benchMatching && i < len(hosts):
			scope = "host:" + hosts[i].Name
			r = policy.Rule{
				MinDelay:    ptr(policy.Duration(minDelay)),
				Connections: ptr(1),
				MaxDepth:    ptr(benchMaxDepth),
				Headers:     map[string]string{"X-Bench": "rules"},
			}
		case i%4 == 0:
			scope, r = fmt.Sprintf("host:www%d.unmet.example", i), policy.Rule{MinDelay: ptr(policy.Duration(2 * time.Second))}
		case i%4 == 1:
			scope, r = fmt.Sprintf("domain:unmet%d.example", i), policy.Rule{Connections: ptr(2)}
		case i%4 == 2:
			scope, r = fmt.Sprintf("http://unmet%d.example/private/", i), policy.Rule{Block: ptr(true)}
		default:
			scope, r = fmt.Sprintf("cidr:10.%d.%d.0/24", i/256%256, i%256), policy.Rule{MinDelay: ptr(policy.Duration(time.Second))}
		}
		sc, err := policy.ParseScope(scope)
		if err != nil {
			return fmt.Errorf("bench rule %d: %w", i, err)
		}
		r.Scope = sc
		cs = append(cs, policy.Change{Rule: r, Source: "bench"})
	}
	st := policy.NewStore(rdb, policyPrefix)
	// Applied in slices, as an operator's files would be, so that no one script runs long.
	for c := range slices.Chunk(cs, 1000) {
		if _, _, err := st.Apply(ctx, c, "bench", 0); err != nil {
			return fmt.Errorf("load %d bench rules: %w", n, err)
		}
	}
	set, err := st.Load(ctx)
	if err != nil {
		return err
	}
	if len(set.Rules()) != n {
		return fmt.Errorf("load bench rules: the store holds %d rules, want %d", len(set.Rules()), n)
	}
	return nil
}

// pauseQueued is how many URLs BenchmarkPolicyChangePause queues for the host its changes
// touch.
const pauseQueued = 100_000

// pauseBound is the longest the dispatch to other hosts may stall while a change touches
// the host with pauseQueued URLs: under the 2 s in which every process applies a change,
// and far above the crawl's own gaps between requests.
const pauseBound = time.Second

// BenchmarkPolicyChangePause measures how long rule changes that touch a host with 100,000
// queued URLs stall the dispatch to every other host. One host has pauseQueued URLs queued
// (a rule holds it to one request an hour, so they stay queued) while 20 others are crawled
// with no delay; then a block (parking all of them), its removal (resuming them) and an
// exclude matching them all (the scope recheck removing them) are applied in turn. From the
// web's own log: the longest interval between two request starts to the other hosts from
// each change to 3 s after it, beside the longest in the 3 s before the
// first change. Fails when a change stalls them longer than pauseBound.
func BenchmarkPolicyChangePause(b *testing.B) {
	if only := os.Getenv(envBenchOnly); only != "" && !strings.Contains("policy-change-pause", only) {
		b.Skipf("%s=%s", envBenchOnly, only)
	}
	natsBin := buildNATS(b)
	for range b.N {
		runChangePause(b, natsBin)
	}
}

func runChangePause(b *testing.B, natsBin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := synthweb.DefaultConfig()
	cfg.Special = false
	cfg.Hosts, cfg.PagesPerHost = 21, 2000
	web, err := synthweb.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer web.Close()
	big := web.Hosts()[0]
	bigScope := policy.Scope{Kind: policy.KindHost, Value: big.Name}
	hold := policy.Rule{Scope: bigScope, MinDelay: ptr(policy.Duration(time.Hour))}
	st, err := stack.Start(ctx, stack.Options{
		BinDir:  binDir,
		Dir:     b.TempDir(),
		NATSBin: natsBin,
		Env: map[string]string{
			"TRAWL_ALLOW_CIDRS":  "127.0.0.0/8",
			"TRAWL_MIN_DELAY":    "0",
			"TRAWL_DELAY_FACTOR": "0",
			"TRAWL_MAX_DEPTH":    strconv.Itoa(benchMaxDepth),
			"TRAWL_ROBOTS_AGENT": synthweb.ProductToken,
			"TRAWL_LOG_LEVEL":    "warn",
		},
		Prepare: func(ctx context.Context, rdb redis.UniversalClient) error {
			_, _, err := policy.NewStore(rdb, policyPrefix).Apply(ctx, []policy.Change{{Rule: hold}}, "bench", 0)
			return err
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.WithoutCancel(ctx))
	store := policy.NewStore(st.RedisClient(), policyPrefix)

	queued := make([]string, pauseQueued)
	for i := range queued {
		queued[i] = fmt.Sprintf("%s/q/%d", big.Origin, i)
	}
	if err := st.Seed(ctx, queued); err != nil {
		b.Fatal(err)
	}
	waitProgress(ctx, b, st, fmt.Sprintf("%d URLs of %s queued", pauseQueued, big.Name), func(p stack.Progress) bool {
		return p.Queued >= pauseQueued-2 && p.Backlog["dedup"] == 0 && p.Backlog["scheduler"] == 0
	})
	var seeds []string
	for _, h := range web.Hosts()[1:] {
		seeds = append(seeds, h.Origin+"/")
	}
	if err := st.Seed(ctx, seeds); err != nil {
		b.Fatal(err)
	}
	others := func() []synthweb.Request {
		return slices.DeleteFunc(web.Requests(), func(q synthweb.Request) bool { return q.Host == big.Name })
	}
	waitProgress(ctx, b, st, "the other hosts crawled steadily", func(stack.Progress) bool { return len(others()) >= 1000 })

	const window = 3 * time.Second
	baseFrom := time.Now()
	time.Sleep(window) // the baseline: what the crawl's own longest interval is, with no change
	changes := []struct {
		name string
		c    policy.Change
	}{
		{"block (parks them)", policy.Change{Rule: policy.Rule{Scope: bigScope, MinDelay: hold.MinDelay, Block: ptr(true)}}},
		{"unblock (resumes them)", policy.Change{Rule: hold}},
		{"exclude all (the recheck removes them)", policy.Change{Rule: policy.Rule{Scope: bigScope, MinDelay: hold.MinDelay, Exclude: []string{"/q/"}}}},
	}
	at := make([]time.Time, len(changes))
	took := make([]time.Duration, len(changes))
	for i, c := range changes {
		t0 := time.Now()
		if _, _, err := store.Apply(ctx, []policy.Change{c.c}, "bench", 0); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
		at[i], took[i] = time.Now(), time.Since(t0)
		time.Sleep(window) // each change's window, in which the dispatch is watched
	}
	reqs := others()
	longest := func(from, to time.Time) (time.Duration, time.Time) {
		var worst time.Duration
		var when time.Time
		var prev time.Time
		n := 0
		for _, q := range reqs {
			if q.Start.Before(from) || q.Start.After(to) {
				continue
			}
			n++
			if !prev.IsZero() && q.Start.Sub(prev) > worst {
				worst, when = q.Start.Sub(prev), prev
			}
			prev = q.Start
		}
		// The crawl of the others must go on through the window for its longest interval
		// to say anything.
		if n < 100 || to.Sub(prev) > pauseBound {
			b.Fatalf("%d requests to the other hosts from %s to %s, the last at %s: the dispatch stalled past the window's end, or their crawl ended (then a bigger web is needed)",
				n, from.Format("15:04:05.000"), to.Format("15:04:05.000"), prev.Format("15:04:05.000"))
		}
		return worst, when
	}
	base, _ := longest(baseFrom, baseFrom.Add(window))
	b.ReportMetric(float64(base)/float64(time.Millisecond), "baseline-max-gap-ms")
	fmt.Printf("\n%d URLs queued for %s; 20 other hosts crawled with no delay. Longest interval between request starts to the other hosts:\n  no change (3 s): %s\n",
		pauseQueued, big.Name, ms(base))
	var worst time.Duration
	for i, c := range changes {
		g, when := longest(at[i], at[i].Add(window))
		worst = max(worst, g)
		fmt.Printf("  %s: %s (from %s, %s after the apply returned; apply took %s)\n", c.name, ms(g), when.Format("15:04:05.000"), when.Sub(at[i]).Round(time.Millisecond), ms(took[i]))
	}
	b.ReportMetric(float64(worst)/float64(time.Millisecond), "change-max-gap-ms")
	left, err := st.RedisClient().LLen(ctx, frontierkeys.ForShard(policyPrefix, 0, 1).BackQueue(big.Name)).Result()
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("  after the exclude, %d URLs of %s queued\n", left, big.Name)
	if left > pauseQueued/100 {
		b.Errorf("after the exclude %d URLs of %s are still queued: the recheck did not remove them", left, big.Name)
	}
	if worst > pauseBound {
		b.Errorf("a change touching %d queued URLs stalled the dispatch to other hosts for %s, bound %s", pauseQueued, worst, pauseBound)
	}
}

// waitProgress polls the crawl's progress until cond holds, for at most 5 minutes.
func waitProgress(ctx context.Context, b *testing.B, st *stack.Stack, what string, cond func(stack.Progress) bool) {
	b.Helper()
	end := time.Now().Add(5 * time.Minute)
	for {
		p, err := st.Progress(ctx)
		if err == nil && cond(p) {
			return
		}
		if time.Now().After(end) {
			b.Fatalf("waited 5m for %s: %s (err %v)", what, p, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestMeanCI(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		xs         []float64
		mean, half float64
	}{
		{"one sample: no interval", []float64{2}, 2, math.Inf(1)},
		{"two samples, t of 1 degree of freedom", []float64{1, 3}, 2, 12.71 * math.Sqrt2 / math.Sqrt2},
		{"no spread", []float64{5, 5, 5, 5}, 5, 0},
		{"five samples", []float64{-1, 0, 1, 2, 3}, 1, 2.776 * math.Sqrt(2.5) / math.Sqrt(5)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mean, half := meanCI(tt.xs)
			if math.Abs(mean-tt.mean) > 1e-9 || (math.IsInf(tt.half, 1) != math.IsInf(half, 1)) || (!math.IsInf(tt.half, 1) && math.Abs(half-tt.half) > 1e-9) {
				t.Fatalf("meanCI(%v) = %v ± %v, want %v ± %v", tt.xs, mean, half, tt.mean, tt.half)
			}
		})
	}
}
