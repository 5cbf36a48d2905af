package e2e

import (
	"context"
	"crypto/sha1"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/warccheck"
	"github.com/trawl/trawl/shared/testwait"
)

// TestArchiveDedupAndReports crawls the synthetic web with the archiver. The duplicates
// host serves some pages byte for byte under several URLs: of each such group exactly one
// capture is a response and the others are identical-payload revisits that resolve to it,
// and the bytes saved are the copies' sizes. Then trawlctl report -dir writes Heritrix's
// reports beside the WARC files, and each is held to the web's own request log.
func TestArchiveDedupAndReports(t *testing.T) {
	t.Parallel()
	env := testEnv()
	dir := filepath.Join(t.TempDir(), "warc")
	r := crawl(t, testWeb(), env, stack.Options{Env: map[string]string{"TRAWL_ARCHIVE_DIR": dir}}, nil)
	checkInvariants(t, r, env, 0)
	sealArchive(t, r.stack)

	a, err := warccheck.Check(dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	caps := map[string][]*warccheck.Record{}
	for _, c := range a.Captures() {
		caps[c.Get("WARC-Target-URI")] = append(caps[c.Get("WARC-Target-URI")], c)
	}
	// The web is deterministic: asked again, it serves the same octets. Every URL it
	// answered once with a 200 and a body is grouped by that body's digest; the
	// duplicates host serves some pages byte for byte under several URLs, and other
	// hosts may too (a file under two names).
	answers := map[string][]int{}
	for _, q := range r.reqs {
		if q.Path != "/robots.txt" && q.Status != 0 {
			u := r.web.Origin(q.Host) + q.Path
			answers[u] = append(answers[u], q.Status)
		}
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	groups := map[[20]byte][]string{}
	size := map[string]int{}
	for u, sts := range answers {
		if len(sts) != 1 || sts[0] != http.StatusOK || strings.HasPrefix(u, "urn:") {
			continue
		}
		body, st, err := get(client, u)
		if err != nil || st != http.StatusOK || len(body) == 0 {
			continue
		}
		d := sha1.Sum(body)
		groups[d] = append(groups[d], u)
		size[u] = len(body)
	}
	var wantSaved int64
	revisits, copies := 0, 0
	for _, urls := range groups {
		var full []string
		for _, u := range urls {
			cs := caps[u]
			if len(cs) != 1 {
				t.Errorf("%s: %d captures, want one", u, len(cs))
				continue
			}
			switch cs[0].Get("WARC-Type") {
			case "response":
				full = append(full, u)
			case "revisit":
				wantSaved += int64(size[u])
				revisits++
				if ref := cs[0].Get("WARC-Refers-To-Target-URI"); !contains(urls, ref) {
					t.Errorf("%s: revisit of %s, which serves another payload (group %v)", u, ref, urls)
				}
			}
		}
		if len(full) != 1 {
			t.Errorf("URLs serving one payload %v: %d responses %v, want one and revisits for the rest", urls, len(full), full)
		}
		if len(urls) > 1 {
			copies++
		}
	}
	exact := 0
	for u := range r.web.Duplicates() {
		if _, ok := r.web.NearDuplicates()[u]; !ok {
			exact++
		}
	}
	if exact == 0 || revisits < exact {
		t.Errorf("%d revisits, want at least one per exact copy the duplicates host serves (%d)", revisits, exact)
	}
	resolved, err := warccheck.ResolveRevisits(a)
	if err != nil || resolved != revisits {
		t.Errorf("replay resolution: %d of %d revisits resolved:\n%v", resolved, revisits, err)
	}
	t.Logf("%d payloads served under several URLs, %d revisits resolved, %d payload octets saved", copies, resolved, wantSaved)

	seeds := filepath.Join(t.TempDir(), "seeds.txt")
	if err := os.WriteFile(seeds, []byte(strings.Join(r.web.Seeds(), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testwait.Context(t), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "trawlctl"), "report", "-dir", dir, "-seeds", seeds)
	cmd.Env = append(os.Environ(), "TRAWL_REDIS_URL="+r.stack.Redis().URL(), "TRAWL_NATS_URL="+r.stack.NATSURL())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("trawlctl report: %v\n%s", err, out)
	}
	report := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("report not written beside the WARC files: %v", err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	for _, want := range []string{
		"Duplicate-by-hash Revisits Written: " + strconv.Itoa(revisits) + "\n",
		"Duplicate-by-hash Payload Bytes Saved: " + strconv.FormatInt(wantSaved, 10) + "\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("crawl report does not say %q:\n%s", want, out)
		}
	}

	// What the web log says: the status and host of every response to a page request.
	codes, hosts, status := map[string]int{}, map[string]int{}, map[string]int{}
	for _, q := range r.reqs {
		if q.Path == "/robots.txt" || q.Status == 0 {
			continue // robots.txt is the fetcher's, not a page; status 0: no response
		}
		codes[strconv.Itoa(q.Status)]++
		hosts[q.Host]++
		status[r.web.Origin(q.Host)+q.Path] = q.Status
	}
	t.Run("responsecode", func(t *testing.T) {
		got := map[string]int{}
		for _, l := range report("responsecode-report.txt")[1:] {
			f := strings.Fields(l)
			n, _ := strconv.Atoi(f[0])
			got[f[1]] = n
		}
		if !mapsEqual(got, codes) {
			t.Errorf("responsecode-report %v, the web answered %v", got, codes)
		}
	})
	t.Run("hosts", func(t *testing.T) {
		got := map[string]int{}
		dup := 0
		for _, l := range report("hosts-report.txt")[1:] {
			f := strings.Fields(l)
			n, _ := strconv.Atoi(f[0])
			got[f[2]] = n
			d, _ := strconv.Atoi(f[5])
			dup += d
		}
		if !mapsEqual(got, hosts) {
			t.Errorf("hosts-report %v, the web served %v", got, hosts)
		}
		if dup != revisits {
			t.Errorf("hosts-report counts %d dup-by-hash URLs, the archive holds %d revisits, of the exact copies", dup, revisits)
		}
	})
	t.Run("seeds", func(t *testing.T) {
		lines := report("seeds-report.txt")[1:]
		if len(lines) != len(r.web.Seeds()) {
			t.Fatalf("%d seed lines for %d seeds", len(lines), len(r.web.Seeds()))
		}
		for _, l := range lines {
			f := strings.Fields(l)
			// A seed the web never answered (its host's robots.txt is unavailable) is
			// not crawled.
			st, ok := status[f[2]]
			if ok && (f[1] != "CRAWLED" || f[0] != strconv.Itoa(st)) || !ok && f[1] == "CRAWLED" {
				t.Errorf("seed line %q: the web answered %d (requested: %v)", l, st, ok)
			}
		}
	})
	t.Run("mimetype", func(t *testing.T) {
		total := 0
		for _, l := range report("mimetype-report.txt")[1:] {
			n, _ := strconv.Atoi(strings.Fields(l)[0])
			total += n
		}
		want := 0
		for u, cs := range caps {
			if !strings.HasPrefix(u, "urn:") {
				want += len(cs)
			}
		}
		if total != want {
			t.Errorf("mimetype-report counts %d captures, the archive holds %d", total, want)
		}
	})
	t.Run("skipped", func(t *testing.T) {
		// A URL whose every answer was a 5xx failed: the report names it with its status.
		body := strings.Join(report("skipped-report.txt"), "\n")
		failed := 0
		for u, st := range status {
			if st >= 500 && len(caps[u]) > 0 && allFailed(r, u) {
				failed++
				if !strings.Contains(body, " "+strconv.Itoa(st)+" "+u+" ") {
					t.Errorf("skipped-report does not list %s (%d):\n%s", u, st, body)
				}
			}
		}
		if failed == 0 {
			t.Error("the synthetic web has no page that always fails")
		}
		// Every URL skipped without a request is listed with its reason, and none was
		// requested; every link robots.txt forbids is among them.
		counts, listed := parseSkippedReport(t, body+"\n")
		checkSkippedReport(t, r.web, env, r.reqs, counts, listed, func(string) bool { return false })
	})
}

// allFailed: every response the web gave for u was a 5xx.
func allFailed(r crawlResult, u string) bool {
	for _, q := range r.reqs {
		if r.web.Origin(q.Host)+q.Path == u && q.Status < 500 {
			return false
		}
	}
	return true
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
