// Package browser keeps one headless Chromium running for a renderer: it starts it with
// flags that leave it no network of its own (every request must be answered through the
// DevTools Fetch domain; see docs/architecture.md, "Rendering"), opens tabs on it, watches
// its memory, and restarts it when it crashed, hung or grew past its cap. chromedp
// (github.com/chromedp/chromedp) drives it: a maintained, pure Go DevTools-protocol
// client with typed Fetch-domain commands, no Node.js or driver binary beside the browser.
package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
)

// Options configure a Browser.
type Options struct {
	Path   string // the Chromium binary
	JSHeap int64  // V8 old-space limit per renderer process, bytes; 0 = Chromium's own
	MaxRSS int64  // resident memory of all the browser's processes before a restart; 0 = no watch
	// DataDir is where each launch's profile directory is made (default: the system's).
	DataDir string
	Log     *slog.Logger
	// OnRestart is told why the browser was restarted ("crash", "hang", "memory").
	OnRestart func(reason string)
}

// Browser is a running Chromium that restarts itself. It is safe for concurrent use.
type Browser struct {
	o Options

	mu     sync.Mutex
	cur    *instance
	closed bool
}

// instance is one launch of the browser.
type instance struct {
	gen     int
	ctx     context.Context // the browser's chromedp context
	cancel  context.CancelFunc
	dir     string
	lost    <-chan struct{}
	reason  string // why it was stopped, once it is
	stopped chan struct{}
}

// ErrRestarted is wrapped by the error of a tab whose browser was restarted under it; the
// reason follows ("crash", "hang", "memory").
var ErrRestarted = errors.New("browser restarted")

// Start launches the browser.
func Start(ctx context.Context, o Options) (*Browser, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.OnRestart == nil {
		o.OnRestart = func(string) {}
	}
	b := &Browser{o: o}
	removeOrphanProfiles(o.DataDir, o.Log)
	in, err := b.launch(ctx, 1)
	if err != nil {
		return nil, err
	}
	b.cur = in
	return b, nil
}

// flags leave the browser no way to the network but Trawl: a proxy that does not exist
// (an unintercepted request fails instead of leaving), no name resolution, no service
// workers (a worker's requests are not the page's to intercept), no background traffic.
func (b *Browser) flags(dir string) []chromedp.ExecAllocatorOption {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(b.o.Path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 1000),
		chromedp.ProxyServer("http://127.0.0.1:9"),
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND"),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-features", "ServiceWorker,NetworkPrediction,OptimizationHints,MediaRouter,Translate"),
		chromedp.Flag("dns-prefetch-disable", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("disable-extensions", true),
	}
	if b.o.JSHeap > 0 {
		opts = append(opts, chromedp.Flag("js-flags", fmt.Sprintf("--max-old-space-size=%d", b.o.JSHeap>>20)))
	}
	return opts
}

func (b *Browser) launch(ctx context.Context, gen int) (*instance, error) {
	dir, err := os.MkdirTemp(b.o.DataDir, fmt.Sprintf("%s%d-", profilePrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("browser: profile directory: %w", err)
	}
	actx, acancel := chromedp.NewExecAllocator(context.WithoutCancel(ctx), b.flags(dir)...)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(func(string, ...any) {}), chromedp.WithErrorf(func(f string, a ...any) {
		b.o.Log.Debug("chromium: " + fmt.Sprintf(f, a...))
	}))
	cancel := func() { bcancel(); acancel(); _ = os.RemoveAll(dir) }
	// The first run starts the process; it carries no timeout (that would end the browser),
	// so it is bounded by a watchdog instead.
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(bctx) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		err = errors.New("no answer within 30s")
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("browser: start %s: %w", b.o.Path, err)
	}
	c := chromedp.FromContext(bctx)
	in := &instance{gen: gen, ctx: bctx, cancel: cancel, dir: dir, lost: c.Browser.LostConnection, stopped: make(chan struct{})}
	pid := 0
	if p := c.Browser.Process(); p != nil {
		pid = p.Pid
	}
	b.o.Log.Info("browser started", "pid", pid, "generation", gen)
	return in, nil
}

// profilePrefix starts each launch's profile directory, followed by the renderer's pid.
const profilePrefix = "trawl-renderer-"

// removeOrphanProfiles removes the profile directories of renderers that are gone (a
// renderer killed outright cannot remove its own), leaving those of live processes: other
// renderers may share the directory.
func removeOrphanProfiles(dir string, log *slog.Logger) {
	if dir == "" {
		dir = os.TempDir()
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), profilePrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", pidText)); err == nil || !os.IsNotExist(err) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err == nil {
			log.Info("removed the browser profile of a renderer that is gone", "dir", e.Name())
		}
	}
}

// Tab is a page of the browser. Its context ends when the tab is closed or the browser
// stops.
type Tab struct {
	Ctx    context.Context
	gen    int
	b      *Browser
	cancel context.CancelFunc
	in     *instance
}

// NewTab opens a tab in a browser context of its own (no cookies or storage shared with
// other pages), restarting the browser first if it died.
func (b *Browser) NewTab(ctx context.Context) (*Tab, error) {
	in, err := b.current(ctx)
	if err != nil {
		return nil, err
	}
	tctx, cancel := chromedp.NewContext(in.ctx, chromedp.WithNewBrowserContext())
	// Opening the target is the tab's first run; bounded by ctx through the watchdog.
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(tctx) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		b.Check(in.gen)
		return nil, fmt.Errorf("browser: open tab: %w", err)
	}
	return &Tab{Ctx: tctx, gen: in.gen, b: b, cancel: cancel, in: in}, nil
}

// Close closes the tab.
func (t *Tab) Close() { t.cancel() }

// Check asks the tab's browser whether it still answers (see Browser.Check).
func (t *Tab) Check() { t.b.Check(t.gen) }

// Lost reports whether the tab's browser stopped (crashed, or was restarted), and why.
func (t *Tab) Lost() (bool, string) {
	select {
	case <-t.in.lost:
	case <-t.in.stopped:
	default:
		return false, ""
	}
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	if t.in.reason != "" {
		return true, t.in.reason
	}
	return true, "crash"
}

// Check asks a browser of generation gen whether it still answers; one that does not is
// restarted (reason "hang"), one that is gone too ("crash"). A tab calls it after an
// error or a page over its time cap.
func (b *Browser) Check(gen int) {
	b.mu.Lock()
	in := b.cur
	b.mu.Unlock()
	if in == nil || in.gen != gen {
		return
	}
	select {
	case <-in.lost:
		b.Restart(gen, "crash")
		return
	default:
	}
	ctx, cancel := context.WithTimeout(in.ctx, 5*time.Second)
	defer cancel()
	if _, err := chromedp.CallBrowser(ctx, browser.GetVersion, cdp.Empty{}); err != nil {
		b.Restart(gen, "hang")
	}
}

// Restart stops generation gen for reason (if it is still the current one); the next
// tab starts a new browser.
func (b *Browser) Restart(gen int, reason string) {
	b.mu.Lock()
	in := b.cur
	if in == nil || in.gen != gen {
		b.mu.Unlock()
		return
	}
	b.cur = &instance{gen: gen + 1} // placeholder: launched on demand by current
	in.reason = reason
	close(in.stopped)
	b.mu.Unlock()
	b.o.Log.Warn("browser restarted; its pages are retried", "reason", reason, "generation", gen)
	b.o.OnRestart(reason)
	in.cancel()
}

// current returns the running instance, launching one when the last was stopped.
func (b *Browser) current(ctx context.Context) (*instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("browser: closed")
	}
	in := b.cur
	if in.ctx != nil {
		select {
		case <-in.lost:
			// Died without anyone asking: restart it here.
			in.reason = "crash"
			close(in.stopped)
			b.o.Log.Warn("browser died; restarting it", "generation", in.gen)
			b.o.OnRestart("crash")
			in.cancel()
			b.cur = &instance{gen: in.gen + 1}
			in = b.cur
		default:
			return in, nil
		}
	}
	fresh, err := b.launch(ctx, in.gen)
	if err != nil {
		return nil, err
	}
	b.cur = fresh
	return fresh, nil
}

// PID is the browser process's id, 0 when none runs.
func (b *Browser) PID() int {
	b.mu.Lock()
	in := b.cur
	b.mu.Unlock()
	if in == nil || in.ctx == nil {
		return 0
	}
	if p := chromedp.FromContext(in.ctx).Browser.Process(); p != nil {
		return p.Pid
	}
	return 0
}

// Watch checks the browser's memory every interval until ctx ends, restarting it when
// its processes together hold more than MaxRSS (reason "memory"), and notices a browser
// that died between pages.
func (b *Browser) Watch(ctx context.Context, interval time.Duration, onRSS func(bytes int64)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		in := b.cur
		b.mu.Unlock()
		if in == nil || in.ctx == nil {
			continue
		}
		pid := b.PID()
		if pid == 0 {
			continue
		}
		rss := TreeRSS(pid)
		onRSS(rss)
		if b.o.MaxRSS > 0 && rss > b.o.MaxRSS {
			b.o.Log.Warn("browser over its memory cap", "rss", rss, "cap", b.o.MaxRSS)
			b.Restart(in.gen, "memory")
		}
	}
}

// Close stops the browser.
func (b *Browser) Close() {
	b.mu.Lock()
	in := b.cur
	b.closed = true
	b.mu.Unlock()
	if in != nil && in.cancel != nil {
		in.cancel()
	}
}

// TreeRSS is the resident memory of pid and its descendants, from /proc (0 elsewhere).
func TreeRSS(pid int) int64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	parent := map[int]int{}
	rss := map[int]int64{}
	page := int64(os.Getpagesize())
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces) start after the last ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 22 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		pages, _ := strconv.ParseInt(f[21], 10, 64)
		parent[p], rss[p] = pp, pages*page
	}
	var total int64
	for p := range rss {
		for q := p; q > 1; q = parent[q] {
			if q == pid {
				total += rss[p]
				break
			}
		}
	}
	return total
}
