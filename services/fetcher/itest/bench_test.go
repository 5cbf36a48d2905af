package itest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/robotscache"
	"github.com/trawl/trawl/shared/topology"
)

// Both webs make waves of 4000 tasks: the plain one few hosts with many pages, the wide
// one many hosts with few pages, so more hosts are in rotation than a small idle
// connection pool keeps.
var (
	plainWeb = benchWeb{hosts: 200, pages: 20}
	wideWeb  = benchWeb{hosts: 1000, pages: 4}
)

type benchWeb struct{ hosts, pages int }

// BenchmarkFetcherThroughput measures the fetcher alone: N in-process fetchers share the
// `fetcher` durable, the benchmark plays the scheduler (publishes FetchTasks, reads the
// outcomes through the scheduler-0-outcomes durable), and the synthetic web serves
// plainWeb. robots.txt is pre-warmed in Redis, so every task is one page request plus its
// page and outcome messages. Tasks go out host-interleaved (page 0 of every host, then
// page 1 …), so a host has at most a task or two in flight, as under the scheduler.
// One iteration is one wave of hosts × pages tasks; the figure is pages/s.
func BenchmarkFetcherThroughput(b *testing.B) { benchFetcher(b, plainWeb, []int{1, 2, 3}) }

// BenchmarkFetcherThroughputWide is the same on the wide web with one fetcher: each host
// is asked again only after every other host had a request.
func BenchmarkFetcherThroughputWide(b *testing.B) { benchFetcher(b, wideWeb, []int{1}) }

func benchFetcher(b *testing.B, bw benchWeb, fetchers []int) {
	st := newStack(b)
	st.env["TRAWL_LOG_LEVEL"] = "warn"
	st.env["TRAWL_FETCH_TIMEOUT"] = "10s"
	st.env["TRAWL_FETCH_CONCURRENCY"] = "64" // the default, not the small value of the tests
	web, err := synthweb.Start(context.Background(), synthweb.Config{Hosts: bw.hosts, PagesPerHost: bw.pages, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { web.Close() })
	hosts := web.Hosts()
	warmRobots(b, st, hosts)

	outs := make(chan crawlmsg.Outcome, 1024)
	cc, err := st.outCons.Consume(func(m jetstream.Msg) {
		batch, invalid, err := crawlmsg.DecodeOutcomes(m.Data())
		if err != nil || invalid > 0 {
			b.Errorf("bad outcome batch: %v (%d invalid)", err, invalid)
		}
		m.Ack()
		for _, o := range batch {
			outs <- o
		}
	}, jetstream.PullMaxMessages(512))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cc.Stop)

	for _, n := range fetchers {
		b.Run(fmt.Sprintf("fetchers=%d", n), func(b *testing.B) {
			quiet := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
			var ins []*instance
			// Every goroutine a fetcher starts inherits this label, its HTTP connections'
			// and NATS client's too, so a CPU profile of the benchmark
			// (-cpuprofile, then pprof -tagfocus=proc=fetcher) tells the fetchers' CPU
			// apart from the web server's, the embedded NATS server's and the harness's.
			pprof.Do(context.Background(), pprof.Labels("proc", "fetcher"), func(context.Context) {
				for range n {
					ins = append(ins, st.startLogged(st.config(nil), quiet))
				}
			})
			total := 0
			fetchedBefore, pagesBefore := st.streamState(topology.StreamFetched).LastSeq, st.streamState(topology.StreamPages).LastSeq
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				total += runWave(b, st, hosts, bw.pages, outs)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			for _, in := range ins {
				in.stop(b)
			}
			b.ReportMetric(float64(total)/elapsed.Seconds(), "pages/s")
			// Stored messages the fetcher wrote per page: each costs NATS a publish, a
			// pub-ack, a delivery and an ack.
			fetched, pages := st.streamState(topology.StreamFetched).LastSeq-fetchedBefore, st.streamState(topology.StreamPages).LastSeq-pagesBefore
			b.ReportMetric(float64(fetched)/float64(total), "outcome-msgs/page")
			b.ReportMetric(float64(fetched+pages)/float64(total), "stored-msgs/page")
			b.ReportMetric(float64(pages)/float64(total), "page-msgs/page")
			b.ReportMetric(0, "ns/op") // one op is a whole wave; pages/s is the figure
		})
	}
}

// warmRobots stores every host's robots.txt in the shared cache, as a first task per host
// would have.
func warmRobots(b *testing.B, st *stack, hosts []synthweb.HostInfo) {
	b.Helper()
	cfg := st.config(nil)
	store := robotscache.NewStore(st.rdb, robotscache.StoreOptions{Prefix: cfg.Common.RedisPrefix, Agent: cfg.RobotsAgent})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for _, h := range hosts {
		resp, err := http.Get(h.Origin + "/robots.txt")
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		e := robots.NewEntry(cfg.RobotsAgent, resp.StatusCode, body, robots.DefaultMaxBytes, time.Now())
		if err := store.Put(ctx, h.Origin, e); err != nil {
			b.Fatal(err)
		}
	}
}

// runWave publishes one task per (page, host) and waits for every outcome, which must be
// a fetched 200.
func runWave(b *testing.B, st *stack, hosts []synthweb.HostInfo, pages int, outs <-chan crawlmsg.Outcome) int {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want := map[string]bool{}
	var msgs []*nats.Msg
	for p := range pages {
		for _, h := range hosts {
			tk := task(fmt.Sprintf("%s/p/%d", h.Origin, p))
			tk.Deadline = time.Now().Add(time.Minute).UnixMilli()
			data, err := crawlmsg.Marshal(&tk)
			if err != nil {
				b.Fatal(err)
			}
			want[tk.Lease] = true
			msgs = append(msgs, natsx.NewMsg(topology.FetchSubject(0), topology.TaskID(tk.Lease), data))
		}
	}
	var published atomic.Int64
	go func() {
		// Publish in slices so fetching starts while the rest is still going out.
		for i := 0; i < len(msgs); i += 256 {
			if err := natsx.PublishBatch(ctx, st.js, msgs[i:min(i+256, len(msgs))]); err != nil {
				b.Error(err)
				cancel()
				return
			}
			published.Add(int64(min(256, len(msgs)-i)))
		}
	}()
	for left := len(want); left > 0; {
		select {
		case o := <-outs:
			if !want[o.Lease] {
				continue // a straggler of an earlier wave cannot exist, but stay robust
			}
			if o.Kind != crawlmsg.OutcomeFetched || o.Status != 200 {
				b.Fatalf("outcome %+v, want fetched 200", o)
			}
			delete(want, o.Lease)
			left--
		case <-ctx.Done():
			b.Fatalf("wave: %d of %d outcomes missing (published %d)", left, len(msgs), published.Load())
		}
	}
	return len(msgs)
}
