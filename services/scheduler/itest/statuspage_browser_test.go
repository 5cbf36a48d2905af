package itest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/trawl/trawl/devstack/chromiumproc"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// startBrowser starts headless chromium with a fresh profile and returns a tab.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	tab, _ := chromiumproc.Start(t, context.Background(),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	return tab
}

// js evaluates expr in the tab within 30s.
func js[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS polls the predicate in the page until it is true.
func waitJS(t *testing.T, tab context.Context, what, predicate string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](predicate,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second))); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, predicate, err)
	}
}

// The whole scheduler runs against embedded NATS and a real Redis; a fake fetcher answers
// with known outcomes; the status page is then opened in headless chromium and must show
// the numbers the frontier recorded, render hostile text as text, and paint the totals.
func TestStatusPageInChromium(t *testing.T) {
	t.Parallel()
	tab := startBrowser(t)
	s := startStack(t, redisproc.Options{}, map[string]string{
		"TRAWL_MAX_RETRIES":   "1",
		"TRAWL_RETRY_BACKOFF": "10ms",
		"TRAWL_MAX_BACKOFF":   "50ms",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.runFetcher(ctx, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		o := fetched200(tk)
		switch tk.Host {
		case "busy.example":
			o.DurationMs, o.Addr = 15, "192.0.2.20"
		case "slow.example":
			o.DurationMs, o.Addr = 700, "192.0.2.21"
		case "flaky.example":
			o.Status, o.DurationMs = 503, 40
		case "evil.example":
			o.Kind, o.Status, o.Permanent, o.Error = crawlmsg.OutcomeError, 0, true, xss
		default:
			o.DurationMs = 5
		}
		return o
	})

	// 30 URLs: 27 end fetched; flaky's 2 and evil's 1 end failed (5 error lines).
	var batch crawlmsg.FrontierBatch
	add := func(host string, n int) {
		for i := range n {
			batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://%s/page%d", host, i), Depth: i % 3})
		}
	}
	add("busy.example", 12)
	add("slow.example", 3)
	add("flaky.example", 2)
	for h := range 6 {
		add(fmt.Sprintf("h%d.example", h), 2)
	}
	batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: "http://evil.example/%3Cscript%3Ealert(1)%3C/script%3E"})
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 60*time.Second, "crawl finished", func() bool {
		st := s.stats()
		return st.Fetched == 27 && st.Failed == 3 && st.Queued == 0 && st.InFlight == 0
	})

	// busy.example's server address has a request in flight (another host's, under
	// per-server politeness); slow.example's has no state.
	if err := s.rdb.HSet(context.Background(), politeness.ServerKey(s.cfg.Common.RedisPrefix, netip.MustParseAddr("192.0.2.20")),
		"until", time.Now().Add(time.Hour).UnixMilli(), "tok", "t", "host", "other.example").Err(); err != nil {
		t.Fatal(err)
	}
	url := "http://" + s.cfg.Common.HTTPAddr + "/status"
	nctx, ncancel := context.WithTimeout(tab, 30*time.Second)
	defer ncancel()
	if err := chromedp.Do(nctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigate %s: %v", url, err)
	}
	waitJS(t, tab, "#fetched to show 27", `document.getElementById('fetched').textContent === '27'`)
	// Two samples a second apart are needed for a rate.
	waitJS(t, tab, "a rate", `/^[0-9.,]+$/.test(document.getElementById('rate').textContent)`)

	t.Run("numbers", func(t *testing.T) {
		got := js[map[string]string](t, tab, `(() => {
			const o = {};
			for (const id of ['fetched', 'failed', 'accepted', 'queued', 'inflight', 'active-hosts', 'disallowed', 'paused', 'state'])
				o[id] = document.getElementById(id).textContent;
			return o;
		})()`)
		want := map[string]string{"fetched": "27", "failed": "3", "accepted": "30", "queued": "0", "inflight": "0",
			"active-hosts": "0", "disallowed": "0", "paused": "no", "state": "live"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("#%s shows %q, want %q", k, got[k], v)
			}
		}
	})
	rows := func(table string) [][]string {
		return js[[][]string](t, tab, `Array.from(document.querySelectorAll('#`+table+` tbody tr')).map(
			tr => Array.from(tr.cells).map(td => td.textContent))`)
	}
	t.Run("tables", func(t *testing.T) {
		busiest := rows("busiest")
		if len(busiest) != 8 || strings.Join(busiest[0], "|") != "busy.example|12|15|0|192.0.2.20 busy" || busiest[1][0] != "slow.example" {
			t.Errorf("busiest rows %q", busiest)
		}
		slowest := rows("slowest")
		if len(slowest) < 3 || strings.Join(slowest[0], "|") != "slow.example|700|700|3|192.0.2.21" || strings.Join(slowest[1], "|") != "flaky.example|40|40|0|–" {
			t.Errorf("slowest rows %q", slowest)
		}
		prio := rows("priorities")
		if len(prio) != s.cfg.FrontQueues || strings.Join(prio[0][:2], "|") != "0|0" {
			t.Errorf("priority rows %q", prio)
		}
		shards := rows("shards")
		if len(shards) != 1 || strings.Join(shards[0][:6], "|") != "0 ●|30|0|0|27|3" || shards[0][7] != "running" {
			t.Errorf("shard rows %q", shards)
		}
	})
	t.Run("errors render as text", func(t *testing.T) {
		errs := rows("errors")
		var flaky []string
		for _, r := range errs {
			if r[4] == "flaky.example" {
				flaky = append(flaky, r[1]+" "+r[3]+" "+r[5])
			}
		}
		// Newest first: each URL's final failure above its retry. Which URL failed first
		// depends on the fake fetcher's timing, so across URLs only the set is fixed.
		got := slices.Clone(flaky)
		slices.Sort(got)
		want := []string{"failed 503 http://flaky.example/page0", "failed 503 http://flaky.example/page1",
			"retry 503 http://flaky.example/page0", "retry 503 http://flaky.example/page1"}
		if len(errs) != 5 || !slices.Equal(got, want) {
			t.Fatalf("error rows %q", errs)
		}
		for _, page := range []string{"page0", "page1"} {
			failed := slices.Index(flaky, "failed 503 http://flaky.example/"+page)
			retry := slices.Index(flaky, "retry 503 http://flaky.example/"+page)
			if failed > retry {
				t.Errorf("%s: retry listed above the later failure: %q", page, flaky)
			}
		}
		var evil []string
		for _, r := range errs {
			if r[4] == "evil.example" {
				evil = r
			}
		}
		if evil == nil || evil[1] != "failed" || evil[2] != "error" || evil[6] != xss ||
			evil[5] != "http://evil.example/%3Cscript%3Ealert(1)%3C/script%3E" {
			t.Fatalf("evil row %q", evil)
		}
		injected := js[int](t, tab, `document.querySelectorAll('#errors img, #errors script, img').length`)
		title := js[string](t, tab, `document.title`)
		if injected != 0 || title != "Trawl — crawl status" {
			t.Fatalf("markup from the crawl was interpreted: %d elements injected, title %q", injected, title)
		}
	})

	t.Run("site policies", func(t *testing.T) {
		// 250 rules in force after the crawl, three with counters on both shards' hashes as
		// the frontier's scripts keep them (one shard here: the hash of shard 0, and a
		// rule removed since whose counters stay behind).
		ctx := testwait.Context(t)
		var changes []policy.Change
		for i := range 250 {
			// A rule must set something: max depth 0, the same for every rule.
			sc, err := policy.ParseScope(fmt.Sprintf("host:r%03d.example", i))
			if err != nil {
				t.Fatal(err)
			}
			changes = append(changes, policy.Change{Rule: policy.Rule{Scope: sc, MaxDepth: new(int)}})
		}
		if _, _, err := policy.NewStore(s.rdb, s.cfg.Common.RedisPrefix).Apply(ctx, changes, "test", 0); err != nil {
			t.Fatal(err)
		}
		st := frontierkeys.ForShard(s.cfg.Common.RedisPrefix, 0, s.cfg.Common.Shards).PolicyStats()
		field := func(scope, counter string) string { return scope + "\t" + counter }
		if err := s.rdb.HSet(ctx, st,
			field("host:r100.example", frontierkeys.PolicyStatParked), 7, field("host:r100.example", frontierkeys.PolicyStatBlocked), 7, field("host:r100.example", frontierkeys.PolicyStatHosts), 1,
			field("host:r007.example", frontierkeys.PolicyStatRequests), 40, field("host:r007.example", frontierkeys.PolicyStatHosts), 1,
			field("host:r200.example", frontierkeys.PolicyStatExcluded), 3,
			field("host:removed.example", frontierkeys.PolicyStatRequests), 999).Err(); err != nil {
			t.Fatal(err)
		}
		// The counters are read at most every 5 s.
		waitJS(t, tab, "the rules to be listed, the parking one first", `document.querySelectorAll('#rules tbody tr').length === 20 &&
			document.querySelector('#rules tbody tr td').textContent === 'host:r100.example'`)
		got := rows("rules")
		want := [][]string{
			{"host:r100.example", "1", "0", "7", "7", "0"},
			{"host:r007.example", "1", "40", "0", "0", "0"},
			{"host:r200.example", "0", "0", "0", "0", "3"},
			{"host:r000.example", "0", "0", "0", "0", "0"},
		}
		for i, w := range want {
			if strings.Join(got[i], "|") != strings.Join(w, "|") {
				t.Errorf("rule row %d = %q, want %q", i, got[i], w)
			}
		}
		if sub := js[string](t, tab, `document.getElementById('rules-sub').textContent`); !strings.HasPrefix(sub, "250 rules in force (version 1), the 20 most active shown") {
			t.Errorf("rules heading %q", sub)
		}
		if n := js[int](t, tab, `document.querySelectorAll('#rules tr.failed').length`); n != 1 {
			t.Errorf("%d rules marked as parking URLs, want 1", n)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		sctx, scancel := context.WithTimeout(tab, 30*time.Second)
		defer scancel()
		shot, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "status.png")
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		if dir := os.Getenv("TRAWL_TEST_SCREENSHOT_DIR"); dir != "" {
			// To look at it: the temporary directory goes with the test.
			if err := os.WriteFile(filepath.Join(dir, "status.png"), shot, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("screenshot: %s (%d bytes)", path, len(shot))
		img, err := png.Decode(bytes.NewReader(shot))
		if err != nil {
			t.Fatalf("screenshot is not a PNG: %v", err)
		}
		box := func(id string) image.Rectangle {
			r := js[[]float64](t, tab, `(() => { const r = document.getElementById('`+id+`').getBoundingClientRect();
				const d = window.devicePixelRatio; return [r.left * d, (r.top + window.scrollY) * d, r.right * d, (r.bottom + window.scrollY) * d]; })()`)
			return image.Rect(int(r[0]), int(r[1]), int(r[2]), int(r[3])).Intersect(img.Bounds())
		}
		totals := box("totals")
		colors, inked, _ := ink(img, totals)
		t.Logf("totals %v: %d colours, %.1f%% not background", totals, colors, 100*inked)
		if totals.Dx() < 400 || totals.Dy() < 100 || colors < 20 || inked < 0.02 {
			t.Errorf("the totals region %v looks blank: %d colours, %.2f%% not background", totals, colors, 100*inked)
		}
		// The fetched count is painted: dark glyph pixels inside its box. A dash or an
		// empty box has a small fraction of what "27" at this size needs.
		fetched := box("fetched")
		_, _, dark := ink(img, fetched)
		t.Logf("#fetched %v: %d dark pixels", fetched, dark)
		if dark < 150 {
			t.Errorf("#fetched box %v has %d dark pixels: the number is not painted", fetched, dark)
		}
	})

	t.Run("Redis down is shown, numbers kept", func(t *testing.T) {
		if err := s.redis.Stop(); err != nil {
			t.Fatal(err)
		}
		waitJS(t, tab, "the page to say Redis is unavailable", `document.getElementById('state').textContent === 'Redis unavailable'`)
		if got := js[string](t, tab, `document.getElementById('fetched').textContent + ' ' + document.body.className`); got != "27 stale" {
			t.Fatalf("during the outage: %q, want the last numbers, dimmed", got)
		}
		if why := js[string](t, tab, `document.getElementById('state').title`); !strings.HasPrefix(why, "the frontier cannot be read: shard 0: ") {
			t.Errorf("the state's title %q, want why the frontier cannot be read", why)
		}
		if n := s.metric("trawl_scheduler_redis_errors_total", map[string]string{"shard": "0", "step": "status"}); n == 0 {
			t.Error("failed status reads not counted in trawl_scheduler_redis_errors_total{step=\"status\"}")
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer rcancel()
		if err := s.redis.Restart(rctx); err != nil {
			t.Fatal(err)
		}
		waitJS(t, tab, "the page to come back", `document.getElementById('state').textContent === 'live'`)
	})
}

// ink measures a region of img: how many distinct colours it has, the fraction of pixels
// that differ from its most common colour (the background), and how many are dark
// (text-like: luminance below half).
func ink(img image.Image, r image.Rectangle) (colors int, inked float64, dark int) {
	count := map[color.RGBA]int{}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			count[c]++
			if 299*int(c.R)+587*int(c.G)+114*int(c.B) < 128*1000 {
				dark++
			}
		}
	}
	bg, total := 0, 0
	for _, n := range count {
		bg = max(bg, n)
		total += n
	}
	if total == 0 {
		return 0, 0, 0
	}
	return len(count), float64(total-bg) / float64(total), dark
}
