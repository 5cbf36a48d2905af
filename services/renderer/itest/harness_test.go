package itest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/inproc"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/scrape"
	"github.com/trawl/trawl/services/renderer/internal/config"
	"github.com/trawl/trawl/services/renderer/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

const waitFor = 30 * time.Second

// chromium is the browser the tests drive; a machine without it fails the test with the
// package to install (make test installs it).
func chromium(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("TRAWL_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found (install Debian's chromium package, or set TRAWL_CHROMIUM)")
	return ""
}

// stack is one embedded NATS and one redis-server; the test plays the parser (publishing
// render tasks, reading rendered pages).
type stack struct {
	t     testing.TB
	nats  *natsembed.Server
	redis *redisproc.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	env   map[string]string
	pages jetstream.Consumer
	early map[string]*crawlmsg.Page // read from pages before they were waited for
}

func newStack(t testing.TB) *stack {
	t.Helper()
	ns, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), MaxStore: natsembed.TestMaxStore})
	if err != nil {
		t.Fatalf("natsembed: start embedded NATS server: %v", err)
	}
	t.Cleanup(ns.Close)
	st := &stack{t: t, nats: ns, redis: redisproc.StartT(t, redisproc.Options{})}
	st.env = map[string]string{
		"TRAWL_NATS_URL":         ns.URL(),
		"TRAWL_REDIS_URL":        st.redis.URL(),
		"TRAWL_REDIS_PREFIX":     "itest",
		"TRAWL_HTTP_ADDR":        "127.0.0.1:0",
		"TRAWL_ALLOW_CIDRS":      "127.0.0.0/8",
		"TRAWL_CHROMIUM":         chromium(t),
		"TRAWL_RENDER_TABS":      "2",
		"TRAWL_RENDER_TIMEOUT":   "20s",
		"TRAWL_RENDER_SETTLE":    "200ms",
		"TRAWL_ACK_WAIT":         "5s",
		"TRAWL_MIN_DELAY":        "50ms",
		"TRAWL_DELAY_FACTOR":     "0",
		"TRAWL_LOG_LEVEL":        "debug",
		"TRAWL_RENDER_CACHE_TTL": "1h",
		// Small caps: JetStream reserves each stream's cap out of the disk at creation.
		"TRAWL_PAGES_MAX_BYTES":    "256MiB",
		"TRAWL_DOCS_MAX_BYTES":     "64MiB",
		"TRAWL_RENDER_CACHE_BYTES": "64MiB",
	}
	// Browser profiles (and one a killed renderer leaves) go with the test, in a directory
	// the browser's user (not root) may enter.
	t.Setenv("TMPDIR", reachableTempDir(t))
	if st.nc, err = nats.Connect(ns.URL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.nc.Close)
	if st.js, err = jetstream.New(st.nc); err != nil {
		t.Fatal(err)
	}
	common := st.config(nil).Common
	ctx := testwait.Context(t)
	if err := natsx.Ensure(ctx, st.js, common.Topology(), common.Timings(), slog.Default()); err != nil {
		t.Fatal(err)
	}
	if st.pages, err = st.js.OrderedConsumer(ctx, topology.StreamPages, jetstream.OrderedConsumerConfig{}); err != nil {
		t.Fatal(err)
	}
	return st
}

// reachableTempDir is a directory removed with the test that any user may enter (not
// list): t.TempDir's parent is root's alone, and a root renderer runs its browser as
// another user.
func reachableTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "trawl-itest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A renderer killed outright leaves its browser's children and crash handler running
		// a moment after it (they end when they notice the browser gone); until then the
		// network service writes its cache index in the profile, and would make the
		// directory again behind RemoveAll, as the browser's user.
		testwait.EventuallyState(t, waitFor, "the browser processes of "+dir+" to end", func() (bool, string) {
			left := processesUnder(dir)
			return len(left) == 0, fmt.Sprintf("still running: %v", left)
		})
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rdb is a client of the stack's Redis.
func (st *stack) rdb() *redis.Client {
	opt, err := redis.ParseURL(st.redis.URL())
	if err != nil {
		st.t.Fatal(err)
	}
	c := redis.NewClient(opt)
	st.t.Cleanup(func() { c.Close() })
	return c
}

// config is a valid renderer configuration for the stack, changed by mod.
func (st *stack) config(mod map[string]string) config.Config {
	st.t.Helper()
	return inproc.Config(st.t, config.Load, st.env, mod)
}

// instance is one renderer running in-process.
type instance struct {
	*inproc.Running[*service.Service]
}

func (st *stack) start(cfg config.Config) *instance {
	st.t.Helper()
	log := inproc.Logger(st.t, slog.LevelDebug, nil)
	return &instance{inproc.Start(st.t, log, func(ctx context.Context) (*service.Service, error) {
		return service.New(ctx, cfg, log)
	})}
}

// metric is the sum of the samples sel selects ("name{labels}") from the instance's
// /metrics; 0 if it exports none.
func (in *instance) metric(t testing.TB, sel string) float64 {
	t.Helper()
	return scrape.Value(t, in.Svc.Addr(), sel)
}

var leases atomic.Int64

// publishTask publishes a render task for a page fetched from rawURL with body.
func (st *stack) publishTask(rawURL, body string) string {
	st.t.Helper()
	lease := fmt.Sprintf("0-%d-test", leases.Add(1))
	st.publishTaskOf(lease, rawURL, body, "")
	return lease
}

// publishTaskOf publishes the render task of lease; msgID, when set, replaces its
// Nats-Msg-Id, so that the stream keeps a second copy of a task (as a redelivery gives it).
func (st *stack) publishTaskOf(lease, rawURL, body, msgID string) {
	st.t.Helper()
	u, _ := url.Parse(rawURL)
	m, err := crawlmsg.RenderTaskMsg(topology.SubjectRender, &crawlmsg.RenderTask{Reason: "test", Page: crawlmsg.Page{
		Meta: crawlmsg.PageMeta{URL: rawURL, Host: u.Hostname(), Lease: lease, Status: 200, Depth: 1,
			Header:      map[string][]string{"Content-Type": {"text/html; charset=utf-8"}},
			ContentType: "text/html", Charset: "utf-8", FetchedAt: time.Now().UnixMilli()},
		Body: []byte(body)}})
	if err != nil {
		st.t.Fatal(err)
	}
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	if _, err := st.js.PublishMsg(testwait.Context(st.t), m); err != nil {
		st.t.Fatal(err)
	}
}

// page waits for the rendered page of lease on crawl.pages. Pages of other leases read
// meanwhile are kept for their own call.
func (st *stack) page(lease string) *crawlmsg.Page {
	st.t.Helper()
	if p, ok := st.early[lease]; ok {
		delete(st.early, lease)
		return p
	}
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		m, err := st.pages.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		p, err := crawlmsg.DecodePage(m.Headers(), m.Data())
		if err != nil {
			st.t.Fatalf("rendered page does not decode: %v", err)
		}
		if p.Meta.Lease != lease {
			if st.early == nil {
				st.early = map[string]*crawlmsg.Page{}
			}
			st.early[p.Meta.Lease] = p
			continue
		}
		if id := m.Headers().Get(nats.MsgIdHdr); id != crawlmsg.RenderedMsgID(lease) {
			st.t.Errorf("rendered page msg id %q, want %q", id, crawlmsg.RenderedMsgID(lease))
		}
		return p
	}
	st.t.Fatalf("no rendered page for lease %s within %s", lease, waitFor)
	return nil
}

// hit is one request a site received.
type hit struct {
	host, path string
	start, end time.Time
	header     http.Header // as the site received it
}

// site is an httptest server answering several host names (TRAWL_RESOLVE maps them to
// it), logging every request with its start and end.
type site struct {
	srv    *httptest.Server
	port   string
	mu     sync.Mutex
	hits   []hit
	routes map[string]http.HandlerFunc // by host + path
}

func newSite(t testing.TB, routes map[string]http.HandlerFunc) *site {
	s := &site{routes: routes}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := hit{host: strings.Split(r.Host, ":")[0], path: r.URL.RequestURI(), start: time.Now(), header: r.Header.Clone()}
		defer func() {
			h.end = time.Now()
			s.mu.Lock()
			s.hits = append(s.hits, h)
			s.mu.Unlock()
		}()
		if f, ok := s.routes[h.host+h.path]; ok {
			f(w, r)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(s.srv.Close)
	u, _ := url.Parse(s.srv.URL)
	s.port = u.Port()
	return s
}

// url is the site's URL for host and path.
func (s *site) url(host, path string) string { return "http://" + host + ":" + s.port + path }

// resolve is TRAWL_RESOLVE for hosts.
func resolve(hosts ...string) string {
	var parts []string
	for _, h := range hosts {
		parts = append(parts, h+"=127.0.0.1")
	}
	return strings.Join(parts, ",")
}

func (s *site) log() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hit(nil), s.hits...)
}

func (s *site) paths(host string) []string {
	var out []string
	for _, h := range s.log() {
		if h.host == host {
			out = append(out, h.path)
		}
	}
	return out
}

func serve(ctype, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		fmt.Fprint(w, body)
	}
}

// slowScript is a site a.test whose /slow.js is answered only when release is closed (or
// hold has passed), so the page's renderer process lives while the test looks at it; asked
// receives each request for the script.
func slowScript(t *testing.T, hold time.Duration) (s *site, asked chan struct{}, release chan struct{}) {
	t.Helper()
	asked, release = make(chan struct{}, 4), make(chan struct{})
	s = newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt": serve("text/plain", ""),
		"a.test/slow.js": func(w http.ResponseWriter, r *http.Request) {
			asked <- struct{}{}
			select {
			case <-release:
			case <-time.After(hold):
			}
			w.Header().Set("Content-Type", "text/javascript")
			w.Write([]byte(`document.body.setAttribute('data-slow', 'ran');`))
		},
	})
	return s, asked, release
}

// rendererProc is a renderer binary running as a process of its own on the stack.
type rendererProc struct {
	cmd    *exec.Cmd
	out    *testwait.Buffer
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// runRenderer starts cmd, a renderer binary, with the environment base, then the stack's
// settings, then mod (which wins over the stack's), and kills it when the test ends.
func (s *stack) runRenderer(t *testing.T, cmd *exec.Cmd, base []string, mod map[string]string) *rendererProc {
	t.Helper()
	cmd.Env = slices.Clone(base)
	for k, v := range s.env {
		if _, over := mod[k]; !over {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	for k, v := range mod {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &rendererProc{cmd: cmd, out: &testwait.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}
