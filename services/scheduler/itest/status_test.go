package itest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/statuspage"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
)

const xss = `<img src=x onerror="document.title='pwned'">`

// statusScenario is a small crawl with known answers, played on f with the test clock:
//
//	busy.example  5 URLs, 200 in 10 ms each
//	slow.example  2 URLs, 200 in 900 ms then 500 ms (moving average 800, last 500)
//	bad.example   2 URLs, 503 in 50 ms every time (retried once, then failed)
//	evil.example  1 URL with markup in its path, a permanent error with markup in its text
//
// It returns the time of the last step. Fetched 7, failed 3; the error log holds
// 5 lines: retry and failed for each bad URL, failed for evil.
func statusScenario(t *testing.T, f *tf) time.Time {
	t.Helper()
	var us []crawlmsg.Discovered
	for i := range 5 {
		us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://busy.example/%d", i)})
	}
	us = append(us, urls(0, "http://slow.example/1", "http://slow.example/2",
		"http://bad.example/1", "http://bad.example/2", "http://evil.example/%3Cscript%3E")...)
	f.add("m1", us...)
	slow := []int64{900, 500}
	now := t0
	for round := 0; round < 20; round++ {
		now = now.Add(10 * time.Minute)
		tasks := f.dispatch(now, 100)
		if len(tasks) == 0 {
			break
		}
		outs := make([]crawlmsg.Outcome, 0, len(tasks))
		for _, tk := range tasks {
			o := ok200(tk)
			switch tk.Host {
			case "busy.example":
				o.DurationMs = 10
			case "slow.example":
				o.DurationMs, slow = slow[0], slow[1:]
			case "bad.example":
				o.Status, o.DurationMs = 503, 50
			case "evil.example":
				o = outcome(tk, crawlmsg.OutcomeError, 0)
				o.Permanent, o.Error = true, xss+"\tand a tab\nand a newline"
			}
			outs = append(outs, o)
		}
		f.complete(now, outs...)
		// A duplicate of an applied outcome is stale: not counted, not logged.
		f.complete(now, outs[0])
	}
	return now
}

func TestStatusRecordsWhatCompleteDid(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.MaxRetries = 1
	o.RetryBackoff = time.Second
	o.MaxBackoff = time.Minute
	f := newTF(t, rdb, o)
	now := statusScenario(t, f)
	ctx := testwait.Context(t)

	st, err := f.Status(ctx, now, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	if st.Fetched != 7 || st.Failed != 3 || st.Queued != 0 || st.InFlight != 0 || st.Accepted != 10 {
		t.Fatalf("stats %+v", st.ShardStatus)
	}
	hosts := func(l []frontier.HostActivity) string {
		var s []string
		for _, a := range l {
			s = append(s, fmt.Sprintf("%s:%d/%d/%d", a.Host, a.Fetched, a.AvgMs, a.LastMs))
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct{ name, got, want string }{
		// host:fetched/avg/last. Only URLs that ended fetched count as pages.
		{"busiest", hosts(st.Busiest), "busy.example:5/10/10 slow.example:2/800/500"},
		{"slowest", hosts(st.Slowest), "slow.example:2/800/500 bad.example:0/50/50 busy.example:5/10/10 evil.example:0/0/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("\n got %s\nwant %s", tc.got, tc.want)
			}
		})
	}
	t.Run("host state", func(t *testing.T) {
		for field, want := range map[string]string{"fetched": "2", "rt": "500", "rtavg": "800"} {
			if got := f.hostField("slow.example", field); got != want {
				t.Errorf("host:slow.example %s = %q, want %q", field, got, want)
			}
		}
	})
	t.Run("errors", func(t *testing.T) {
		var lines []string
		for _, e := range st.Errors {
			lines = append(lines, fmt.Sprintf("%s %s %d %s %s", e.Result, e.Kind, e.Status, e.Host, e.URL))
			if e.At.After(now) || e.At.Before(t0) {
				t.Errorf("error time %v outside the scenario", e.At)
			}
		}
		// Newest first. One URL of a host is out at a time, so bad.example's second URL
		// starts after its first has failed; round 1 logged bad/1's retry, then evil.
		want := []string{
			"failed fetched 503 bad.example http://bad.example/2",
			"retry fetched 503 bad.example http://bad.example/2",
			"failed fetched 503 bad.example http://bad.example/1",
			"failed error 0 evil.example http://evil.example/%3Cscript%3E",
			"retry fetched 503 bad.example http://bad.example/1",
		}
		if got := strings.Join(lines, "\n"); got != strings.Join(want, "\n") {
			t.Fatalf("error log:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
		}
		// The text is kept as sent, markup included (the page renders it as text); only
		// the separators are blanked.
		if e := st.Errors[3]; e.Error != xss+" and a tab and a newline" {
			t.Fatalf("evil error text %q", e.Error)
		}
	})

	t.Run("status.json", func(t *testing.T) {
		page := statuspage.New([]statuspage.Shard{{ID: 0, Served: true, Source: f.Frontier}}, statuspage.Options{Now: func() time.Time { return now }})
		mux := http.NewServeMux()
		page.Register(mux)
		srv := httptest.NewServer(mux)
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/status.json?top=3&errors=2")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rep statuspage.Report
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
			t.Fatal(err)
		}
		tot := rep.Total
		if resp.StatusCode != 200 || tot.Terminal.Fetched != 7 || tot.Terminal.Failed != 3 || tot.Accepted != 10 ||
			tot.Queued != 0 || tot.Dispatched != st.Dispatched || len(tot.Frontier) != o.FrontQueues {
			t.Fatalf("status %d, total %+v", resp.StatusCode, tot)
		}
		if len(rep.Busiest) != 2 || rep.Busiest[0].Host != "busy.example" || rep.Busiest[0].Fetched != 5 || rep.Busiest[0].AvgMs != 10 {
			t.Errorf("busiest %+v", rep.Busiest)
		}
		if len(rep.Slowest) != 3 || rep.Slowest[0].Host != "slow.example" || rep.Slowest[0].AvgMs != 800 || rep.Slowest[0].LastMs != 500 {
			t.Errorf("slowest %+v", rep.Slowest)
		}
		if len(rep.Errors) != 2 || rep.Errors[0].Result != "failed" || rep.Errors[0].Status != 503 || rep.Errors[0].Shard != 0 {
			t.Errorf("errors %+v", rep.Errors)
		}
		if len(rep.Shards) != 1 || !rep.Shards[0].Served || rep.Shards[0].Terminal.Fetched != 7 {
			t.Errorf("shards %+v", rep.Shards)
		}
	})
}

func TestStatusViewsStayBounded(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.TopHosts = 5
	o.RecentErrors = 7
	// Each refused connection ends its URL at once, and counts once toward retirement.
	o.MaxRetries = 0
	o.RetryBackoff, o.MaxBackoff = time.Second, time.Second
	f := newTF(t, rdb, o)
	ctx := testwait.Context(t)
	ks := f.Keyspace()

	// Host i has i+1 URLs answered in i×10 ms; err.example has 12 URLs whose connections
	// are refused.
	var us []crawlmsg.Discovered
	for i := range 12 {
		for j := range i + 1 {
			us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://h%02d.example/%d", i, j)})
		}
		us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://err.example/%d", i)})
	}
	f.add("m1", us...)
	now := t0
	for round := 0; ; round++ {
		now = now.Add(time.Minute)
		tasks := f.dispatch(now, 100)
		if len(tasks) == 0 {
			break
		}
		var outs []crawlmsg.Outcome
		for _, tk := range tasks {
			o := ok200(tk)
			if tk.Host == "err.example" {
				o = outcome(tk, crawlmsg.OutcomeError, 0)
				o.Error = "connection refused"
			} else {
				n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(tk.Host, "h"), ".example"))
				o.DurationMs = int64(n * 10)
			}
			outs = append(outs, o)
		}
		f.complete(now, outs...)
		for _, k := range []string{"busiest", "slowest"} {
			if n := rdb.ZCard(ctx, ks.Key(k)).Val(); n > 5 {
				t.Fatalf("round %d: %s holds %d hosts, want at most 5", round, k, n)
			}
		}
		if n := rdb.LLen(ctx, ks.Key("errors")).Val(); n > 7 {
			t.Fatalf("round %d: errors holds %d lines, want at most 7", round, n)
		}
	}
	st, err := f.Status(ctx, now, 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	if st.Fetched != 78 || st.Failed != 12 {
		t.Fatalf("stats %+v", st.ShardStatus)
	}
	var busiest, slowest []string
	for _, a := range st.Busiest {
		busiest = append(busiest, fmt.Sprintf("%s:%d", a.Host, a.Fetched))
	}
	for _, a := range st.Slowest {
		slowest = append(slowest, fmt.Sprintf("%s:%d", a.Host, a.AvgMs))
	}
	if got, want := strings.Join(busiest, " "), "h11.example:12 h10.example:11 h09.example:10 h08.example:9 h07.example:8"; got != want {
		t.Errorf("busiest %s, want %s", got, want)
	}
	if got, want := strings.Join(slowest, " "), "h11.example:110 h10.example:100 h09.example:90 h08.example:80 h07.example:70"; got != want {
		t.Errorf("slowest %s, want %s", got, want)
	}
	// err.example is retired by its 8th failure (TRAWL_RETIRE_AFTER): that line says so,
	// and its last 4 URLs fail with it, unlogged.
	if len(st.Errors) != 7 || st.Errors[0].URL != "http://err.example/7" || st.Errors[0].Result != "retired" ||
		st.Errors[1].Result != "failed" || st.Errors[6].URL != "http://err.example/1" {
		t.Errorf("errors %+v, want the last 7 newest first", st.Errors)
	}

	// A host trimmed from busiest comes back with its whole count, not from one.
	f.add("m2", urls(0, "http://h00.example/a", "http://h00.example/b", "http://h00.example/c",
		"http://h00.example/d", "http://h00.example/e", "http://h00.example/f", "http://h00.example/g",
		"http://h00.example/h", "http://h00.example/i", "http://h00.example/j", "http://h00.example/k",
		"http://h00.example/l")...)
	for range 12 {
		now = now.Add(time.Minute)
		tasks := f.dispatch(now, 100)
		if len(tasks) != 1 {
			t.Fatalf("dispatched %d", len(tasks))
		}
		f.complete(now, ok200(tasks[0]))
	}
	if s := rdb.ZScore(ctx, ks.Key("busiest"), "h00.example").Val(); s != 13 {
		t.Fatalf("h00.example back in busiest with %v pages, want 13", s)
	}
	if n := rdb.ZCard(ctx, ks.Key("busiest")).Val(); n != 5 {
		t.Fatalf("busiest holds %d", n)
	}
}

func TestStatusLogsExpiredLeases(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.MaxRetries = 1
	f := newTF(t, rdb, o)
	f.add("m1", urls(0, "http://gone.example/x")...)
	tasks := f.dispatch(t0, 10)
	if len(tasks) != 1 {
		t.Fatalf("dispatched %d", len(tasks))
	}
	if n := f.reap(t0.Add(o.LeaseTTL + time.Second)); n != 1 {
		t.Fatalf("reaped %d", n)
	}
	tasks = f.dispatch(t0.Add(time.Hour), 10)
	if n := f.reap(t0.Add(time.Hour + o.LeaseTTL + time.Second)); n != 1 || len(tasks) != 1 {
		t.Fatalf("reaped %d of %d", n, len(tasks))
	}
	st, err := f.Status(testwait.Context(t), t0.Add(2*time.Hour), 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Errors) != 2 {
		t.Fatalf("errors %+v", st.Errors)
	}
	for i, want := range []string{"failed", "retry"} {
		e := st.Errors[i]
		if e.Result != want || e.Kind != "lease-expired" || e.Host != "gone.example" || e.URL != "http://gone.example/x" || e.Error == "" {
			t.Errorf("line %d: %+v, want result %s", i, e, want)
		}
	}
	if st.Failed != 1 || st.Expired != 2 {
		t.Fatalf("stats %+v", st.ShardStatus)
	}
}
