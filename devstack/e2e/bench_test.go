package e2e

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/robots"
)

// Environment knobs of BenchmarkPipeline, for measuring and profiling by hand:
//
//	TRAWL_BENCH_BIN      directory of service binaries to measure instead of the ones built
//	                     from this tree (e.g. those of another commit's worktree)
//	TRAWL_BENCH_PROFILE  directory: also take a CPU profile (TRAWL_BENCH_PROFILE_SECONDS,
//	                     default 20) and an allocation profile of every service and of NATS,
//	                     Redis's per-command times, and per-subject NATS traffic; the
//	                     binaries must serve TRAWL_PPROF. Profiling and the traffic tap cost
//	                     CPU, so CPU per page in such a run is not comparable.
//	TRAWL_BENCH_ONLY     run only the scenarios whose name contains this
//	TRAWL_BENCH_POLICY_ALTERNATE  BenchmarkPolicyRules' two crawls one after the other
//	                     instead of side by side
//	TRAWL_BENCH_POLICY_UNPACED  BenchmarkPolicyRules without its politeness delay
//	                     (alternating)
//	TRAWL_BENCH_ROUNDS   crawls per scenario (default 3, BenchmarkPolicyRules 15; 1 when
//	                     profiling unless set, each round's profiles then in a directory
//	                     round-N, so that `go tool pprof` can merge them: a few seconds'
//	                     profile holds too few samples to compare two crawls by): the
//	                     figures reported are the round with the median
//	                     CPU per page, beside the
//	                     range of every round, because on a shared 2-core machine one
//	                     crawl's CPU per page varies by ±10% from the next
const (
	envBenchBin       = "TRAWL_BENCH_BIN"
	envBenchProfile   = "TRAWL_BENCH_PROFILE"
	envBenchSeconds   = "TRAWL_BENCH_PROFILE_SECONDS"
	envBenchOnly      = "TRAWL_BENCH_ONLY"
	envBenchRounds    = "TRAWL_BENCH_ROUNDS"
	envBenchUnpaced   = "TRAWL_BENCH_POLICY_UNPACED"
	envBenchAlternate = "TRAWL_BENCH_POLICY_ALTERNATE"
)

// benchScenario is one crawl of BenchmarkPipeline.
type benchScenario struct {
	name     string
	hosts    int
	pages    int // per host
	replicas int // fetchers and parsers each
	// pinned runs the pipeline (services, NATS, Redis) on CPU 1 and the web on CPU 0, so
	// that the web's own cost does not compete with the crawler's.
	pinned bool
	refs   bool // also crawl the web with the reference crawlers (referenceCrawlers)
	// fsync is TRAWL_FSYNC for NATS and Redis; "" is the default users get
	// (durability.Default), which is what the scenarios measure unless they are about
	// another level.
	fsync durability.Level
	// rules, if set, is how many live site policies are loaded before the services start
	// (benchRules): what 10,000 rules cost the crawl.
	rules int
	// together, if set, is this crawl's place on the start line of crawls run at the same
	// time (BenchmarkPolicyRules side by side): it seeds when all are ready, and leaves
	// the benchmark's timer alone.
	together *startLane
	// minDelay is TRAWL_MIN_DELAY: 0 lets the crawl go as fast as the machine allows.
	minDelay time.Duration
}

// benchScenarios run at the shipped defaults but for what a scenario is about: a narrow
// web (few hosts, many pages each) and a wide one, each beside the reference crawlers; the
// other durability level beside them; the pipeline pinned away from the web.
var benchScenarios = []benchScenario{
	{name: "narrow", hosts: 250, pages: 80, replicas: 1, refs: true},
	{name: "wide", hosts: 2000, pages: 12, replicas: 1, refs: true},
	{name: "narrow/fsync=" + string(otherLevel()), hosts: 250, pages: 80, replicas: 1, refs: true, fsync: otherLevel()},
	{name: "wide/fsync=" + string(otherLevel()), hosts: 2000, pages: 12, replicas: 1, refs: true, fsync: otherLevel()},
	{name: "narrow-pinned/replicas=1", hosts: 250, pages: 80, replicas: 1, pinned: true},
	{name: "narrow-pinned/replicas=2", hosts: 250, pages: 80, replicas: 2, pinned: true},
}

// otherLevel is the durability level that is not the default, measured beside it.
func otherLevel() durability.Level {
	for _, l := range durability.Levels {
		if l != durability.Default {
			return l
		}
	}
	return durability.Default
}

// referenceCrawlers are the yardsticks BenchmarkPipeline runs on the same web as Trawl,
// judged from the same request log: the least a crawler must do (the bare loop) and the Go
// crawler users compare with (Colly).
var referenceCrawlers = []struct {
	name  string
	crawl func(ctx context.Context, seeds []string, maxDepth int) error
}{
	{"bare loop", bareCrawl},
	{"Colly", collyCrawl},
}

// BenchmarkPipeline measures whole-pipeline throughput and cost on a plain synthetic web
// with no politeness delay (one request per host at a time still holds): the four real
// services, NATS JetStream in a process of its own and redis-server, at the shipped
// defaults, crawl it from its home pages until idle. Against the same web it runs the
// reference crawlers: a bare in-process loop (net/http + the x/net/html tokenizer, 64
// workers) as the machine's ceiling, and Colly v2. Rates come from the web server's own
// request log, first request to last, and so do coverage and politeness violations (two
// requests to one host in flight at once); CPU time per page per process from
// /proc/<pid>/stat over the crawl.
func BenchmarkPipeline(b *testing.B) {
	natsBin := buildNATS(b)
	only := os.Getenv(envBenchOnly)
	rounds := benchRounds(b, 3)
	for _, sc := range benchScenarios {
		if only != "" && !strings.Contains(sc.name, only) {
			continue
		}
		b.Run(sc.name, func(b *testing.B) {
			for range b.N {
				rs := make([]benchResult, 0, rounds)
				for range rounds {
					rs = append(rs, runPipelineBench(b, sc, natsBin))
				}
				medianRound(rs).report(b, rs)
			}
		})
	}
}

// benchRounds reads TRAWL_BENCH_ROUNDS; a profiled run is one round unless it is set.
func benchRounds(b *testing.B, def int) int {
	b.Helper()
	v := os.Getenv(envBenchRounds)
	if v == "" {
		if os.Getenv(envBenchProfile) != "" {
			return 1
		}
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		b.Fatalf("%s=%q: want a whole number of rounds, 1 to 100", envBenchRounds, v)
	}
	return n
}

// medianRound is the round with the median total CPU per page (the lower middle one of an
// even count).
func medianRound(rs []benchResult) benchResult {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b benchResult) int { return cmp.Compare(a.totalCPU(), b.totalCPU()) })
	return s[(len(s)-1)/2]
}

func buildNATS(b testing.TB) string {
	b.Helper()
	root, err := stack.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./devstack/cmd/trawl-nats")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build trawl-nats: %v\n%s", err, out)
	}
	return filepath.Join(dir, "trawl-nats")
}

// benchResult is one scenario's figures.
type benchResult struct {
	scenario     benchScenario
	load         string // load averages when the crawl started
	want         int    // pages a correct crawl fetches
	trawl        crawlRate
	refs         []refResult
	cpu          map[string]time.Duration
	backlog      map[string]uint64 // largest backlog seen per stage
	connects     int64             // TCP connections opened on the machine during the crawl
	trafficNotes string
}

// refResult is one reference crawler's crawl of the scenario's web.
type refResult struct {
	name string
	rate crawlRate
	cpu  time.Duration // the bench process (web + crawler) over the crawl
}

// crawlRate is what the web server's log says of one crawl.
type crawlRate struct {
	pages      int // requests other than robots.txt
	requests   int
	violations int           // requests that overlapped another to the same host
	span       time.Duration // first request's start to last request's end
	// Median and 90th percentile of the gap between the end of one request to a host and
	// the start of the next: with no politeness delay, the time a host's next URL takes to
	// come round the crawler, which bounds pages/s at active hosts / gap.
	gapP50, gapP90 time.Duration
}

func (c crawlRate) pagesPerSec() float64 {
	if c.span <= 0 {
		return 0
	}
	return float64(c.pages) / c.span.Seconds()
}

func rateOf(reqs []synthweb.Request) crawlRate {
	var c crawlRate
	if len(reqs) == 0 {
		return c
	}
	for _, r := range reqs {
		c.requests++
		if r.Path != "/robots.txt" {
			c.pages++
		}
	}
	c.span = synthweb.Span(reqs)
	c.violations = len(synthweb.Overlaps(reqs))
	// Requests are ordered by start, so each host's are too.
	lastEnd := map[string]time.Time{}
	var gaps []time.Duration
	for _, r := range reqs {
		if e, ok := lastEnd[r.Host]; ok {
			gaps = append(gaps, r.Start.Sub(e))
		}
		lastEnd[r.Host] = r.End
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		c.gapP50, c.gapP90 = gaps[len(gaps)/2], gaps[len(gaps)*9/10]
	}
	return c
}

const benchMaxDepth = 20

func benchWeb(ctx context.Context, b *testing.B, sc benchScenario) (*synthweb.Web, int) {
	b.Helper()
	cfg := synthweb.DefaultConfig()
	cfg.Special = false
	cfg.Hosts = sc.hosts
	cfg.PagesPerHost = sc.pages
	web, err := synthweb.Start(ctx, cfg)
	if err != nil {
		b.Fatalf("start synthetic web: %v", err)
	}
	return web, len(web.Expected(benchMaxDepth).Fetch)
}

func runPipelineBench(b *testing.B, sc benchScenario, natsBin string) benchResult {
	timer := func(on bool) {
		switch {
		case sc.together != nil:
		case on:
			b.StartTimer()
		default:
			b.StopTimer()
		}
	}
	timer(false)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	res := benchResult{scenario: sc}
	// A crawl that fails before its start line still lets the others go.
	defer sc.together.leave()

	bins := binDir
	if d := os.Getenv(envBenchBin); d != "" {
		bins = d
	}
	profDir := os.Getenv(envBenchProfile)
	if profDir != "" {
		profRounds[sc.name]++
		profDir = filepath.Join(profDir, sanitize(sc.name))
		if os.Getenv(envBenchRounds) != "" {
			profDir = filepath.Join(profDir, fmt.Sprintf("round-%d", profRounds[sc.name]))
		}
	}
	var cpus []int
	if sc.pinned {
		if runtime.NumCPU() < 2 {
			b.Logf("%s: one CPU only, so the web cannot have its own; running unpinned", sc.name)
		} else {
			// The bench process serves the web; CPU 0 is its budget, the rest the pipeline's.
			if err := stack.Pin(os.Getpid(), []int{0}); err != nil {
				b.Fatal(err)
			}
			all := make([]int, runtime.NumCPU())
			for i := range all {
				all[i] = i
			}
			defer stack.Pin(os.Getpid(), all)
			cpus = all[1:]
		}
	}

	web, want := benchWeb(ctx, b, sc)
	defer web.Close()
	env := map[string]string{
		"TRAWL_ALLOW_CIDRS":  "127.0.0.0/8",
		"TRAWL_MIN_DELAY":    sc.minDelay.String(),
		"TRAWL_DELAY_FACTOR": "0",
		"TRAWL_MAX_DEPTH":    strconv.Itoa(benchMaxDepth),
		"TRAWL_ROBOTS_AGENT": synthweb.ProductToken,
		"TRAWL_LOG_LEVEL":    "warn",
	}
	var natsArgs []string
	natsPprof := ""
	if profDir != "" {
		env["TRAWL_PPROF"] = "true"
		a, err := freeTCPAddr()
		if err != nil {
			b.Fatal(err)
		}
		natsPprof = a
		natsArgs = []string{"-pprof", a}
	}
	var prepare func(context.Context, redis.UniversalClient) error
	if sc.rules > 0 {
		prepare = func(ctx context.Context, rdb redis.UniversalClient) error {
			return loadBenchRules(ctx, rdb, web, sc.rules, sc.minDelay)
		}
	}
	st, err := stack.Start(ctx, stack.Options{
		Prepare:    prepare,
		BinDir:     bins,
		Dir:        b.TempDir(),
		Replicas:   map[string]int{"fetcher": sc.replicas, "parser": sc.replicas},
		Env:        env,
		NATSBin:    natsBin,
		NATSArgs:   natsArgs,
		CPUs:       cpus,
		Durability: sc.fsync,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.WithoutCancel(ctx))
	pids, err := st.PIDs()
	if err != nil {
		b.Fatal(err)
	}
	pids["bench"] = os.Getpid()

	var tap *trafficTap
	var profWait func()
	var seqs0 map[string]uint64
	if profDir != "" {
		if tap, err = startTap(st); err != nil {
			b.Fatal(err)
		}
		defer tap.stop()
		p0, err := st.Progress(ctx)
		if err != nil {
			b.Fatal(err)
		}
		seqs0 = p0.Seqs
		if err := st.RedisClient().ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		profWait = startProfiles(ctx, b, st, natsPprof, profDir)
	}

	if err := sc.together.ready(ctx); err != nil {
		b.Fatalf("%s: %v", sc.name, err)
	}
	res.load = stack.LoadAverage()
	opens0 := tcpActiveOpens()
	cpu0 := cpuTimes(b, pids)
	timer(true)
	if err := st.Seed(ctx, web.Seeds()); err != nil {
		b.Fatal(err)
	}
	// The largest backlog each stage had: a stage that falls behind holds the URLs that
	// would keep hosts busy.
	res.backlog = map[string]uint64{}
	p, err := st.WaitIdle(ctx, 200*time.Millisecond, func(p stack.Progress) {
		for k, n := range p.Backlog {
			res.backlog[k] = max(res.backlog[k], n)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	timer(false)
	cpu1 := cpuTimes(b, pids)
	res.connects = tcpActiveOpens() - opens0
	res.cpu = map[string]time.Duration{}
	for id, t := range cpu1 {
		res.cpu[id] = t - cpu0[id]
	}
	res.trawl = rateOf(web.Requests())
	res.want = want
	if res.trawl.pages < want {
		b.Fatalf("%s: Trawl fetched %d pages of %d (%d in the frontier's count)", sc.name, res.trawl.pages, want, p.Fetched)
	}
	if profDir != "" {
		profWait()
		res.trafficNotes = trafficReport(ctx, b, st, tap, seqs0, web, res.trawl.pages, profDir)
	}
	if err := st.Close(ctx); err != nil {
		b.Logf("stack close: %v", err)
	}
	web.Close()

	if sc.refs {
		for _, rc := range referenceCrawlers {
			web, want := benchWeb(ctx, b, sc)
			self0, err := stack.CPUTime(os.Getpid())
			if err != nil {
				b.Fatal(err)
			}
			if err := rc.crawl(ctx, web.Seeds(), benchMaxDepth); err != nil {
				b.Fatalf("%s: %s: %v", sc.name, rc.name, err)
			}
			self1, _ := stack.CPUTime(os.Getpid())
			r := refResult{name: rc.name, rate: rateOf(web.Requests()), cpu: self1 - self0}
			web.Close()
			if r.rate.pages < want {
				b.Fatalf("%s: %s fetched %d pages of %d", sc.name, rc.name, r.rate.pages, want)
			}
			res.refs = append(res.refs, r)
		}
	}
	return res
}

// profRounds counts each scenario's profiled rounds, which name their directories.
var profRounds = map[string]int{}

func freeTCPAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func sanitize(name string) string { return strings.NewReplacer("/", "_", "=", "").Replace(name) }

func cpuTimes(b *testing.B, pids map[string]int) map[string]time.Duration {
	b.Helper()
	m := make(map[string]time.Duration, len(pids))
	for id, pid := range pids {
		t, err := stack.CPUTime(pid)
		if err != nil {
			b.Fatalf("cpu time of %s: %v", id, err)
		}
		m[id] = t
	}
	return m
}

// benchRoles are the table's columns: every replica of a service sums into its role.
var benchRoles = []string{"scheduler", "fetcher", "parser", "dedup", "nats", "redis"}

func roleOf(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

// perPage is CPU-ms per page by role (the bench process as "bench") and their total over
// the pipeline's processes.
func (r benchResult) perPage() (map[string]float64, float64) {
	pages := float64(r.trawl.pages)
	perPage := map[string]float64{}
	var total float64
	for id, d := range r.cpu {
		ms := float64(d) / float64(time.Millisecond) / pages
		perPage[roleOf(id)] += ms
		if id != "bench" {
			total += ms
		}
	}
	return perPage, total
}

func (r benchResult) totalCPU() float64 {
	_, t := r.perPage()
	return t
}

// report prints and reports r, the median of rounds.
func (r benchResult) report(b *testing.B, rounds []benchResult) {
	perPage, total := r.perPage()
	trawl := r.trawl.pagesPerSec()
	b.ReportMetric(trawl, "pages/s")
	b.ReportMetric(float64(r.trawl.gapP50)/float64(time.Millisecond), "host-gap-p50-ms")
	b.ReportMetric(total, "cpu-ms/page")
	for _, role := range benchRoles {
		b.ReportMetric(perPage[role], role+"-cpu-ms/page")
	}
	b.ReportMetric(float64(r.trawl.violations), "violations")
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	level := r.scenario.fsync
	if level == "" {
		level = durability.Default
	}
	fmt.Fprintf(&sb, "\n%s: %d hosts × %d pages, %d fetcher(s) + %d parser(s), TRAWL_FSYNC=%s%s; load avg at start %s\n",
		r.scenario.name, r.scenario.hosts, r.scenario.pages, r.scenario.replicas, r.scenario.replicas, level,
		map[bool]string{true: ", pipeline pinned to CPUs 1.., web to CPU 0", false: ""}[r.scenario.pinned], r.load)
	fmt.Fprintf(tw, "crawler\tpages\tcoverage\tviolations\trequests\tseconds\tpages/s\tTrawl ×\tCPU-ms/page\thost gap p50\tp90\t\n")
	row := func(name string, c crawlRate, cpu float64, cpuNote string) {
		ratio := "-"
		if c.pagesPerSec() > 0 && name != "Trawl" {
			ratio = fmt.Sprintf("%.2f", trawl/c.pagesPerSec())
		}
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%d\t%d\t%.2f\t%.0f\t%s\t%.3f%s\t%s\t%s\t\n", name, c.pages, float64(c.pages)/float64(max(r.want, 1)),
			c.violations, c.requests, c.span.Seconds(), c.pagesPerSec(), ratio, cpu, cpuNote, ms(c.gapP50), ms(c.gapP90))
	}
	row("Trawl", r.trawl, total, "")
	for _, ref := range r.refs {
		row(ref.name, ref.rate, float64(ref.cpu)/float64(time.Millisecond)/float64(max(ref.rate.pages, 1)), " (incl. web)")
		metric := strings.ToLower(strings.ReplaceAll(ref.name, " ", "-"))
		b.ReportMetric(ref.rate.pagesPerSec(), metric+"-pages/s")
		if ref.rate.pagesPerSec() > 0 {
			b.ReportMetric(trawl/ref.rate.pagesPerSec(), "trawl/"+metric)
		}
	}
	tw.Flush()
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "CPU-ms/page\t")
	for _, role := range benchRoles {
		fmt.Fprintf(tw, "%s\t", role)
	}
	fmt.Fprintf(tw, "total\tweb+bench\t\n\t")
	for _, role := range benchRoles {
		fmt.Fprintf(tw, "%.3f\t", perPage[role])
	}
	fmt.Fprintf(tw, "%.3f\t%.3f\t\n", total, perPage["bench"])
	tw.Flush()
	if len(rounds) > 1 {
		cpus := make([]float64, len(rounds))
		rates := make([]float64, len(rounds))
		for i, x := range rounds {
			cpus[i], rates[i] = x.totalCPU(), x.trawl.pagesPerSec()
		}
		fmt.Fprintf(&sb, "%d rounds, the median's figures above: total CPU-ms/page %s, pages/s %s\n",
			len(rounds), spread(cpus, "%.3f"), spread(rates, "%.0f"))
	}
	// Machine-wide, so other processes' connections count too; the crawler's dials
	// dominate when keep-alive fails.
	fmt.Fprintf(&sb, "TCP connections opened during the crawl (machine-wide): %d, %.2f per request\n",
		r.connects, float64(r.connects)/float64(max(r.trawl.requests, 1)))
	sb.WriteString("largest backlog (messages):")
	for _, k := range []string{"dedup", "scheduler", "fetch", "outcomes", "parser"} {
		fmt.Fprintf(&sb, " %s=%d", k, r.backlog[k])
	}
	sb.WriteString("\n")
	sb.WriteString(r.trafficNotes)
	fmt.Print(sb.String())
}

// spread formats the values of the rounds in the order they ran, and their range.
func spread(v []float64, format string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf(format, x)
	}
	return fmt.Sprintf("%s (range "+format+"–"+format+")", strings.Join(parts, ", "), slices.Min(v), slices.Max(v))
}

// bareCrawl is the reference: the least a crawler must do on this web, in one process
// with no durability. One request per host at a time, robots.txt read once per host
// before its pages and obeyed, an in-memory seen set, breadth of 64 workers.
func bareCrawl(ctx context.Context, seeds []string, maxDepth int) error {
	c := &bareCrawler{
		client: &http.Client{
			Timeout:       10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Transport: &http.Transport{
				MaxIdleConns:        0, // no overall cap: one kept-alive connection per host
				MaxIdleConnsPerHost: 1,
				IdleConnTimeout:     30 * time.Second,
			},
		},
		hosts: map[string]*bareHost{},
		seen:  map[string]struct{}{},
	}
	c.cond = sync.NewCond(&c.mu)
	c.mu.Lock()
	for _, s := range seeds {
		c.addLocked(s, 0)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.work(ctx, maxDepth); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

type bareCrawler struct {
	client *http.Client
	mu     sync.Mutex
	cond   *sync.Cond
	hosts  map[string]*bareHost
	ready  []*bareHost // hosts with queued work and no request out
	busy   int         // hosts with a request out
	seen   map[string]struct{}
}

type bareHost struct {
	origin     string
	queue      []bareItem
	busy       bool
	robotsRead bool
	rules      *robots.Rules
}

type bareItem struct {
	url   string
	depth int
}

// addLocked queues a URL not seen before on its host.
func (c *bareCrawler) addLocked(raw string, depth int) {
	if _, ok := c.seen[raw]; ok {
		return
	}
	c.seen[raw] = struct{}{}
	// scheme://host:port is everything before the third slash.
	origin := raw
	if i := strings.Index(raw, "://"); i >= 0 {
		if j := strings.IndexByte(raw[i+3:], '/'); j >= 0 {
			origin = raw[:i+3+j]
		}
	}
	h := c.hosts[origin]
	if h == nil {
		h = &bareHost{origin: origin}
		c.hosts[origin] = h
	}
	h.queue = append(h.queue, bareItem{raw, depth})
	if !h.busy && len(h.queue) == 1 {
		c.ready = append(c.ready, h)
		c.cond.Signal()
	}
}

func (c *bareCrawler) work(ctx context.Context, maxDepth int) error {
	for {
		c.mu.Lock()
		for len(c.ready) == 0 && c.busy > 0 {
			c.cond.Wait()
		}
		if len(c.ready) == 0 {
			c.mu.Unlock()
			return nil
		}
		h := c.ready[0]
		c.ready = c.ready[1:]
		h.busy = true
		c.busy++
		readRobots := !h.robotsRead
		var it bareItem
		if !readRobots {
			it = h.queue[0]
			h.queue = h.queue[1:]
		}
		c.mu.Unlock()

		var links []string
		var rules *robots.Rules
		var err error
		switch {
		case readRobots:
			rules = robots.AllowAll()
			err = c.get(ctx, h.origin+"/robots.txt", func(r io.Reader, resp *http.Response) {
				body, _ := io.ReadAll(io.LimitReader(r, 500<<10))
				rules = robots.ForResponse(resp.StatusCode, body, 500<<10)
			})
		case h.rules.Allowed(synthweb.ProductToken, it.url[len(h.origin):]):
			links, err = c.page(ctx, it.url, it.depth < maxDepth)
		}
		if err != nil && ctx.Err() != nil {
			return err
		}

		c.mu.Lock()
		if readRobots {
			h.robotsRead, h.rules = true, rules
		}
		for _, l := range links {
			c.addLocked(l, it.depth+1)
		}
		h.busy = false
		c.busy--
		if len(h.queue) > 0 {
			c.ready = append(c.ready, h)
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

func (c *bareCrawler) get(ctx context.Context, u string, body func(io.Reader, *http.Response)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if body != nil {
		body(resp.Body, resp)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// page fetches an HTML page and, when follow, returns its followable links resolved
// and without fragments.
func (c *bareCrawler) page(ctx context.Context, u string, follow bool) ([]string, error) {
	var links []string
	err := c.get(ctx, u, func(r io.Reader, resp *http.Response) {
		if !follow || resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "html") {
			return
		}
		links = extractLinks(r, resp.Request.URL)
	})
	return links, err
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// tcpActiveOpens is the kernel's count of TCP connect()s so far (/proc/net/snmp), or 0.
func tcpActiveOpens() int64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Tcp: ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "ActiveOpens" && i < len(f) {
				v, _ := strconv.ParseInt(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}
