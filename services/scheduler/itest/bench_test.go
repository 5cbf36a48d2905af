package itest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

// benchURL returns a ~70-character URL of host i.
func benchURL(host, i int) string {
	return fmt.Sprintf("https://www.host%06d.example.com/articles/2024/section-%08d/page.html", host, i)
}

// BenchmarkFrontierDispatch measures URLs per second through the whole cycle on one shard:
// add (as frontier messages), dispatch, complete, with MinDelay 0 and many hosts.
func BenchmarkFrontierDispatch(b *testing.B) {
	benchDispatch(b, prioritize.BreadthFirst{})
}

// BenchmarkFrontierDispatchPreference is BenchmarkFrontierDispatch with the preference
// prioritiser: every message comes from a source page on another host, so the add script
// also counts a backlink for every host of every message.
func BenchmarkFrontierDispatchPreference(b *testing.B) {
	benchDispatch(b, prioritize.Preference{X: 1, Y: 1})
}

// BenchmarkFrontierDispatchRules is BenchmarkFrontierDispatch with 10,000 live site
// policies in the shard's table (benchRules): what the rules cost the frontier's scripts
// per URL, beside BenchmarkFrontierDispatch's figures.
func BenchmarkFrontierDispatchRules(b *testing.B) {
	benchDispatchWith(b, prioritize.BreadthFirst{}, benchRules(b, manyHostsBench, 200), manyHostsBench)
}

// BenchmarkFrontierDispatchFewHosts is BenchmarkFrontierDispatch over 250 hosts, as many as
// devstack/e2e BenchmarkPipeline's web: a host's queue rarely empties, and the frontier's
// hashes of active hosts are small enough for Redis to keep as listpacks unless told
// otherwise (frontierkeys.Wide).
func BenchmarkFrontierDispatchFewHosts(b *testing.B) {
	benchDispatchWith(b, prioritize.BreadthFirst{}, nil, fewHostsBench)
}

// BenchmarkFrontierDispatchFewHostsRules is BenchmarkFrontierDispatchFewHosts with 10,000
// rules, 100 of them for the web's hosts, as devstack/e2e BenchmarkPolicyRules loads.
func BenchmarkFrontierDispatchFewHostsRules(b *testing.B) {
	benchDispatchWith(b, prioritize.BreadthFirst{}, benchRules(b, fewHostsBench, 2.5), fewHostsBench)
}

// pageLogTrim is how many pages the benchmarks' page log holds before it is trimmed, about
// a trim round of a busy shard.
const pageLogTrim = 10000

// The benchmarks' host counts.
const manyHostsBench, fewHostsBench = 20000, 250

// benchRules is a table of 10,000 rules like the one devstack/e2e BenchmarkPolicyRules
// loads: a rule for one in every `every` of the benchmark's hosts, setting limits equal to
// the process-wide ones, and the rest for hosts and domains the crawl never meets (half of
// them allowing two connections).
func benchRules(b *testing.B, hosts int, every float64) *policy.Set {
	const n = 10_000
	named := int(float64(hosts) / every)
	rs := make([]policy.Rule, 0, n)
	for i := 0; len(rs) < n; i++ {
		switch {
		case i < named:
			rs = append(rs, hostRule(strings.SplitN(benchURL(int(float64(i)*every), 0), "/", 4)[2],
				policy.Rule{MinDelay: pdur(0), Connections: pint(1)}))
		case i%2 == 0:
			rs = append(rs, hostRule(fmt.Sprintf("www%d.unmet.example", i), policy.Rule{MinDelay: pdur(2 * time.Second)}))
		default:
			rs = append(rs, domainRule(fmt.Sprintf("unmet%d.example", i), policy.Rule{Connections: pint(2)}))
		}
	}
	return rules(b, 1, rs...)
}

func benchDispatch(b *testing.B, p frontier.Prioritizer) {
	benchDispatchWith(b, p, nil, manyHostsBench)
}

func benchDispatchWith(b *testing.B, p frontier.Prioritizer, rs *policy.Set, hosts int) {
	rdb := startRedis(b)
	o := testOptions(0)
	o.MinDelay = 0
	o.DelayFactor = 0
	f := newTFWith(b, rdb, o, p)
	ctx := testwait.Context(b)
	if rs != nil {
		if _, err := f.SyncPolicy(ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
	const batch, perMsg = 512, 64

	redisBefore := redisUsec(b, rdb.Info(ctx, "commandstats").Val())
	cpuBefore := redisCPU(b, rdb.Info(ctx, "cpu").Val())
	b.ResetTimer()
	start := time.Now()
	added, completed, next := 0, 0, 0
	for completed < b.N {
		if added < b.N {
			var bs []frontier.Batch
			for m := 0; m < batch/perMsg && added < b.N; m++ {
				us := make([]crawlmsg.Discovered, 0, perMsg)
				for ; len(us) < perMsg && added < b.N; added++ {
					us = append(us, crawlmsg.Discovered{URL: benchURL(added%hosts, added), Depth: added % 3})
				}
				bs = append(bs, frontier.Batch{ID: "m" + strconv.Itoa(next), URLs: us, Source: benchURL(hosts+next%1000, next)})
				next++
			}
			if _, err := f.AddBatches(ctx, bs); err != nil {
				b.Fatal(err)
			}
		}
		*f.now = time.Now()
		tasks, err := f.Dispatch(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		outs := make([]crawlmsg.Outcome, len(tasks))
		for i, tk := range tasks {
			// Each page has its sequence, as the fetcher's outcomes carry it: the step keeps
			// the URL in the page log.
			outs[i] = crawlmsg.Outcome{V: 1, Host: tk.Host, URL: tk.URL, Lease: tk.Lease, Kind: crawlmsg.OutcomeFetched, Status: 200, Requested: true,
				PageSeq: uint64(completed + i + 1)}
		}
		ap, err := f.Complete(ctx, outs)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range ap {
			if a.Result != frontier.ResultFetched {
				b.Fatalf("result %s", a.Result)
			}
		}
		completed += len(tasks)
		// The parser's ack floor trails by some thousands of pages, trimmed now and then.
		if completed/pageLogTrim > (completed-len(tasks))/pageLogTrim {
			if _, err := f.TrimPageLog(ctx, uint64(max(completed-pageLogTrim, 0))); err != nil {
				b.Fatal(err)
			}
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "urls/s")
	// Time spent inside Redis, which is what bounds a shard; unlike urls/s it barely
	// depends on what else runs on the machine.
	b.ReportMetric(float64(redisUsec(b, rdb.Info(ctx, "commandstats").Val())-redisBefore)/float64(b.N), "redis-µs/url")
	// The server's own CPU time (scripts, I/O, the AOF): what a shard costs the machine,
	// and, unlike the time inside commands, not inflated when the process waits for a core.
	b.ReportMetric(float64(redisCPU(b, rdb.Info(ctx, "cpu").Val())-cpuBefore)/float64(b.N), "redis-cpu-µs/url")
	if s := f.stats(); s.Fetched != int64(b.N) || s.Queued != 0 {
		b.Fatalf("stats %+v", s)
	}
}

// BenchmarkFrontierMemory measures Redis memory per queued URL (~70 characters, many hosts)
// from INFO used_memory before and after queueing 1,000,000 URLs (100,000 with -short).
func BenchmarkFrontierMemory(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	for range b.N {
		b.StopTimer()
		rdb := startRedis(b)
		f := newTF(b, rdb, testOptions(0))
		ctx := testwait.Context(b)
		before := usedMemory(b, rdb.Info(ctx, "memory").Val())
		b.StartTimer()
		const per = 10000
		for i := 0; i < n; i += per {
			us := make([]crawlmsg.Discovered, 0, per)
			for j := i; j < i+per && j < n; j++ {
				us = append(us, crawlmsg.Discovered{URL: benchURL(j%50000, j), Depth: j % 4})
			}
			if _, err := f.AddBatches(ctx, []frontier.Batch{{ID: "m" + strconv.Itoa(i), URLs: us}}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		// The applied markers are per message, not per URL; leave them out of the figure.
		rdb.Del(ctx, f.Keyspace().Key("applied"))
		after := usedMemory(b, rdb.Info(ctx, "memory").Val())
		if s := f.stats(); s.Queued != int64(n) {
			b.Fatalf("queued %d, want %d", s.Queued, n)
		}
		b.ReportMetric(float64(after-before)/float64(n), "bytes/url")
		b.ReportMetric(float64(len(benchURL(0, 0))), "url-chars")
	}
}

// BenchmarkFrontierAdmit measures how long it takes to admit a waiting host into a freed
// back queue while 100,000 hosts wait in the front queues: the cost of one Complete that
// frees a back queue and routes the next host.
func BenchmarkFrontierAdmit(b *testing.B) {
	rdb := startRedis(b)
	o := testOptions(0)
	o.MinDelay = 0
	o.DelayFactor = 0
	o.BackQueues = 1000
	f := newTF(b, rdb, o)
	ctx := testwait.Context(b)
	waiting := 100_000 + b.N + o.BackQueues
	const per = 10000
	for i := 0; i < waiting; i += per {
		us := make([]crawlmsg.Discovered, 0, per)
		for j := i; j < i+per && j < waiting; j++ {
			us = append(us, crawlmsg.Discovered{URL: benchURL(j, j), Depth: j % 4})
		}
		if _, err := f.AddBatches(ctx, []frontier.Batch{{ID: "m" + strconv.Itoa(i), URLs: us}}); err != nil {
			b.Fatal(err)
		}
	}
	*f.now = time.Now()
	tasks, err := f.Dispatch(ctx, o.BackQueues)
	if err != nil || len(tasks) != o.BackQueues {
		b.Fatalf("dispatch %d, %v", len(tasks), err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		// Each host had one URL, so its outcome frees its back queue and admits a new host.
		tk := tasks[i%len(tasks)]
		ap, err := f.Complete(ctx, []crawlmsg.Outcome{{V: 1, Host: tk.Host, Lease: tk.Lease, Kind: crawlmsg.OutcomeFetched, Status: 200, Requested: true}})
		if err != nil || ap[0].Result != frontier.ResultFetched {
			b.Fatalf("complete: %v %+v", err, ap)
		}
		if i%len(tasks) == len(tasks)-1 {
			b.StopTimer()
			if tasks, err = f.Dispatch(ctx, o.BackQueues); err != nil || len(tasks) != o.BackQueues {
				b.Fatalf("dispatch %d, %v", len(tasks), err)
			}
			b.StartTimer()
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(el.Microseconds())/1000/float64(b.N), "ms/host")
	if s := f.stats(); s.Active != int64(o.BackQueues) {
		b.Fatalf("active hosts %d, want every back queue refilled (%d)", s.Active, o.BackQueues)
	}
}

func usedMemory(b testing.TB, info string) int64 {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}

// redisCPU is the server's user + system CPU time in µs, from INFO cpu.
func redisCPU(b testing.TB, info string) int64 {
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatal(err)
		}
		total += f
	}
	if total == 0 {
		b.Fatal("no used_cpu_user/used_cpu_sys in INFO cpu")
	}
	return int64(total * 1e6)
}

// redisUsec sums the usec of every command in INFO commandstats.
func redisUsec(b testing.TB, info string) int64 {
	var total int64
	for _, line := range strings.Split(info, "\r\n") {
		_, rest, ok := strings.Cut(line, "usec=")
		if !ok || !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		total += n
	}
	return total
}
