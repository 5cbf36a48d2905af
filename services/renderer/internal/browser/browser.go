// Package browser keeps one headless Chromium running for a renderer: it starts it
// isolated — Chromium's own sandbox on, as a user that is not root, in a network namespace
// of its own with nothing in it, with an environment of a few allow-listed variables and
// flags that leave it no network (every request must be answered through the DevTools
// Fetch domain; see services/renderer/README.md, "The renderer") — opens tabs on it, watches its
// memory, and restarts it when it crashed, hung or grew past its cap. chromedp
// (github.com/chromedp/chromedp) drives it: a maintained, pure Go DevTools-protocol
// client with typed Fetch-domain commands, no Node.js or driver binary beside the browser.
package browser

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
)

// Options configure a Browser.
type Options struct {
	Path   string // the Chromium binary
	JSHeap int64  // V8 old-space limit per renderer process, bytes; 0 = Chromium's own
	MaxRSS int64  // memory of all the browser's processes (TreeMemory) before a restart; 0 = no watch
	// DataDir is where each launch's profile directory is made (default: the system's).
	DataDir string
	// UID and GID are the user the browser runs as when the renderer runs as root:
	// Chromium's sandbox refuses root. Ignored when the renderer is not root (the browser
	// runs as the renderer's user).
	UID, GID int
	// AllowUnsandboxed lets the browser run without Chromium's sandbox and without a
	// network namespace of its own when the kernel cannot give them; otherwise Start fails.
	AllowUnsandboxed bool
	Log              *slog.Logger
	// OnRestart is told why the browser was restarted ("crash", "hang", "memory").
	OnRestart func(reason string)
}

// Browser is a running Chromium that restarts itself. It is safe for concurrent use.
type Browser struct {
	o Options

	mu     sync.Mutex
	cur    *instance
	closed bool
	// launching is closed when the launch in progress ends; nil when none runs. A launch
	// takes seconds and runs outside mu, so that Check, Lost, PID, Watch and Close never
	// wait for it; tabs asked for meanwhile wait for it on this.
	launching chan struct{}
	// unsandboxed is set once the kernel refused the sandbox and AllowUnsandboxed let the
	// browser run without it: later launches do not ask again.
	unsandboxed atomic.Bool
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

// ErrNoSandbox is wrapped by Start's error when the kernel cannot give the browser its
// sandbox (no user namespaces for the browser's user) and AllowUnsandboxed is false.
var ErrNoSandbox = errors.New("no sandbox for the browser")

// Start launches the browser.
func Start(ctx context.Context, o Options) (*Browser, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.OnRestart == nil {
		o.OnRestart = func(string) {}
	}
	if err := checkProfileRoom(o.DataDir); err != nil {
		return nil, err
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
// (an unintercepted request fails instead of leaving; loopback included), no name
// resolution, WebRTC kept to the proxy (so it has no UDP at all), no service workers (a
// worker's requests are not the page's to intercept), no background traffic. Beneath
// them the browser runs in a network namespace with nothing in it (sysProcAttr): a way
// out these flags miss still reaches nothing. Each flag is checked against the installed
// Chromium by the renderer's itest (TestRenderNoOwnConnections).
func (b *Browser) flags(dir string, sandboxed bool) []chromedp.ExecAllocatorOption {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(b.o.Path),
		chromedp.Headless,
		// Set, even false: chromedp adds --no-sandbox by itself for a root process.
		chromedp.Flag("no-sandbox", !sandboxed),
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 1000),
		chromedp.ProxyServer("http://127.0.0.1:9"),
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND"),
		chromedp.Flag("webrtc-ip-handling-policy", "disable_non_proxied_udp"),
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
		// Only the variables of env reach the browser: never the renderer's TRAWL_*.
		chromedp.NoInheritEnv,
		chromedp.Env(browserEnv(dir)...),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) { cmd.SysProcAttr = b.sysProcAttr(sandboxed) }),
	}
	if b.o.JSHeap > 0 {
		opts = append(opts, chromedp.Flag("js-flags", fmt.Sprintf("--max-old-space-size=%d", b.o.JSHeap>>20)))
	}
	return opts
}

// browserEnv is the browser's whole environment: a fixed PATH, the renderer's locale and
// time zone, and its home, temporary and XDG directories inside its own profile
// directory. Nothing else of the renderer's environment (credentials in TRAWL_NATS_URL,
// TRAWL_REDIS_URL, …) reaches a process that runs pages' JavaScript.
func browserEnv(dir string) []string {
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"LANG=C.UTF-8", // unless the renderer's, below, replaces it (the last one counts)
		"HOME=" + dir,
		"TMPDIR=" + dir,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(dir, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(dir, ".local", "share"),
		"XDG_RUNTIME_DIR=" + dir,
	}
	for _, k := range []string{"LANG", "LC_ALL", "TZ"} {
		if v, ok := os.LookupEnv(k); ok && v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// sysProcAttr starts the browser as its user, in a user namespace of its own (mapping that
// user alone) holding a network namespace of its own: Chromium's sandbox nests its own
// namespaces inside, and the browser has no network interface but a loopback that is
// down. Unsandboxed (the kernel gave no user namespace) it gets neither namespace.
// The browser dies with the thread that started it (chromedp's default, replaced here).
func (b *Browser) sysProcAttr(sandboxed bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = b.o.UID, b.o.GID
		a.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	if sandboxed {
		a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		// Root maps its target user, who may then drop its groups; a user that is not
		// root may map only itself, with setgroups denied.
		a.GidMappingsEnableSetgroups = os.Getuid() == 0
	}
	return a
}

// noSandbox tells a launch that failed for want of a sandbox: the kernel refused the
// browser's user namespace, or Chromium found none for its own.
func noSandbox(err error) bool {
	for _, e := range []error{syscall.EPERM, syscall.ENOSPC, syscall.EUSERS, syscall.EINVAL} {
		if errors.Is(err, e) {
			return true
		}
	}
	s := err.Error()
	return strings.Contains(s, "No usable sandbox") || strings.Contains(s, "operation not permitted") ||
		strings.Contains(s, "no space left on device")
}

// unsandboxedRisk is what an operator accepts with TRAWL_RENDER_ALLOW_UNSANDBOXED.
const unsandboxedRisk = "the browser runs WITHOUT Chromium's sandbox and without a network namespace of its own: " +
	"a page exploiting a bug of Chromium's renderer gets the browser user's rights on this host (its files, its processes, " +
	"its network), and only Chromium's flags keep pages' own connections from leaving"

func (b *Browser) launch(ctx context.Context, gen int) (*instance, error) {
	sandboxed := !b.unsandboxed.Load()
	in, err := b.launchAttempts(ctx, gen, sandboxed)
	if err == nil || !sandboxed || !noSandbox(err) {
		return in, err
	}
	if !b.o.AllowUnsandboxed {
		return nil, fmt.Errorf("%w: %v; the renderer does not run pages' JavaScript unsandboxed: allow user namespaces "+
			"(sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, AppArmor's "+
			"kernel.apparmor_restrict_unprivileged_userns, a container's seccomp profile), or set "+
			"TRAWL_RENDER_ALLOW_UNSANDBOXED=true to accept the risk", ErrNoSandbox, err)
	}
	b.o.Log.Warn("no sandbox for the browser; running it unsandboxed as TRAWL_RENDER_ALLOW_UNSANDBOXED allows", "risk", unsandboxedRisk, "err", err)
	b.unsandboxed.Store(true)
	return b.launchAttempts(ctx, gen, false)
}

// startAttempts bounds the launches of one start. Chromium can crash before it listens,
// rarely, on a loaded machine (seen in CI and in this package's tests, each time just
// after another browser was stopped; its crash handler reports, then the process is
// gone): such a launch is tried again, a moment later. A browser that cannot be
// executed, or finds no sandbox, fails at once.
const startAttempts = 3

// startRetryPause is the pause before the second launch; the third waits twice as long.
var startRetryPause = 500 * time.Millisecond

// launchAttempts launches the browser, again when it died at start-up, up to startAttempts
// times in all.
func (b *Browser) launchAttempts(ctx context.Context, gen int, sandboxed bool) (*instance, error) {
	pause := startRetryPause
	for attempt := 1; ; attempt++ {
		in, err := b.launchOnce(ctx, gen, sandboxed)
		if err == nil || !diedAtStart(err) {
			return in, err
		}
		if attempt == startAttempts {
			return nil, fmt.Errorf("%w (launch %d of %d; each died before it listened)", err, attempt, startAttempts)
		}
		b.o.Log.Warn("the browser died at start-up; launching it again", "attempt", attempt, "of", startAttempts, "in", pause, "err", err)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, fmt.Errorf("%w; waiting to launch it again: %w", err, ctx.Err())
		}
		pause *= 2
	}
}

// diedAtStart tells a browser process that started and ended (or never answered) before
// it listened from one that could not be executed or found no sandbox.
func diedAtStart(err error) bool {
	var execErr *exec.Error
	var pathErr *fs.PathError
	switch {
	case errors.As(err, &execErr), errors.As(err, &pathErr), noSandbox(err),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return strings.Contains(err.Error(), chromedpExited) || errors.Is(err, errNoAnswer)
}

// chromedpExited starts chromedp's error for a browser whose output ended before it
// printed its DevTools address (chromedp's readOutputTo; the error wraps nothing).
const chromedpExited = "chrome failed to start"

// errNoAnswer is a launch the watchdog gave up.
var errNoAnswer = errors.New("no answer within 30s")

func (b *Browser) launchOnce(ctx context.Context, gen int, sandboxed bool) (*instance, error) {
	dir, err := b.profileDir()
	if err != nil {
		return nil, err
	}
	actx, acancel := chromedp.NewExecAllocator(context.WithoutCancel(ctx), b.flags(dir, sandboxed)...)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(func(string, ...any) {}), chromedp.WithErrorf(func(f string, a ...any) {
		b.o.Log.Debug("chromium: " + fmt.Sprintf(f, a...))
	}))
	pid := 0 // the browser's, once it started
	cancel := func() {
		procs := tree(pid)
		bcancel()
		acancel() // kills the browser and waits for it
		// Its children outlive it a moment, and the network service writes its cache index
		// into the profile as it exits: removed before, the profile would be made again and
		// kept until the renderer's next start.
		if left := waitGone(procs, profileRemoveWait); left > 0 {
			b.o.Log.Warn("browser processes still running after the browser stopped; removing its profile anyway",
				"processes", left, "waited", profileRemoveWait, "dir", dir)
		}
		_ = os.RemoveAll(dir)
	}
	// The first run starts the process; it carries no timeout (that would end the browser),
	// so it is bounded by a watchdog instead.
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(bctx) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		err = errNoAnswer
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("browser: start %s: %w", b.o.Path, err)
	}
	c := chromedp.FromContext(bctx)
	in := &instance{gen: gen, ctx: bctx, cancel: cancel, dir: dir, lost: c.Browser.LostConnection, stopped: make(chan struct{})}
	if p := c.Browser.Process(); p != nil {
		pid = p.Pid
	}
	b.o.Log.Info("browser started", "pid", pid, "generation", gen, "sandboxed", sandboxed)
	return in, nil
}

// profileRemoveWait bounds how long a stopped browser's processes are waited for before its
// profile is removed.
const profileRemoveWait = 5 * time.Second

// waitGone waits until none of procs runs (gone, or a zombie: it writes nothing more), at
// most limit, and returns how many still run.
func waitGone(procs map[int]int64, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		left := 0
		for p := range procs {
			if running(p) {
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running tells a process that exists and is not a zombie.
func running(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// profileDir makes a launch's profile directory, owned by the browser's user.
func (b *Browser) profileDir() (string, error) {
	dir, err := os.MkdirTemp(b.o.DataDir, fmt.Sprintf("%s%d-", profilePrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("browser: profile directory: %w", err)
	}
	if os.Getuid() != 0 {
		return dir, nil
	}
	if err := os.Chown(dir, b.o.UID, b.o.GID); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("browser: profile directory: %w", err)
	}
	if err := reachable(filepath.Dir(dir), b.o.UID, b.o.GID); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("browser: profile directory %s: %w; give the renderer a TMPDIR the browser's user can enter", dir, err)
	}
	return dir, nil
}

// reachable checks that uid/gid (no supplementary groups) may enter dir and each of its
// parents: the browser's profile directory is inside.
func reachable(dir string, uid, gid int) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		mode := fi.Mode().Perm()
		var can bool
		switch {
		case int(st.Uid) == uid:
			can = mode&0o100 != 0
		case int(st.Gid) == gid:
			can = mode&0o010 != 0
		default:
			can = mode&0o001 != 0
		}
		if !can {
			return fmt.Errorf("uid %d cannot enter %s (mode %v, owner %d:%d)", uid, d, mode, st.Uid, st.Gid)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// profilePrefix starts each launch's profile directory, followed by the renderer's pid.
const profilePrefix = "trawl-renderer-"

// maxProfileDir is the longest profile directory path a browser starts in. The profile
// directory is the browser's TMPDIR, where Chromium makes its singleton socket
// (.org.chromium.Chromium.XXXXXX/SingletonSocket), and a Unix socket's path has room for
// 107 bytes: in a longer one Chromium exits at start-up without saying why (Debian's
// chromium starts with a TMPDIR of 62 bytes, not 63).
const maxProfileDir = 62

// profileNameMax is the longest name profileDir gives: the prefix, a pid (Linux's largest
// has 7 digits), "-" and os.MkdirTemp's random part (at most 10 digits).
const profileNameMax = len(profilePrefix) + 7 + 1 + 10

// checkProfileRoom refuses a data directory whose profile directories could be too long a
// path for the browser to start in, naming the fix, rather than leaving it to the chance
// of a pid's and a random name's lengths.
func checkProfileRoom(dataDir string) error {
	if dataDir == "" {
		dataDir = os.TempDir()
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return fmt.Errorf("browser: profile directory: %w", err)
	}
	if n := len(abs) + 1 + profileNameMax; n > maxProfileDir {
		return fmt.Errorf("browser: the profile directories would be made in %s, whose path (%d bytes) leaves no room for "+
			"Chromium's socket in them (a Unix socket path holds 107 bytes); start the renderer with a TMPDIR of at most %d bytes, such as /tmp",
			abs, len(abs), maxProfileDir-1-profileNameMax)
	}
	return nil
}

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
	if err == nil {
		err = denyDownloads(ctx, tctx)
	}
	if err != nil {
		cancel()
		b.Check(in.gen)
		return nil, fmt.Errorf("browser: open tab: %w", err)
	}
	return &Tab{Ctx: tctx, gen: in.gen, b: b, cancel: cancel, in: in}, nil
}

// denyDownloads refuses every download of the tab's browser context: a download is not
// the page's to make, and would write the profile's disk.
func denyDownloads(ctx, tab context.Context) error {
	cctx, cancel := context.WithTimeout(tab, 5*time.Second)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	_, err := chromedp.CallBrowser(cctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorDeny, BrowserContextID: chromedp.FromContext(tab).BrowserContextID})
	if err != nil {
		return fmt.Errorf("deny downloads: %w", err)
	}
	return nil
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

// current returns the running instance, launching one when the last was stopped. One
// launch runs at a time; a caller that finds one under way waits for it, bounded by its
// ctx.
func (b *Browser) current(ctx context.Context) (*instance, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, errClosed
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
				b.mu.Unlock()
				return in, nil
			}
		}
		if wait := b.launching; wait != nil {
			b.mu.Unlock()
			select {
			case <-wait:
				continue // launched, or failed: then this caller tries in turn
			case <-ctx.Done():
				return nil, fmt.Errorf("browser: waiting for generation %d to launch: %w", in.gen, ctx.Err())
			}
		}
		done := make(chan struct{})
		b.launching = done
		b.mu.Unlock()

		fresh, err := b.launch(ctx, in.gen)

		b.mu.Lock()
		b.launching = nil
		close(done)
		if err == nil && b.closed {
			fresh.cancel() // closed while it launched: nobody will stop it later
			fresh, err = nil, errClosed
		}
		if err == nil {
			b.cur = fresh
		}
		b.mu.Unlock()
		return fresh, err
	}
}

var errClosed = errors.New("browser: closed")

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
		rss := TreeMemory(pid)
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

// TreeMemory is the memory of pid and its descendants, from /proc (0 elsewhere): each
// process's proportional set size (PSS, /proc/<pid>/smaps_rollup), in which a page shared
// by n processes counts 1/n in each. A browser's processes share most of their pages (the
// zygote forks every renderer; libraries, fonts and the V8 snapshot are mapped by all), so
// summing their RSS counts those pages once per process: a browser holding 600 MB read as
// 2 GB and was restarted for memory it did not hold. A process whose smaps_rollup cannot
// be read counts its RSS.
func TreeMemory(pid int) int64 {
	var total int64
	for p, rss := range tree(pid) {
		if pss, ok := procPSS(p); ok {
			total += pss
		} else {
			total += rss
		}
	}
	return total
}

// tree is pid and its descendants, each with its resident set size, from /proc (empty
// elsewhere).
func tree(pid int) map[int]int64 {
	under := map[int]int64{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return under
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
	for p := range rss {
		for q := p; q > 1; q = parent[q] {
			if q == pid {
				under[p] = rss[p]
				break
			}
		}
	}
	return under
}

// procPSS is pid's proportional set size in bytes, from /proc/<pid>/smaps_rollup.
func procPSS(pid int) (int64, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "Pss:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}
