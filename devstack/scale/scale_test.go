//go:build scale

package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/rediscluster"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/bloomhash"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/seed"
	"github.com/trawl/trawl/shared/topology"
)

// Settings of the run, from the environment (make bench-scale passes them through).
const (
	// envSizes lists the sizes in URLs, comma-separated, e.g. "1e5,1e6"; hosts are a
	// hundredth of the URLs.
	envSizes = "SCALE_SIZES"
	// envJSON is the file the results are written to.
	envJSON = "SCALE_JSON"
	// envBin is a directory with the service binaries already built (make build's bin/).
	envBin = "SCALE_BIN"
	// envDrainFor bounds the dispatch phase of one size (a Go duration).
	envDrainFor = "SCALE_DRAIN_FOR"
	// envRounds is how many times the smallest size runs: its dispatch rate, the check's
	// reference, is the median of its rounds (one round lasts seconds, so one busy moment
	// of a shared machine moves it).
	envRounds = "SCALE_ROUNDS"
	// envProfile keeps each service's heap profile at each snapshot in this directory.
	envProfile = "SCALE_PROFILE"
	// envCluster runs Redis as a Redis Cluster of this many masters (no replicas, AOF on),
	// the frontier in shardsPerMaster shards a master and the seen filter in as many parts,
	// instead of one redis-server; the Redis restart is then not measured.
	envCluster = "SCALE_REDIS_CLUSTER"
)

// shardsPerMaster is how many frontier shards and seen-filter parts each master of a
// cluster run gets: a shard's frontier is one hash tag, so a few per master spread them.
const shardsPerMaster = 4

const defaultSizes = "1e5,1e6,1e7"

// urlsPerHost is the shape of every size: 10⁵ URLs over 10³ hosts, and so on.
const urlsPerHost = 100

// curvePoints is how many points each curve has: one per twentieth of the URLs.
const curvePoints = 20

// minRatio is what the dispatch rate at the largest queue must keep of the rate at the
// smallest.
const minRatio = 0.8

// Point is one stretch of a curve: the queue's size at its start and the rate over it.
type Point struct {
	Queue int64   `json:"queue"`
	Done  int64   `json:"done"` // URLs through the stage at the stretch's end
	Rate  float64 `json:"rate"` // URLs/s over the stretch
	// CPU is each process's CPU time over the stretch, µs per URL: the cost, which a busy
	// machine moves less than the rate.
	CPU map[string]float64 `json:"cpu_us_per_url"`
}

// Family is the Redis memory of one kind of key.
type Family struct {
	Keys   int64   `json:"keys"`
	Bytes  int64   `json:"bytes"`
	PerURL float64 `json:"bytes_per_url"`
}

// Snapshot is memory at one moment.
type Snapshot struct {
	Load        string            `json:"load"`
	RedisUsed   int64             `json:"redis_used_memory"`
	RedisRSS    int64             `json:"redis_used_memory_rss"`
	RedisPeak   int64             `json:"redis_used_memory_peak"`
	RedisPerURL float64           `json:"redis_bytes_per_url"`
	AOFBytes    int64             `json:"aof_bytes"`
	Families    map[string]Family `json:"families"`
	Streams     map[string]Family `json:"nats_streams"` // Keys holds the messages
	NATSStore   int64             `json:"nats_store_bytes"`
	Procs       map[string]Mem    `json:"procs"`
	// Masters is each cluster master's share, by its address (cluster runs only).
	Masters map[string]Master `json:"masters,omitempty"`
}

// Master is one cluster master's memory and keys, and the commands it has run and the CPU
// time it has used since it started (INFO stats, cpu): the load spread over the masters.
type Master struct {
	Used int64   `json:"used_memory"`
	Keys int64   `json:"keys"`
	Ops  int64   `json:"commands_processed"`
	CPU  float64 `json:"cpu_seconds"`
}

// Result is one size's figures.
type Result struct {
	URLs int64 `json:"urls"` // seeded
	// Lost are the seeds the seen filter took for seen (its false positives); the figures
	// per URL are per URL queued, URLs − Lost.
	Lost          int64   `json:"lost_to_false_positives"`
	Hosts         int64   `json:"hosts"`
	IngestSeconds float64 `json:"ingest_seconds"`
	IngestRate    float64 `json:"ingest_rate"`
	Ingest        []Point `json:"ingest_curve"`
	DispatchRate  float64 `json:"dispatch_rate"` // over the whole drain
	DispatchFull  float64 `json:"dispatch_rate_full_queue"`
	Dispatch      []Point `json:"dispatch_curve"`
	// DispatchCPUFull is each process's CPU µs per URL over the same stretch as
	// DispatchFull.
	DispatchCPUFull map[string]float64 `json:"dispatch_cpu_full_queue"`
	OutcomeRate     float64            `json:"outcome_rate"`
	Outcome         []Point            `json:"outcome_curve"`
	Drained         bool               `json:"drained"`
	// RoutedSeconds is when the front queues were empty (every URL in its host's back
	// queue), RoutedAt the tasks dispatched by then.
	RoutedSeconds float64 `json:"routed_seconds"`
	RoutedAt      int64   `json:"routed_at_dispatched"`
	DrainSeconds  float64 `json:"drain_seconds"`
	SchedRestart  float64 `json:"scheduler_restart_seconds"`
	FirstDispatch float64 `json:"unpause_to_first_dispatch_seconds"`
	RedisStop     float64 `json:"redis_stop_seconds"`
	RedisStart    float64 `json:"redis_start_seconds"`
	ServicesBack  float64 `json:"services_ready_after_redis_seconds"`
	// PeakRSS is each process's VmHWM over the whole size (the highest of its lives).
	PeakRSS     map[string]int64 `json:"peak_rss"`
	AfterIngest Snapshot         `json:"after_ingest"`
	AfterDrain  Snapshot         `json:"after_drain"`
}

// TestScale measures the frontier and dedup at every size of SCALE_SIZES; see
// devstack/README.md and docs/cost-per-page.md "Scale".
func TestScale(t *testing.T) {
	sizes, err := parseSizes(cmpOr(os.Getenv(envSizes), defaultSizes))
	if err != nil {
		t.Fatal(err)
	}
	bins := binaries(t)
	drainFor := 10 * time.Minute
	if v := os.Getenv(envDrainFor); v != "" {
		if drainFor, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s=%q: %v", envDrainFor, v, err)
		}
	}
	profDir := os.Getenv(envProfile)
	if profDir == "" {
		profDir = t.TempDir()
	} else if err := os.MkdirAll(profDir, 0o755); err != nil {
		t.Fatal(err)
	}
	rounds := 3
	if v := os.Getenv(envRounds); v != "" {
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			t.Fatalf("%s=%q: want a count of at least 1", envRounds, v)
		}
	}
	var runs []int64
	for _, n := range sizes {
		k := 1
		if n == slices.Min(sizes) {
			k = rounds
		}
		for range k {
			runs = append(runs, n)
		}
	}
	var results []Result
	for _, n := range runs {
		t.Run(strconv.FormatInt(n, 10), func(t *testing.T) {
			r := runSize(t, bins, n, drainFor, profDir)
			results = append(results, r)
			t.Logf("\n%s", table([]Result{r}))
		})
	}
	if len(results) == 0 {
		return
	}
	fmt.Println(table(results))
	writeJSON(t, os.Getenv(envJSON), results)
	small, large := slices.Min(sizes), slices.Max(sizes)
	has := func(n int64) bool { return slices.ContainsFunc(results, func(r Result) bool { return r.URLs == n }) }
	if small == large || !has(small) || !has(large) {
		return // one size, or a size failed (its subtest says why)
	}
	ref, got := medianFull(results, small), medianFull(results, large)
	fmt.Printf("dispatch rate with a full queue: %.0f/s at %d URLs, %.0f/s at %d (%.0f%%; the medians of their rounds)\n", ref, small, got, large, 100*got/ref)
	refCPU, gotCPU := medianOf(results, small, func(r Result) float64 { return pipelineCPU(r.DispatchCPUFull) }), medianOf(results, large, func(r Result) float64 { return pipelineCPU(r.DispatchCPUFull) })
	fmt.Printf("CPU per URL dispatched and completed with a full queue (scheduler, Redis, NATS): %.1f µs at %d URLs, %.1f µs at %d (%.0f%%)\n", refCPU, small, gotCPU, large, 100*gotCPU/refCPU)
	if got < minRatio*ref {
		t.Errorf("dispatch rate at %d queued URLs is %.0f/s, %.0f%% of the %.0f/s at %d: want at least %.0f%%",
			large, got, 100*got/ref, ref, small, 100*minRatio)
	}
}

// binaries is SCALE_BIN, or the services built into a temporary directory.
func binaries(t *testing.T) string {
	if bins := os.Getenv(envBin); bins != "" {
		return bins
	}
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := stack.Build(ctx, root, bins); err != nil {
		t.Fatal(err)
	}
	return bins
}

// medianFull is the median full-queue dispatch rate of the rounds of n URLs.
func medianFull(rs []Result, n int64) float64 {
	return medianOf(rs, n, func(r Result) float64 { return r.DispatchFull })
}

// medianOf is the median of f over the rounds of n URLs.
func medianOf(rs []Result, n int64, f func(Result) float64) float64 {
	var v []float64
	for _, r := range rs {
		if r.URLs == n {
			v = append(v, f(r))
		}
	}
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// parseSizes reads "1e5,1e6" or "100000,1000000".
func parseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < urlsPerHost || v != math.Trunc(v) {
			return nil, fmt.Errorf("%s: %q is not a number of URLs of at least %d", envSizes, f, urlsPerHost)
		}
		out = append(out, int64(v))
	}
	return out, nil
}

// sample is the frontier's counters at one moment.
type sample struct {
	at                                    time.Time
	accepted, queued, dispatched, fetched int64
	front                                 int64 // in the front queues, not yet routed to a back queue
	cpu                                   map[string]time.Duration
}

func runSize(t *testing.T, bins string, n int64, drainFor time.Duration, profDir string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	hosts := n / urlsPerHost
	res := Result{URLs: n, Hosts: hosts, PeakRSS: map[string]int64{}}
	prefix := redisx.DefaultPrefix
	masters := 0
	if v := os.Getenv(envCluster); v != "" {
		var err error
		if masters, err = strconv.Atoi(v); err != nil || masters < 0 {
			t.Fatalf("%s=%q: want a count of masters", envCluster, v)
		}
	}
	var cluster *rediscluster.Cluster
	redisURL := ""
	nShards := 1
	env := map[string]string{
		"TRAWL_MIN_DELAY":    "0s",
		"TRAWL_DELAY_FACTOR": "0",
		// Every host holds a back queue and is due: the host heap and the back queues at
		// their largest, which the shipped 1024 would cap.
		"TRAWL_BACK_QUEUES": strconv.FormatInt(hosts, 10),
		"TRAWL_LOG_LEVEL":   "warn",
		// For the live heap (a collection forced through the heap profile).
		"TRAWL_PPROF": "true",
	}
	if masters > 0 {
		// Redis's own cluster-node-timeout (15 s), not the tests' 1 s: without replicas a
		// master that other masters miss for that long takes the cluster down (CLUSTERDOWN),
		// and a master busy with a long script or starved on a loaded machine misses 1 s.
		cluster = rediscluster.StartT(t, rediscluster.Options{Masters: masters, Replicas: -1, AOF: true, NodeTimeout: 15 * time.Second})
		redisURL = cluster.URL()
		nShards = masters * shardsPerMaster
		env["TRAWL_SHARDS"] = strconv.Itoa(nShards)
		env["TRAWL_BLOOM_PARTS"] = strconv.Itoa(nShards)
	}
	shards := make([]int, nShards)
	for i := range shards {
		shards[i] = i
	}
	st, err := stack.Start(ctx, stack.Options{
		BinDir:   bins,
		Dir:      t.TempDir(),
		Only:     []string{"scheduler", "dedup"},
		NATSBin:  filepath.Join(bins, stack.NATSServer),
		RedisURL: redisURL,
		Env:      env,
		// The code's cost, not the disk's, as make bench measures it.
		Durability: durability.EverySecond,
		// Paused before the scheduler starts: the ingest fills the front queues alone.
		Prepare: func(ctx context.Context, rdb redis.UniversalClient) error {
			_, err := frontierkeys.SetPaused(ctx, rdb, prefix, nShards, shards, true)
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.WithoutCancel(ctx))
	rdb := st.RedisClient()
	fr := frontierkeys.OpenReadOnly(rdb, prefix, nShards)
	var cpuPIDs map[string]int
	read := func() (sample, error) {
		now := time.Now()
		s, err := fr.Status(ctx, now, 0)
		if err != nil {
			return sample{}, err
		}
		var c frontierkeys.Counters
		var front int64
		for _, sh := range s.Shards {
			c.Accepted += sh.Counters.Accepted
			c.Queued += sh.Counters.Queued
			c.Dispatched += sh.Counters.Dispatched
			c.Fetched += sh.Counters.Fetched
			for _, f := range sh.Front {
				front += f
			}
		}
		cpu := map[string]time.Duration{}
		for id, pid := range cpuPIDs {
			if d, err := stack.CPUTime(pid); err == nil {
				cpu[id] = d
			}
		}
		return sample{now, c.Accepted, c.Queued, c.Dispatched, c.Fetched, front, cpu}, nil
	}
	// The processes whose CPU time each sample reads, again after every restart.
	setPIDs := func() {
		pids, err := allPIDs(ctx, st, cluster)
		if err != nil {
			t.Fatal(err)
		}
		cpuPIDs = pids
	}
	setPIDs()
	peak := func() {
		pids, err := allPIDs(ctx, st, cluster)
		if err != nil {
			t.Logf("pids: %v", err)
			return
		}
		for id, pid := range pids {
			if m, err := ReadMem(pid); err == nil {
				res.PeakRSS[id] = max(res.PeakRSS[id], m.HWM)
			}
		}
	}

	// Ingest: seeds → crawl.discovered → dedup → crawl.frontier → the add script.
	t.Logf("%d URLs over %d hosts: ingest (load %s)", n, hosts, stack.LoadAverage())
	t0 := time.Now()
	seedErr := make(chan error, 1)
	go func() { seedErr <- seedURLs(ctx, st.JetStream(), n, hosts) }()
	var ingest []sample
	for {
		s, err := read()
		if err != nil {
			t.Fatal(err)
		}
		ingest = append(ingest, s)
		if s.accepted >= n {
			break
		}
		select {
		case err := <-seedErr:
			if err != nil {
				t.Fatal(err)
			}
			seedErr = nil
		default:
		}
		// A URL the seen filter calls seen by a false positive (at TRAWL_BLOOM_FP_RATE, by
		// design) is never accepted: once the seeds are out and the count stands still,
		// the stages' backlogs say whether dedup and the frontier are done.
		if prev := ingest[max(len(ingest)-2, 0)]; seedErr == nil && len(ingest) > 1 && s.accepted == prev.accepted {
			p, err := st.Progress(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var left uint64
			for _, b := range p.Backlog {
				left += b
			}
			if left == 0 {
				break
			}
		}
		if time.Since(t0) > 20*time.Minute {
			t.Fatalf("ingest: %d of %d URLs accepted after %s", s.accepted, n, time.Since(t0))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if seedErr != nil {
		if err := <-seedErr; err != nil {
			t.Fatal(err)
		}
	}
	// From here on n is the URLs queued.
	n = ingest[len(ingest)-1].accepted
	res.Lost = res.URLs - n
	res.IngestSeconds = ingest[len(ingest)-1].at.Sub(t0).Seconds()
	res.IngestRate = float64(n) / res.IngestSeconds
	res.Ingest = curve(ingest, n, func(s sample) int64 { return s.accepted }, func(s sample) int64 { return s.accepted })
	peak()
	// The dedup stats and the processes settle (a GC cycle, the Bloom stats write).
	time.Sleep(3 * time.Second)
	if res.AfterIngest, err = snapshot(ctx, st, cluster, nShards, n, profDir, "queued"); err != nil {
		t.Fatal(err)
	}
	t.Logf("ingest %.0f URLs/s; Redis %.1f B/URL", res.IngestRate, res.AfterIngest.RedisPerURL)

	// Restarts with the queue full: the scheduler (SIGTERM, start, /readyz) and Redis
	// (SIGTERM with the AOF flushed, start, PING answered once the AOF is loaded).
	sched := st.Proc("scheduler", 0)
	t1 := time.Now()
	if err := sched.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := sched.Start(); err != nil {
		t.Fatal(err)
	}
	if err := st.WaitReady(ctx, sched); err != nil {
		t.Fatal(err)
	}
	res.SchedRestart = time.Since(t1).Seconds()
	if cluster == nil {
		t2 := time.Now()
		if err := st.Redis().Stop(); err != nil {
			t.Fatal(err)
		}
		res.RedisStop = time.Since(t2).Seconds()
		t3 := time.Now()
		if err := st.Redis().Restart(ctx); err != nil {
			t.Fatal(err)
		}
		res.RedisStart = time.Since(t3).Seconds()
		for _, p := range st.Procs() {
			if err := st.WaitReady(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		res.ServicesBack = time.Since(t3).Seconds()
	}
	t.Logf("restart: scheduler %.2fs, Redis stop %.2fs, start %.2fs (load %s)", res.SchedRestart, res.RedisStop, res.RedisStart, stack.LoadAverage())

	// Dispatch: every host due, tasks taken and answered by fetchers that make no request.
	setPIDs()
	t.Logf("dispatch (load %s)", stack.LoadAverage())
	fctx, fstop := context.WithCancel(ctx)
	var answered atomic.Int64
	fetchErr := make(chan error, 1)
	go func() { fetchErr <- fastFetch(fctx, st.JetStream(), &answered) }()
	d0, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := frontierkeys.SetPaused(ctx, rdb, prefix, nShards, shards, false); err != nil {
		t.Fatal(err)
	}
	drain := []sample{d0}
	var schedFirst time.Duration
	start := time.Now()
	for {
		time.Sleep(100 * time.Millisecond)
		s, err := read()
		if err != nil {
			t.Fatal(err)
		}
		drain = append(drain, s)
		if schedFirst == 0 && s.dispatched > d0.dispatched {
			schedFirst = time.Since(start)
		}
		if res.RoutedSeconds == 0 && s.front == 0 {
			res.RoutedSeconds, res.RoutedAt = time.Since(start).Seconds(), s.dispatched-d0.dispatched
		}
		if s.fetched >= n {
			res.Drained = true
			break
		}
		if time.Since(start) > drainFor {
			t.Logf("drain stopped after %s: %d of %d fetched", drainFor, s.fetched, n)
			break
		}
		select {
		case err := <-fetchErr:
			t.Fatalf("fast fetcher: %v", err)
		default:
		}
	}
	fstop()
	if err := <-fetchErr; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("fast fetcher: %v", err)
	}
	res.FirstDispatch = schedFirst.Seconds()
	last := drain[len(drain)-1]
	res.DrainSeconds = last.at.Sub(start).Seconds()
	res.DispatchRate = float64(last.dispatched-d0.dispatched) / res.DrainSeconds
	res.OutcomeRate = float64(last.fetched-d0.fetched) / res.DrainSeconds
	res.Dispatch = curve(drain, n, func(s sample) int64 { return s.dispatched - d0.dispatched }, func(s sample) int64 { return n - s.dispatched + d0.dispatched })
	res.Outcome = curve(drain, n, func(s sample) int64 { return s.fetched - d0.fetched }, func(s sample) int64 { return n - s.fetched + d0.fetched })
	// The rate at a full queue: from 5% to 25% of the URLs dispatched (the first 5% hold
	// the start, the gate learning the fetchers' rate; one twentieth alone lasts a few
	// tenths of a second at 10⁵, too short for a shared machine).
	res.DispatchFull, res.DispatchCPUFull = rateBetween(drain, func(s sample) int64 { return s.dispatched - d0.dispatched }, n/20, n/4)
	peak()
	time.Sleep(3 * time.Second)
	if res.AfterDrain, err = snapshot(ctx, st, cluster, nShards, n, profDir, "drained"); err != nil {
		t.Fatal(err)
	}
	t.Logf("dispatch %.0f/s (full queue %.0f/s), outcomes %.0f/s; after the drain Redis %.1f B/URL", res.DispatchRate, res.DispatchFull, res.OutcomeRate, res.AfterDrain.RedisPerURL)
	return res
}

// seedURLs publishes n URLs over hosts hosts, host by host in turn (URL i is page i/hosts of
// host i%hosts), as seeds in chunks so that the bench's own memory stays small.
func seedURLs(ctx context.Context, js jetstream.JetStream, n, hosts int64) error {
	const chunk = 50_000
	urls := make([]string, 0, chunk)
	for i := int64(0); i < n; i++ {
		urls = append(urls, fmt.Sprintf("http://h%d.scale.test/p/%d", i%hosts, i/hosts))
		if len(urls) == chunk || i == n-1 {
			if _, err := seed.Publish(ctx, js, urls, 0); err != nil {
				return err
			}
			urls = urls[:0]
		}
	}
	return nil
}

// curve cuts samples into curvePoints stretches of n/curvePoints URLs each by done, each
// with its rate and the queue (by queue) at its start.
func curve(ss []sample, n int64, done, queue func(sample) int64) []Point {
	var out []Point
	step := max(n/curvePoints, 1)
	from := ss[0]
	next := step
	for _, s := range ss[1:] {
		if done(s) < next {
			continue
		}
		dt := s.at.Sub(from.at).Seconds()
		out = append(out, Point{Queue: queue(from), Done: done(s), Rate: float64(done(s)-done(from)) / dt, CPU: cpuPerURL(from, s, done(s)-done(from))})
		from = s
		for next <= done(s) {
			next += step
		}
	}
	return out
}

// rateBetween is the rate of done between the samples where it first reaches lo and hi,
// and each process's CPU time per URL over that stretch.
func rateBetween(ss []sample, done func(sample) int64, lo, hi int64) (float64, map[string]float64) {
	var from *sample
	for i := range ss {
		if from == nil && done(ss[i]) >= lo {
			from = &ss[i]
		}
		if from != nil && done(ss[i]) >= hi {
			if dt := ss[i].at.Sub(from.at).Seconds(); dt > 0 {
				return float64(done(ss[i])-done(*from)) / dt, cpuPerURL(*from, ss[i], done(ss[i])-done(*from))
			}
		}
	}
	return 0, nil
}

// cpuPerURL is each process's CPU time from a to b, in µs per URL of the urls done.
func cpuPerURL(a, b sample, urls int64) map[string]float64 {
	out := map[string]float64{}
	if urls <= 0 {
		return out
	}
	for id, t := range b.cpu {
		if t0, ok := a.cpu[id]; ok {
			out[id] = float64((t - t0).Microseconds()) / float64(urls)
		}
	}
	return out
}

// pipelineCPU sums the CPU per URL of the processes on the path measured (the bench
// process, which plays the fetchers, left out).
func pipelineCPU(m map[string]float64) float64 {
	var sum float64
	for id, v := range m {
		if id != "bench" {
			sum += v
		}
	}
	return sum
}

// fastFetch takes tasks from the fetchers' consumer as a fetcher does (as many as it has
// idle slots) and answers each with a fetched outcome, 200 and a 1 ms response, on the
// shard's outcome subject, then acks the task message: what a fetcher does after a request,
// less the request and the page.
func fastFetch(ctx context.Context, js jetstream.JetStream, answered *atomic.Int64) error {
	cons, err := js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	var seq atomic.Int64
	return natsx.ConsumeEach(ctx, cons, natsx.ConsumeOptions{
		Batch: 512,
		Weight: func(m jetstream.Msg) int {
			n, _ := strconv.Atoi(m.Headers().Get(crawlmsg.TasksHeader))
			return n
		},
	}, func(ctx context.Context, m jetstream.Msg) error {
		tasks, err := crawlmsg.DecodeTasks(m.Data())
		if err != nil {
			return err
		}
		now := time.Now().UnixMilli()
		byShard := map[int][]crawlmsg.Outcome{}
		for _, tk := range tasks {
			byShard[tk.Shard] = append(byShard[tk.Shard], crawlmsg.Outcome{
				Shard: tk.Shard, Host: tk.Host, URL: tk.URL, Lease: tk.Lease, Attempt: tk.Attempt,
				Kind: crawlmsg.OutcomeFetched, Requested: true, Status: 200, StartedAt: now, DurationMs: 1, Bytes: 1000,
			})
		}
		for shard, outs := range byShard {
			data, err := crawlmsg.Marshal(&crawlmsg.OutcomeBatch{V: crawlmsg.OutcomeBatchVersion, Outcomes: outs})
			if err != nil {
				return err
			}
			subj := topology.FetchedSubject(shard)
			id := topology.OutcomesPrefix("scale") + strconv.FormatInt(seq.Add(1), 36)
			if _, err := js.PublishMsg(ctx, natsx.NewMsg(subj, id, data)); err != nil {
				return err
			}
		}
		answered.Add(int64(len(tasks)))
		return nil // ConsumeEach acks, as the fetcher's own loop does after the outcome is stored
	})
}

// snapshot reads Redis's memory by key family, the streams' bytes and every process's
// memory, with n URLs in the crawl.
func snapshot(ctx context.Context, st *stack.Stack, cluster *rediscluster.Cluster, shards int, n int64, profDir, phase string) (Snapshot, error) {
	s := Snapshot{Load: stack.LoadAverage(), Families: map[string]Family{}, Streams: map[string]Family{}, Procs: map[string]Mem{}}
	rdb := st.RedisClient()
	// Every master's memory, summed; one redis-server is its own master.
	var mu sync.Mutex
	err := eachMaster(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory", "keyspace", "stats", "cpu").Result()
		if err != nil {
			return fmt.Errorf("info memory: %w", err)
		}
		keys, err := c.DBSize(ctx).Result()
		if err != nil {
			return fmt.Errorf("dbsize: %w", err)
		}
		mu.Lock()
		defer mu.Unlock()
		s.RedisUsed += infoInt(info, "used_memory")
		s.RedisRSS += infoInt(info, "used_memory_rss")
		s.RedisPeak += infoInt(info, "used_memory_peak")
		if cluster != nil {
			if s.Masters == nil {
				s.Masters = map[string]Master{}
			}
			s.Masters[c.Options().Addr] = Master{Used: infoInt(info, "used_memory"), Keys: keys, Ops: infoInt(info, "total_commands_processed"),
				CPU: infoFloat(info, "used_cpu_user") + infoFloat(info, "used_cpu_sys")}
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	s.RedisPerURL = float64(s.RedisUsed) / float64(n)
	if err := families(ctx, rdb, shards, n, s.Families); err != nil {
		return s, err
	}
	if cluster == nil {
		s.AOFBytes = dirBytes(st.Redis().Dir())
	} else {
		for _, nd := range cluster.Nodes {
			s.AOFBytes += dirBytes(nd.Dir())
		}
	}
	s.NATSStore = dirBytes(filepath.Join(st.Dir(), "nats"))
	names := st.JetStream().StreamNames(ctx)
	for name := range names.Name() {
		str, err := st.JetStream().Stream(ctx, name)
		if err != nil {
			return s, fmt.Errorf("stream %s: %w", name, err)
		}
		i := str.CachedInfo()
		s.Streams[name] = Family{Keys: int64(i.State.Msgs), Bytes: int64(i.State.Bytes), PerURL: float64(i.State.Bytes) / float64(n)}
	}
	if err := names.Err(); err != nil {
		return s, fmt.Errorf("streams: %w", err)
	}
	pids, err := allPIDs(ctx, st, cluster)
	if err != nil {
		return s, err
	}
	for id, pid := range pids {
		m, err := ReadMem(pid)
		if err != nil {
			return s, err
		}
		if p := procOf(st, id); p != nil {
			if v, ok, err := p.Metric(ctx, "go_memstats_heap_inuse_bytes"); err == nil && ok {
				m.Heap = int64(v)
			}
			// The heap profile with gc=1 collects first; GOGC=400 otherwise leaves up to
			// four times the live heap in garbage.
			if err := saveHeap(ctx, p, filepath.Join(profDir, fmt.Sprintf("%d-%s-%s.heap", n, phase, id))); err != nil {
				return s, err
			}
			if v, ok, err := p.Metric(ctx, "go_memstats_heap_alloc_bytes"); err == nil && ok {
				m.Live = int64(v)
			}
		}
		s.Procs[id] = m
	}
	return s, nil
}

// saveHeap writes p's heap profile, collecting garbage first, to path.
func saveHeap(ctx context.Context, p *stack.Proc, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTPAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s heap profile: %w", p.ID(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s heap profile: %s", p.ID(), resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("%s heap profile: %w", p.ID(), err)
	}
	return f.Close()
}

func procOf(st *stack.Stack, id string) *stack.Proc {
	for _, p := range st.Procs() {
		if p.ID() == id {
			return p
		}
	}
	return nil
}

// families sums MEMORY USAGE over every key, by the family the frontier's and the seen
// filter's layouts put it in.
func families(ctx context.Context, rdb redis.UniversalClient, shards int, n int64, out map[string]Family) error {
	const x = "\x00"
	stem := func(k string) string { return strings.TrimSuffix(k, x) }
	exact := map[string]string{}
	var prefixes [][2]string
	// The shards' and the filter's parts' keys (as many parts as shards).
	for i := range shards {
		sh := frontierkeys.ForShard(redisx.DefaultPrefix, i, shards)
		exact[sh.Heap()], exact[sh.Hosts()], exact[sh.Inflight()], exact[sh.Lease()] = "host heap", "host table", "leases", "leases"
		prefixes = append(prefixes,
			[2]string{strings.TrimSuffix(sh.FrontQueue(0), "0"), "front queues"},
			[2]string{stem(sh.BackQueue(x)), "back queues"},
			[2]string{stem(sh.Host(x)), "host state"})
	}
	for i := range shards {
		prefixes = append(prefixes, [2]string{strings.TrimSuffix(bloomhash.MetaKey(redisx.DefaultPrefix, bloomhash.Tag(i, shards)), "meta"), "seen filter"})
	}
	// What the fetchers and parsers keep (the wide crawl): robots.txt per origin and the
	// content index's exact buckets (65,536 hashes, one entry per original text) and
	// near-duplicate buckets.
	prefixes = append(prefixes,
		[2]string{redisx.DefaultPrefix + ":robots", "robots"},
		[2]string{redisx.DefaultPrefix + ":{content}:exact:", "content exact"},
		[2]string{redisx.DefaultPrefix + ":{content}:band:", "content bands"})
	classify := func(k string) string {
		if f, ok := exact[k]; ok {
			return f
		}
		for _, p := range prefixes {
			if strings.HasPrefix(k, p[0]) {
				return p[1]
			}
		}
		return "other"
	}
	var mu sync.Mutex
	var keys []string
	err := eachMaster(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		var ks []string
		it := c.Scan(ctx, 0, "*", 10_000).Iterator()
		for it.Next(ctx) {
			ks = append(ks, it.Val())
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	for b := range slices.Chunk(keys, 1000) {
		cmds := make([]*redis.IntCmd, len(b))
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range b {
				// SAMPLES 0: every element, so a long list is measured, not estimated.
				cmds[i] = p.MemoryUsage(ctx, k, 0)
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("memory usage: %w", err)
		}
		for i, k := range b {
			f := out[classify(k)]
			f.Keys++
			f.Bytes += cmds[i].Val()
			out[classify(k)] = f
		}
	}
	for k, f := range out {
		f.PerURL = float64(f.Bytes) / float64(n)
		out[k] = f
	}
	return nil
}

// eachMaster calls fn with every master of a cluster client, or with the one server of a
// plain client.
func eachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	default:
		return fmt.Errorf("scale: a Redis client of type %T", rdb)
	}
}

// allPIDs is the stack's processes, the bench process and, on a cluster, each master as
// "redis-<port>" (its process_id from INFO).
func allPIDs(ctx context.Context, st *stack.Stack, cluster *rediscluster.Cluster) (map[string]int, error) {
	pids, err := st.PIDs()
	if err != nil {
		return nil, err
	}
	pids["bench"] = os.Getpid()
	if cluster == nil {
		return pids, nil
	}
	var mu sync.Mutex
	err = eachMaster(ctx, st.RedisClient(), func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return fmt.Errorf("info server: %w", err)
		}
		_, port, _ := strings.Cut(c.Options().Addr, ":")
		mu.Lock()
		pids["redis-"+port] = int(infoInt(info, "process_id"))
		mu.Unlock()
		return nil
	})
	return pids, err
}

func infoFloat(info, field string) float64 {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if i, err := d.Info(); err == nil {
				n += i.Size()
			}
		}
		return nil
	})
	return n
}

var tableMu sync.Mutex

// table is the results as Markdown: rates, bytes per URL and memory per process.
func table(rs []Result) string {
	tableMu.Lock()
	defer tableMu.Unlock()
	var b strings.Builder
	mb := func(v int64) string { return fmt.Sprintf("%.0f", float64(v)/(1<<20)) }
	fmt.Fprintf(&b, "| URLs / hosts (seen by a false positive) | ingest URLs/s | dispatch/s full queue | CPU µs/URL full queue | dispatch/s all | outcomes/s | Redis B/URL queued | of which front q. | seen filter | Redis B/URL drained | of which host state | NATS store B/URL queued | drained | sched restart s | Redis stop + start s | load |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		a, d := r.AfterIngest, r.AfterDrain
		perURL := func(v int64) float64 { return float64(v) / float64(r.URLs-r.Lost) }
		fmt.Fprintf(&b, "| %d / %d (%d) | %.0f | %.0f | %.1f | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f + %.2f | %s |\n",
			r.URLs, r.Hosts, r.Lost, r.IngestRate, r.DispatchFull, pipelineCPU(r.DispatchCPUFull), r.DispatchRate, r.OutcomeRate, a.RedisPerURL,
			a.Families["front queues"].PerURL, a.Families["seen filter"].PerURL, d.RedisPerURL, d.Families["host state"].PerURL,
			perURL(a.NATSStore), perURL(d.NATSStore), r.SchedRestart, r.RedisStop, r.RedisStart, a.Load)
	}
	fmt.Fprintf(&b, "\n| URLs | process | peak RSS MB | RSS MB queued | PSS MB queued | Go heap in use / live MB queued | RSS MB drained | Go heap in use / live MB drained |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		ids := make([]string, 0, len(r.PeakRSS))
		for id := range r.PeakRSS {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			a, d := r.AfterIngest.Procs[id], r.AfterDrain.Procs[id]
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s / %s | %s | %s / %s |\n", r.URLs, id, mb(r.PeakRSS[id]), mb(a.RSS), mb(a.PSS), mb(a.Heap), mb(a.Live), mb(d.RSS), mb(d.Heap), mb(d.Live))
		}
	}
	for _, r := range rs {
		if len(r.AfterIngest.Masters) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n| URLs | master | used MB queued | keys queued | used MB drained | keys drained | CPU µs/URL full queue | commands to queued / to drained | CPU s to queued / to drained |\n|---|---|---|---|---|---|---|---|---|\n")
		addrs := slices.Sorted(maps.Keys(r.AfterIngest.Masters))
		for _, a := range addrs {
			q, d := r.AfterIngest.Masters[a], r.AfterDrain.Masters[a]
			_, port, _ := strings.Cut(a, ":")
			fmt.Fprintf(&b, "| %d | %s | %s | %d | %s | %d | %.1f | %d / %d | %.1f / %.1f |\n", r.URLs, a, mb(q.Used), q.Keys, mb(d.Used), d.Keys, r.DispatchCPUFull["redis-"+port],
				q.Ops, d.Ops, q.CPU, d.CPU)
		}
	}
	return b.String()
}

// writeJSON writes v as indented JSON to out, when out is set, and says where.
func writeJSON(t *testing.T, out string, v any) {
	t.Helper()
	if out == "" {
		return
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Println("results:", out)
}
