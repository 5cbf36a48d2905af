package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

// Site rules refuse URLs at the frontier's admission: a host's page budget spent, a seed
// a rule excludes. trawlctl report lists each refused URL in skipped-report.txt with its
// reason and Heritrix's code, as it lists the robots-disallowed ones — over budget both
// the ones refused at admission and the ones still queued when the budget ran out — and
// judged from the web's own log, none of them was requested.
func TestSkippedReportRefusals(t *testing.T) {
	t.Parallel()
	const hostBudget = 4
	env := crawlEnv{MinDelay: 100 * time.Millisecond, DelayFactor: 0, MaxDepth: 5, MaxRetries: 2}
	wcfg := synthweb.DefaultConfig()
	wcfg.Special = false
	wcfg.Hosts, wcfg.PagesPerHost = 3, 12
	wcfg.BaseIP = "127.0.37.1"
	dir := filepath.Join(t.TempDir(), "warc")
	var hosts []synthweb.HostInfo
	pc := startPolicyCrawl(t, wcfg, env, stack.Options{Env: map[string]string{"TRAWL_ARCHIVE_DIR": dir}},
		func(web *synthweb.Web) []policy.Change {
			hosts = web.Hosts()
			return []policy.Change{
				hostRule(hosts[1].Name, policy.Rule{HostBudget: ptr[int64](hostBudget)}),
				// The host's home page, its seed: refused when seeded.
				hostRule(hosts[2].Name, policy.Rule{Exclude: []string{"^" + regexp.QuoteMeta(hosts[2].Origin) + "/$"}}),
			}
		})
	pc.wait(t)
	sealArchive(t, pc.st)
	reqs := pc.web.Requests()
	counts, listed := runSkippedReport(t, pc.st, pc.redis.URL(), dir)
	checkSkippedReport(t, pc.web, env, reqs, counts, listed, func(u string) bool {
		return !strings.HasPrefix(u, hosts[0].Origin+"/")
	})

	seed := hosts[2].Origin + "/"
	if l := listed[seed]; l.reason != crawlmsg.ReasonOutOfScope || l.code != -5000 {
		t.Errorf("the excluded seed %s listed as %+v, want %s -5000", seed, l, crawlmsg.ReasonOutOfScope)
	}
	over := 0
	for u, l := range listed {
		if l.reason != crawlmsg.ReasonOverBudget {
			continue
		}
		over++
		if !strings.HasPrefix(u, hosts[1].Origin+"/") || l.code != -5003 {
			t.Errorf("%s listed as %+v: only the budgeted host %s is over budget (code -5003)", u, l, hosts[1].Name)
		}
	}
	if n := len(pagesOf(reqs, hosts[1].Name)); n != hostBudget {
		t.Errorf("host %s (host budget %d): %d pages requested", hosts[1].Name, hostBudget, n)
	}
	// Every URL counted over budget is listed, the ones refused at admission and the ones
	// still queued when the budget ran out alike.
	if over == 0 || over != counts[crawlmsg.ReasonOverBudget] {
		t.Errorf("%d over-budget URLs listed, %d counted: want every counted one listed", over, counts[crawlmsg.ReasonOverBudget])
	}
	// Judged from the web's log: each link of the budgeted host that a page it served
	// names, and that the web never served, is listed (over budget, unless robots.txt or
	// the depth limit refused it first).
	served := map[string]bool{}
	for _, q := range reqs {
		served[pc.web.Origin(q.Host)+q.Path] = true
	}
	unlisted := map[string]bool{}
	for _, d := range pc.web.Walk(env.MaxDepth) {
		if !served[d.URL] || !strings.HasPrefix(d.URL, hosts[1].Origin+"/") {
			continue
		}
		for _, u := range d.Links {
			if !strings.HasPrefix(u, hosts[1].Origin+"/") || served[u] {
				continue
			}
			if _, ok := listed[u]; !ok && !unlisted[u] {
				unlisted[u] = true
				t.Errorf("%s, linked from served %s of the budgeted host and never requested, is not listed", u, d.URL)
			}
		}
	}
	t.Logf("listed: %d URLs, %d over budget; counted %v", len(listed), over, counts)
}

// skippedLine is one URL line of skipped-report.txt.
type skippedLine struct {
	reason string
	code   int
	detail string
}

// runSkippedReport runs trawlctl report -dir on a settled crawl and reads
// skipped-report.txt: the counts by reason and the listed URLs.
func runSkippedReport(t *testing.T, st *stack.Stack, redisURL, dir string) (map[string]int, map[string]skippedLine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testwait.Context(t), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "trawlctl"), "report", "-dir", dir)
	cmd.Env = append(os.Environ(), "TRAWL_REDIS_URL="+redisURL, "TRAWL_NATS_URL="+st.NATSURL())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trawlctl report: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "skipped-report.txt"))
	if err != nil {
		t.Fatalf("report not written beside the WARC files: %v", err)
	}
	return parseSkippedReport(t, string(b))
}

// parseSkippedReport reads skipped-report.txt: "[#urls] [reason]" lines, a blank line,
// then "[reason] [code] [url] [detail]" lines.
func parseSkippedReport(t *testing.T, body string) (map[string]int, map[string]skippedLine) {
	t.Helper()
	head, list, ok := strings.Cut(body, "\n\n")
	if !ok {
		t.Fatalf("skipped-report.txt has no URL list:\n%s", body)
	}
	counts := map[string]int{}
	for _, l := range strings.Split(head, "\n")[1:] {
		f := strings.Fields(l)
		n, err := strconv.Atoi(f[0])
		if err != nil || len(f) != 2 {
			t.Fatalf("skipped-report.txt count line %q", l)
		}
		counts[f[1]] = n
	}
	listed := map[string]skippedLine{}
	for _, l := range strings.Split(strings.TrimSuffix(list, "\n"), "\n")[1:] {
		f := strings.SplitN(l, " ", 4)
		code, err := strconv.Atoi(f[1])
		if err != nil || len(f) != 4 {
			t.Fatalf("skipped-report.txt URL line %q", l)
		}
		if _, twice := listed[f[2]]; twice {
			t.Errorf("%s listed twice", f[2])
		}
		listed[f[2]] = skippedLine{reason: f[0], code: code, detail: f[3]}
	}
	return counts, listed
}

// checkSkippedReport holds skipped-report.txt to the web's own log: no URL listed for a
// reason that made no request (robots, scope, depth, budget) was requested; the lists of
// robots-disallowed and out-of-scope URLs are as long as their counts; and every link a
// requested page has that robots.txt forbids is listed as robots-disallowed, except on
// the hosts other says a site rule governs (there a budget may refuse it first).
func checkSkippedReport(t *testing.T, web *synthweb.Web, env crawlEnv, reqs []synthweb.Request, counts map[string]int, listed map[string]skippedLine, other func(u string) bool) {
	t.Helper()
	requested := map[string]bool{}
	for _, q := range reqs {
		if q.Path != "/robots.txt" {
			requested[web.Origin(q.Host)+q.Path] = true
		}
	}
	n := map[string]int{}
	for u, l := range listed {
		n[l.reason]++
		if !strings.HasPrefix(l.reason, "failed") && requested[u] {
			t.Errorf("%s listed %s (%d) but the web served it", u, l.reason, l.code)
		}
		if l.reason == crawlmsg.ReasonDisallowed && l.code != -9998 {
			t.Errorf("%s listed robots-disallowed with code %d, want -9998", u, l.code)
		}
	}
	if n[crawlmsg.ReasonDisallowed] != counts[crawlmsg.ReasonDisallowed] {
		t.Errorf("%d robots-disallowed URLs listed, %d counted", n[crawlmsg.ReasonDisallowed], counts[crawlmsg.ReasonDisallowed])
	}
	if got := n[crawlmsg.ReasonOutOfScope] + n[crawlmsg.ReasonTooDeep]; got != counts[crawlmsg.ReasonOutOfScope] {
		t.Errorf("%d out-of-scope and too-deep URLs listed, %d counted out of scope", got, counts[crawlmsg.ReasonOutOfScope])
	}
	forbidden := web.Expected(env.MaxDepth).Forbidden
	seen := map[string]bool{}
	for _, d := range web.Walk(env.MaxDepth) {
		if !requested[d.URL] {
			continue
		}
		for _, u := range d.Links {
			// Forbidden holds links as the crawler takes them (session ids stripped).
			if seen[u] || other(u) || !forbidden[u] || !web.RobotsDisallowed(u) {
				continue
			}
			seen[u] = true
			if l := listed[u]; l.reason != crawlmsg.ReasonDisallowed {
				t.Errorf("%s, which robots.txt forbids, listed as %+v", u, l)
			}
		}
	}
	if len(seen) == 0 {
		t.Error("no requested page links to a page its robots.txt disallows")
	}
	t.Logf("%d robots-disallowed links of requested pages listed", len(seen))
}
