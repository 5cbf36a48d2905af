package synthweb

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var noRedirects = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

type fetched struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, u string) fetched {
	t.Helper()
	resp, err := noRedirects.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", u, err)
	}
	return fetched{resp.StatusCode, resp.Header, string(b)}
}

func hostOfKind(t *testing.T, w *Web, k HostKind) HostInfo {
	t.Helper()
	for _, h := range w.Hosts() {
		if h.Kind == k {
			return h
		}
	}
	t.Fatalf("no %v host", k)
	return HostInfo{}
}

func TestServesEveryHostOnItsOwnAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		one  bool
	}{{"a listener per address", false}, {"one listener", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallConfig()
			cfg.OneListener = tc.one
			w := startWeb(t, cfg)
			hosts := w.Hosts()
			if want := 3 + len(specialKinds); len(hosts) != want {
				t.Fatalf("%d hosts, want %d", len(hosts), want)
			}
			seeds := w.Seeds()
			for i, h := range hosts {
				if seeds[i] != h.Origin+"/" {
					t.Errorf("seed %d = %s, want %s/", i, seeds[i], h.Origin)
				}
				if h.Origin != w.Origin(h.Addr) {
					t.Errorf("Origin(%s) = %s, HostInfo says %s", h.Addr, w.Origin(h.Addr), h.Origin)
				}
				if h.Kind == KindSlow {
					continue // covered by its own test
				}
				f := get(t, h.Origin+"/")
				if f.status != 200 || !strings.Contains(f.body, "<title>"+h.Addr+" ") {
					t.Errorf("%s: status %d, body lacks its own title:\n%.200s", h.Origin, f.status, f.body)
				}
				if ct := f.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
					t.Errorf("%s: Content-Type %q", h.Origin, ct)
				}
			}
			logged := make(map[string]bool)
			for _, r := range w.Requests() {
				logged[r.Host] = true
			}
			for _, h := range hosts {
				if h.Kind != KindSlow && !logged[h.Addr] {
					t.Errorf("no logged request for host %s", h.Addr)
				}
			}
		})
	}
}

// A web of more hosts than the process may hold descriptors starts and tells its hosts
// apart with OneListener; with a listener per address it fails with EMFILE.
func TestOneListenerServesMoreHostsThanDescriptors(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Hosts: int(lim.Cur) + 100, PagesPerHost: 1, Seed: 1, OneListener: true}
	w := startWeb(t, cfg)
	hosts := w.Hosts()
	for _, h := range []HostInfo{hosts[0], hosts[len(hosts)-1]} {
		if f := get(t, h.Origin+"/"); f.status != 200 || !strings.Contains(f.body, "<title>"+h.Addr+" ") {
			t.Errorf("%s: status %d, body lacks its own title:\n%.200s", h.Origin, f.status, f.body)
		}
	}
	reqs := w.Requests()
	if len(reqs) != 2 || reqs[0].Host != hosts[0].Addr || reqs[1].Host != hosts[len(hosts)-1].Addr {
		t.Errorf("logged %+v, want one request to each of %s and %s", reqs, hosts[0].Addr, hosts[len(hosts)-1].Addr)
	}
}

func TestSameSeedSameHTML(t *testing.T) {
	w := startWeb(t, smallConfig())
	origin := w.Hosts()[1].Origin
	for _, p := range []string{"/", "/p/2", "/p/9"} {
		if a, b := get(t, origin+p).body, get(t, origin+p).body; a != b {
			t.Errorf("%s served differently twice", p)
		}
	}
	// A second web with the same seed on other addresses serves the same
	// pages up to its origins.
	cfg := smallConfig()
	cfg.BaseIP = "127.0.9.1"
	w2 := startWeb(t, cfg)
	for i, p := range []string{"/", "/p/2", "/p/9"} {
		a := get(t, w.Hosts()[i].Origin+p).body
		b := get(t, w2.Hosts()[i].Origin+p).body
		b = strings.ReplaceAll(b, "127.0.9.", "127.0.1.")
		b = strings.ReplaceAll(b, w2.Origin("")[len("http://"):], w.Origin("")[len("http://"):])
		if a != b {
			t.Errorf("%s differs between two webs with the same seed", p)
		}
	}
}

func TestRobotsPerKind(t *testing.T) {
	w := startWeb(t, smallConfig())
	tests := []struct {
		kind       HostKind
		status     int
		contains   []string
		notContain string
	}{
		{kind: KindOrdinary, status: 200, contains: []string{"User-agent: *", "Disallow: /nowhere/"}},
		{kind: KindRobotsRules, status: 200, contains: []string{"User-agent: *\nDisallow: /public/", "User-agent: Trawl", "Allow: /private/open.html", "Disallow: /*.pdf$"}},
		{kind: KindCrawlDelay, status: 200, contains: []string{"Crawl-delay: 0.03"}},
		{kind: KindRobots404, status: 404},
		{kind: KindRobots503, status: 503},
		{kind: KindTrap, status: 200, contains: []string{"Disallow: /nowhere/"}, notContain: "/cal/"},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			f := get(t, hostOfKind(t, w, tt.kind).Origin+"/robots.txt")
			if f.status != tt.status {
				t.Fatalf("status %d, want %d", f.status, tt.status)
			}
			for _, s := range tt.contains {
				if !strings.Contains(f.body, s) {
					t.Errorf("robots.txt lacks %q:\n%s", s, f.body)
				}
			}
			if tt.notContain != "" && strings.Contains(f.body, tt.notContain) {
				t.Errorf("robots.txt contains %q", tt.notContain)
			}
		})
	}
	if d := hostOfKind(t, w, KindCrawlDelay).CrawlDelay; d != 30*time.Millisecond {
		t.Errorf("HostInfo.CrawlDelay = %s, want 30ms", d)
	}
}

func TestRedirects(t *testing.T) {
	w := startWeb(t, smallConfig())
	rd := hostOfKind(t, w, KindRedirect).Origin
	rules := hostOfKind(t, w, KindRobotsRules).Origin
	tests := []struct {
		path     string
		status   int
		location string
	}{
		{"/old/0", 301, "/p/0"},
		{"/old/1", 301, rd + "/p/1"},
		{"/old/2", 301, "../p/2"},
		{"/chain/0", 302, "/chain/1"},
		{"/chain/1", 307, "/p/3"},
		{"/away", 301, w.Hosts()[0].Origin + "/p/0"},
		{"/to-private", 302, rules + "/private/redirected.html"},
		{"/p/0", 200, ""},
		{"/old/9", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			f := get(t, rd+tt.path)
			if f.status != tt.status || f.header.Get("Location") != tt.location {
				t.Fatalf("got %d Location %q, want %d %q", f.status, f.header.Get("Location"), tt.status, tt.location)
			}
		})
	}
}

func TestStatusesAndContentTypes(t *testing.T) {
	w := startWeb(t, smallConfig())
	ord := w.Hosts()[0].Origin
	errs := hostOfKind(t, w, KindErrors).Origin
	rules := hostOfKind(t, w, KindRobotsRules).Origin
	tests := []struct {
		url         string
		status      int
		contentType string
	}{
		{ord + "/p/13", 200, htmlType},
		{ord + "/p/14", 404, htmlType}, // PagesPerHost is 14
		{ord + "/p/03", 404, htmlType}, // one URL per page
		{ord + "/p/3?x=1", 404, htmlType},
		{ord + "/files/1.txt", 200, textType},
		{ord + "/hidden/3", 200, htmlType},
		{ord + "/nowhere/4", 200, htmlType},
		{ord + "/nope", 404, htmlType},
		{errs + "/missing/0", 404, htmlType},
		{errs + "/gone", 410, htmlType},
		{errs + "/broken", 500, htmlType},
		{rules + "/doc.pdf", 200, pdfType},
		{rules + "/doc.pdf?x=1", 200, pdfType},
		{rules + "/private/open.html?lang=en", 200, htmlType},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.url, "http://"), func(t *testing.T) {
			f := get(t, tt.url)
			if f.status != tt.status || f.header.Get("Content-Type") != tt.contentType {
				t.Fatalf("got %d %q, want %d %q", f.status, f.header.Get("Content-Type"), tt.status, tt.contentType)
			}
		})
	}
	f := get(t, ord+"/files/1.txt")
	if !strings.Contains(f.body, `<a href="/unlinked/1">`) {
		t.Errorf("text file lacks its bait link:\n%s", f.body)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	w := startWeb(t, smallConfig())
	resp, err := http.Post(w.Seeds()[0], "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST status %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodHead, w.Seeds()[0], nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength <= 0 {
		t.Fatalf("HEAD: %d, Content-Length %d", resp.StatusCode, resp.ContentLength)
	}
}

func TestSlowHost(t *testing.T) {
	cfg := smallConfig()
	cfg.SlowDelay = 150 * time.Millisecond
	w := startWeb(t, cfg)
	slow := hostOfKind(t, w, KindSlow)

	start := time.Now()
	if f := get(t, slow.Origin+"/p/1"); f.status != 200 {
		t.Fatalf("status %d", f.status)
	}
	if took := time.Since(start); took < cfg.SlowDelay {
		t.Fatalf("slow host answered in %s, want >= %s", took, cfg.SlowDelay)
	}

	// A client that gives up early must not hold the handler for the full
	// delay; the request is logged with status 0.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, slow.Origin+"/p/2", nil)
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var found *Request
		for _, r := range w.Requests() {
			if r.Path == "/p/2" {
				found = &r
			}
		}
		if found != nil {
			if found.Status != 0 || found.End.Sub(found.Start) >= cfg.SlowDelay {
				t.Fatalf("cancelled request logged as %+v", *found)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cancelled request never logged")
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	for _, r := range w.Requests() {
		if r.Path == "/p/1" && r.End.Sub(r.Start) < cfg.SlowDelay {
			t.Fatalf("logged duration %s < SlowDelay", r.End.Sub(r.Start))
		}
	}
}

// A request being served is listed by InProgress with who asked, and leaves it for the log
// once answered.
func TestInProgress(t *testing.T) {
	cfg := smallConfig()
	cfg.SlowDelay = 2 * time.Second
	w := startWeb(t, cfg)
	slow := hostOfKind(t, w, KindSlow)
	if got := w.InProgress(); len(got) != 0 {
		t.Fatalf("in progress before any request: %+v", got)
	}
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, slow.Origin+"/p/3", nil)
		req.Header.Set("User-Agent", "probe/1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	deadline := time.Now().Add(cfg.SlowDelay)
	for {
		got := w.InProgress()
		if len(got) == 1 {
			if q := got[0]; q.Path != "/p/3" || q.Agent != "probe/1" || q.Host != slow.Name || q.Status != 0 || !q.End.IsZero() {
				t.Fatalf("in progress: %+v", q)
			}
			if len(w.Requests()) != 0 {
				t.Fatalf("logged while in progress: %+v", w.Requests())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow request was never seen in progress (%d listed)", len(got))
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	if status := <-done; status != 200 {
		t.Fatalf("status %d", status)
	}
	// The handler logs the request just after its last byte reached the client.
	for deadline := time.Now().Add(5 * time.Second); len(w.InProgress()) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still in progress 5s after it was answered: %+v", w.InProgress())
		}
	}
	if log := w.Requests(); len(log) != 1 || log[0].Agent != "probe/1" || log[0].Status != 200 {
		t.Fatalf("log: %+v", log)
	}
}

func TestTrapNeverEnds(t *testing.T) {
	w := startWeb(t, smallConfig())
	trap := hostOfKind(t, w, KindTrap).Origin
	parser := newRefCrawler(0)
	linksOf := func(u string) []string {
		t.Helper()
		f := get(t, u)
		if f.status != 200 {
			t.Fatalf("%s: status %d", u, f.status)
		}
		pu, _ := url.Parse(u)
		return parser.links(pu, []byte(f.body))
	}
	u := trap + monthPath(2025, 1)
	if !slices.Contains(linksOf(trap+"/"), u) {
		t.Fatalf("trap home does not link %s", u)
	}
	// Walk far beyond any depth a test would use; every month links both
	// ways.
	for i := 1; i <= 40; i++ {
		links := linksOf(u)
		prev := trap + monthPath(2025+(i-2+12)/12-1, (i-2+12)%12+1)
		next := trap + monthPath(2025+i/12, i%12+1)
		if !slices.Contains(links, next) || !slices.Contains(links, prev) {
			t.Fatalf("%s links %v, want %s and %s", u, links, prev, next)
		}
		u = next
	}
}

func TestRequestLog(t *testing.T) {
	w := startWeb(t, smallConfig())
	hosts := w.Hosts()[:3]
	var wg sync.WaitGroup
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(hosts[i%3].Origin + "/p/" + string(rune('0'+i%10)))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	reqs := w.Requests()
	if len(reqs) != 30 {
		t.Fatalf("%d requests logged, want 30", len(reqs))
	}
	for i, r := range reqs {
		if i > 0 && r.Start.Before(reqs[i-1].Start) {
			t.Errorf("log not ordered by Start at %d", i)
		}
		if r.End.Before(r.Start) || r.Status != 200 || r.Bytes <= 0 || strings.Contains(r.Host, ":") {
			t.Errorf("bad entry %+v", r)
		}
	}
	body := get(t, hosts[0].Origin+"/p/5").body
	last := w.Requests()
	if r := last[len(last)-1]; r.Path != "/p/5" || r.Bytes != len(body) || r.Host != hosts[0].Addr {
		t.Errorf("entry %+v does not match the response (%d bytes)", r, len(body))
	}
}

func TestPorts(t *testing.T) {
	a := startWeb(t, Config{Hosts: 2})
	// The same addresses and port are taken.
	if _, err := Start(context.Background(), Config{Hosts: 2, Port: a.Port()}); err == nil {
		t.Fatal("second web on the same addresses and port started")
	}
	// Other addresses may share the port: each host is its own IP.
	b := startWeb(t, Config{Hosts: 2, BaseIP: "127.0.8.1", Port: a.Port()})
	if b.Port() != a.Port() {
		t.Fatalf("port %d, want %d", b.Port(), a.Port())
	}
	if f := get(t, b.Seeds()[1]); f.status != 200 {
		t.Fatalf("status %d", f.status)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{Hosts: -1}, {BaseIP: "10.1.1.1"}, {BaseIP: "127.255.255.250", Hosts: 10}} {
		if w, err := Start(context.Background(), cfg); err == nil {
			w.Close()
			t.Errorf("Start(%+v) succeeded", cfg)
		}
	}
}

func TestCloseStopsServing(t *testing.T) {
	w, err := Start(context.Background(), Config{Hosts: 1})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	u := w.Seeds()[0]
	get(t, u)
	if err := w.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := noRedirects.Get(u); err == nil {
		t.Fatal("still serving after Close")
	}
	if n := len(w.Requests()); n != 1 {
		t.Fatalf("%d requests logged, want 1", n)
	}
}

func TestTrapSessionAndDuplicateHosts(t *testing.T) {
	w := startWeb(t, smallConfig())
	trap := hostOfKind(t, w, KindTrap).Origin
	sess := hostOfKind(t, w, KindSessionIDs).Origin
	dup := hostOfKind(t, w, KindDuplicates).Origin
	tests := []struct {
		url    string
		status int
		title  string // in the body when 200
	}{
		{trap + "/loop/", 200, "loop /loop/"},
		{trap + "/loop/a/b/a/b/a/b/a/b/", 200, "loop /loop/a/b/a/b/a/b/a/b/"}, // served; the crawler must not ask
		{trap + "/loop/a/c/", 404, ""},
		{trap + "/grow/" + growSegment(0), 200, "grow 1"},
		{trap + "/grow/" + growSegment(1), 404, ""},
		{sess + "/s/0;jsessionid=0123456789ABCDEF0123456789ABCDEF", 200, "session page 0"},
		{sess + "/s/0", 200, "session page 0"},
		{sess + "/s/2?PHPSESSID=abc&lang=en", 200, "session page 2"},
		{sess + "/s/6", 404, ""},
		{dup + "/doc/1?print=1", 200, "article 1"},
		{dup + "/doc/1?x=1", 404, ""},
		{dup + "/index.html", 200, "duplicates home"},
	}
	for _, tt := range tests {
		path := tt.url[7+strings.IndexByte(tt.url[7:], '/'):]
		t.Run(path[:min(50, len(path))], func(t *testing.T) {
			f := get(t, tt.url)
			if f.status != tt.status || (tt.title != "" && !strings.Contains(f.body, tt.title+"</title>")) {
				t.Fatalf("got %d, body %.120q; want %d with title %q", f.status, f.body, tt.status, tt.title)
			}
		})
	}
	// Copies are served byte for byte; near copies differ in one word.
	for u, of := range w.Duplicates() {
		a, b := get(t, of).body, get(t, u).body
		_, near := w.NearDuplicates()[u]
		if (a == b) == near {
			t.Errorf("%s vs %s: identical %v, near duplicate %v", u, of, a == b, near)
		}
		if near && strings.Count(b, swapped) != 1 {
			t.Errorf("%s: %d changed words", u, strings.Count(b, swapped))
		}
	}
	// Every session-id spelling of a page is the same document, its links apart.
	a := get(t, sess+"/s/1?sid=0123456789abcdef0123456789abcdef").body
	b := get(t, sess+"/s/1").body
	if a == b || visibleTextOf(a) != visibleTextOf(b) {
		t.Errorf("session variants: identical bodies %v, same text %v; want different links, same text", a == b, visibleTextOf(a) == visibleTextOf(b))
	}
}

func visibleTextOf(body string) string { return strings.Join(visibleText([]byte(body)), " ") }
