package itest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/inproc"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/topology"
)

// The pipeline benchmark's wide web and batch size (devstack/e2e, TRAWL_PARSE_BATCH).
const (
	wideHosts    = 2000
	widePages    = 12
	benchBatch   = 32
	benchBatches = 12
)

// widePageMsgs fetches benchBatches × benchBatch pages of the wide web, spread over its
// hosts, and builds their page messages as the fetcher does (response header, capture).
func widePageMsgs(b *testing.B) ([]*nats.Msg, []synthweb.HostInfo) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := synthweb.DefaultConfig()
	cfg.Special = false
	cfg.Hosts, cfg.PagesPerHost = wideHosts, widePages
	web, err := synthweb.Start(ctx, cfg)
	if err != nil {
		b.Fatalf("start synthetic web: %v", err)
	}
	defer web.Close()
	hosts := web.Hosts()
	urls := make([]string, 0, wideHosts*widePages)
	for u := range web.Expected(20).Fetch {
		urls = append(urls, u)
	}
	slices.Sort(urls)
	n := benchBatches * benchBatch
	if len(urls) < n {
		b.Fatalf("the web has %d pages, want %d", len(urls), n)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	msgs := make([]*nats.Msg, 0, n)
	for i := range n {
		u := urls[i*len(urls)/n]
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatalf("fetch %s: %v", u, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("fetch %s: %d %v", u, resp.StatusCode, err)
		}
		var head strings.Builder
		fmt.Fprintf(&head, "HTTP/1.1 %s\r\n", resp.Status)
		_ = resp.Header.Write(&head)
		head.WriteString("\r\n")
		host := req.URL.Hostname()
		page := &crawlmsg.Page{
			Meta: crawlmsg.PageMeta{
				URL: u, Host: host, Depth: 1 + i%5, Status: resp.StatusCode, Header: resp.Header,
				ContentType: "text/html", Charset: "utf-8", FetchedAt: time.Now().UnixMilli(), DurationMs: 1,
				Lease: "0-" + strconv.Itoa(i) + "-bench",
				Capture: &crawlmsg.Capture{
					Request:  []byte("GET " + req.URL.RequestURI() + " HTTP/1.1\r\nHost: " + req.URL.Host + "\r\nUser-Agent: trawl\r\n\r\n"),
					Response: []byte(head.String()),
					Verbatim: true,
					IP:       host,
				},
			},
			Body: body,
		}
		m, err := crawlmsg.PageMsg(topology.SubjectPages, page)
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	return msgs, hosts
}

// benchRules are 10,000 site-policy rules, as a large crawl might hold, that the wide web's
// links meet at every lookup: a host rule for each of its hosts with an include every
// link passes and an exclude none matches (so each link runs both), a URL-prefix rule for
// each host on a path no link takes, and host rules for hosts the web does not have.
func benchRules(b *testing.B, hosts []synthweb.HostInfo, n int) []policy.Change {
	b.Helper()
	var out []policy.Change
	add := func(scope string, r policy.Rule) {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			b.Fatal(err)
		}
		r.Scope = sc
		out = append(out, policy.Change{Rule: r})
	}
	d := policy.Duration(2 * time.Second)
	for _, h := range hosts {
		add("host:"+h.Name, policy.Rule{MinDelay: &d, Include: []string{`^http://`}, Exclude: []string{`/never-linked-\d+$`}})
		add(h.Origin+"/never-linked/", policy.Rule{Exclude: []string{`\.pdf$`}})
	}
	for i := 0; len(out) < n; i++ {
		add(fmt.Sprintf("host:other%05d.example.com", i), policy.Rule{MinDelay: &d})
	}
	return out[:n]
}

// cpuTime is this process's user + system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPages is the parser's whole per-page path without NATS (service.Offline, which
// runs HandleBatch's own steps and leaves out only the publish and the acks): the pages of
// the pipeline benchmark's wide web, decoded from their messages, extracted,
// fingerprinted, checked against content dedup on a real redis-server, encoded as
// documents and packed as link batches, one batch of 32 pages per op with the default
// settings and GOGC, as the parser runs them. Every page is new to the index, as in a
// crawl: the index is emptied (clock stopped) before the pages come round again.
// Reported per page: the process's CPU time (cpu-µs/page, both workers), allocations
// (allocs/page) and redis-server's CPU time (redis-µs/page).
func BenchmarkPages(b *testing.B) {
	msgs, hosts := widePageMsgs(b)
	for _, n := range []int{0, 10000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) { benchPages(b, msgs, benchRules(b, hosts, n)) })
	}
}

func benchPages(b *testing.B, msgs []*nats.Msg, rules []policy.Change) {
	rs := redisproc.StartT(b, redisproc.Options{})
	opt, err := redis.ParseURL(rs.URL())
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	b.Cleanup(func() { rdb.Close() })
	cfg := inproc.Config(b, config.Load, map[string]string{
		"TRAWL_MAX_DEPTH":    "20",
		"TRAWL_ROBOTS_AGENT": synthweb.ProductToken,
	})
	ctx := ctxT(b)
	if len(rules) > 0 {
		if _, _, err := policy.NewStore(rdb, cfg.Common.RedisPrefix).Apply(ctx, rules, "bench", 0); err != nil {
			b.Fatal(err)
		}
	}
	off, err := service.NewOffline(ctx, cfg, rdb, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400)) // the services' default (runner.SetGCDefault)

	msgIDs := make([]string, len(msgs))
	for i := range msgIDs {
		msgIDs[i] = "CRAWL_PAGES:" + strconv.Itoa(i+1) + ":bench"
	}
	ids := func(i int) []string { return msgIDs[(i%benchBatches)*benchBatch:][:benchBatch] }
	batch := func(i int) []*nats.Msg { return msgs[(i%benchBatches)*benchBatch:][:benchBatch] }
	// One pass unmeasured, so the first op pays no one-time cost (scripts loaded, pools).
	for i := range benchBatches {
		pub, errs := off.Batch(ctx, ids(i), batch(i))
		docs := 0
		for _, m := range pub {
			if m.Subject == topology.SubjectDocs {
				docs++
			}
		}
		if err := errors.Join(errs...); err != nil || docs != benchBatch {
			b.Fatalf("warm-up batch %d: %d documents, %v", i, docs, err)
		}
	}
	// The rules stay in force: the offline parser loaded them once and does not poll.
	empty := func() {
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	empty()
	redisCPU := func() float64 {
		info, err := rdb.Info(ctx, "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		var sum float64
		for _, l := range strings.Split(info, "\r\n") {
			if k, v, _ := strings.Cut(l, ":"); k == "used_cpu_sys" || k == "used_cpu_user" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu %s: %v", l, err)
				}
				sum += f
			}
		}
		return sum
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, rcpu0 := cpuTime(b), redisCPU()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if i > 0 && i%benchBatches == 0 {
			b.StopTimer()
			empty()
			b.StartTimer()
		}
		if _, errs := off.Batch(ctx, ids(i), batch(i)); errors.Join(errs...) != nil {
			b.Fatal(errors.Join(errs...))
		}
		i++
	}
	b.StopTimer()
	cpu1 := cpuTime(b)
	runtime.ReadMemStats(&ms1)
	pages := float64(i * benchBatch)
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/pages, "cpu-µs/page")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/pages, "allocs/page")
	b.ReportMetric((redisCPU()-rcpu0)*1e6/pages, "redis-µs/page")
}
