package itest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/testwait"
)

// runnerEnv is the environment of a runner under test: a real NATS and, when rs is not
// nil, a real Redis.
func runnerEnv(ns *natsembed.Server, rs *redisproc.Server) map[string]string {
	env := map[string]string{
		"TRAWL_NATS_URL":      ns.URL(),
		"TRAWL_HTTP_ADDR":     "127.0.0.1:0",
		"TRAWL_STREAM_MEMORY": "true",
	}
	if rs != nil {
		env["TRAWL_REDIS_URL"] = rs.URL()
	}
	return env
}

func startRunner(t *testing.T, env map[string]string, opts ...runner.Option) *runner.Runner {
	t.Helper()
	ctx, cancel := context.WithTimeout(testwait.Context(t), 15*time.Second)
	defer cancel()
	r, err := runner.Start(ctx, "itest", envconfig.LoadCommon(envconfig.FromMap(env), "127.0.0.1:0"), slog.Default(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// runInBackground runs r until the returned stop is called; stop returns RunLoops' error.
func runInBackground(t *testing.T, r *runner.Runner) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(testwait.Context(t))
	done := make(chan error, 1)
	go func() { done <- r.RunLoops(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			t.Fatal("RunLoops did not return after its context ended")
			return nil
		}
	}
}

func httpOK(addr, path string) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return nil
}

// A loop finishing its work after the stop still has NATS, Redis and the probes; the
// service's closers run after the loops and before NATS and Redis close.
func TestRunnerShutdownOrder(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t)
	rs := redisproc.StartT(t, redisproc.Options{})
	r := startRunner(t, runnerEnv(ns, rs), runner.WithRedis())
	ctx := testwait.Context(t)
	if _, err := r.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDER", Subjects: []string{"order.>"}}); err != nil {
		t.Fatal(err)
	}

	var (
		mu     sync.Mutex
		events []string
	)
	record := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, fmt.Sprintf(format, args...))
	}
	r.Go("drain", func(ctx context.Context) error {
		<-ctx.Done()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, perr := r.JS.Publish(wctx, "order.drain", []byte("x"))
		rerr := r.Redis.Set(wctx, "itest:drain", "1", 0).Err()
		herr := httpOK(r.Addr(), "/readyz")
		record("loop: publish=%v redis=%v readyz=%v", perr, rerr, herr)
		return nil
	})
	r.OnClose(func() {
		rerr := r.Redis.Ping(context.Background()).Err()
		herr := httpOK(r.Addr(), "/healthz")
		record("closer: nats closed=%v redis=%v http down=%v", r.NC.IsClosed(), rerr, herr != nil)
	})
	stop := runInBackground(t, r)
	testwait.Eventually(t, 10*time.Second, "the runner to be ready", func() bool { return httpOK(r.Addr(), "/readyz") == nil })
	addr := r.Addr()
	if err := stop(); err != nil {
		t.Fatalf("RunLoops: %v", err)
	}

	want := []string{
		"loop: publish=<nil> redis=<nil> readyz=<nil>",
		"closer: nats closed=false redis=<nil> http down=true",
	}
	if strings.Join(events, "\n") != strings.Join(want, "\n") {
		t.Errorf("shutdown went\n%s\nwant\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
	}
	if !r.NC.IsClosed() {
		t.Error("NATS connection still open after Run")
	}
	if err := r.Redis.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("Redis after Run: %v, want %v", err, redis.ErrClosed)
	}
	if httpOK(addr, "/healthz") == nil {
		t.Error("/healthz still served after Run")
	}
}

// While the client reconnects, a publish fails at once and nothing is kept to be sent
// later: the server may come back older, and a message its publisher took for failed (and
// gave up on, or did again its own way) must not be stored after that.
func TestRunnerBuffersNothingWhileReconnecting(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t)
	r := startRunner(t, runnerEnv(ns, nil))
	nc, js := ownConnection(t, ns)
	defer nc.Close()
	ctx := testwait.Context(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FLUSH", Subjects: []string{"flush.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	stop := runInBackground(t, r)
	testwait.Eventually(t, 10*time.Second, "the runner to be ready", func() bool { return httpOK(r.Addr(), "/readyz") == nil })

	ns.StopKeepingStore()
	testwait.Eventually(t, 10*time.Second, "the runner to notice NATS is gone", func() bool { return !r.NC.IsConnected() })
	if err := r.NC.Publish("flush.a", []byte("while reconnecting")); !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Fatalf("core publish while reconnecting: %v, want %v", err, nats.ErrReconnectBufExceeded)
	}
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := r.JS.Publish(pctx, "flush.b", []byte("while reconnecting"))
	cancel()
	if !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Fatalf("JetStream publish while reconnecting: %v, want %v", err, nats.ErrReconnectBufExceeded)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("JetStream publish while reconnecting failed after %s, want at once", took)
	}
	if err := ns.Restart(); err != nil {
		t.Fatal(err)
	}
	// The client reports itself connected a moment before it takes publishes again.
	testwait.EventuallyState(t, 10*time.Second, "a publish once NATS is back", func() (bool, string) {
		_, err := r.JS.Publish(ctx, "flush.c", []byte("once back"))
		return err == nil, fmt.Sprint(err)
	})
	if err := stop(); err != nil {
		t.Fatalf("RunLoops: %v", err)
	}
	var info *jetstream.StreamInfo
	testwait.EventuallyState(t, 10*time.Second, "the test's own connection to read the stream", func() (bool, string) {
		str, err := js.Stream(ctx, "FLUSH")
		if err == nil {
			info, err = str.Info(ctx, jetstream.WithSubjectFilter("flush.>"))
		}
		return err == nil, fmt.Sprint(err)
	})
	if info.State.Msgs != 1 || info.State.Subjects["flush.c"] != 1 {
		t.Errorf("stream holds %v, want only the message published once NATS was back", info.State.Subjects)
	}
}

func TestRunnerLoopErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		failing func(ctx context.Context) error
		want    string
	}{
		{"an error", func(context.Context) error { return boom }, "itest: failing: boom"},
		{"an early return", func(context.Context) error { return nil }, "itest: failing: ended while the service was running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := natsembed.StartT(t)
			r := startRunner(t, runnerEnv(ns, nil))
			stopped := make(chan struct{})
			r.Go("waiting", func(ctx context.Context) error {
				<-ctx.Done()
				close(stopped)
				return nil
			})
			r.Go("failing", tc.failing)
			done := make(chan error, 1)
			go func() { done <- r.RunLoops(testwait.Context(t)) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("a failing loop did not stop RunLoops")
			}
			select {
			case <-stopped:
			default:
				t.Error("the other loop was not stopped")
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("RunLoops = %v, want %q", err, tc.want)
			}
			if tc.name == "an error" && !errors.Is(err, boom) {
				t.Errorf("RunLoops = %v does not wrap the loop's error", err)
			}
			if !r.NC.IsClosed() {
				t.Error("NATS still open after a failed Run")
			}
		})
	}
}

// A consume loop's options follow what its service started with: it waits on the crawl
// guard exactly when the service uses Redis, and settles its acks exactly when the service
// asked for it (the stages whose acks stand for what a later stage depends on); only such a
// service serves the count of messages handed back for want of evidence.
func TestRunnerConsumeOptions(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t)
	rs := redisproc.StartT(t, redisproc.Options{})
	terminated := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "terminated_total"}, []string{"reason"})
	for _, tc := range []struct {
		name   string
		fsync  string
		opts   []runner.Option
		ready  bool
		settle time.Duration
		served bool // trawl_settle_handed_back_total
	}{
		{"without redis", "1s", nil, false, 0, false},
		{"with redis, acks at once", "1s", []runner.Option{runner.WithRedis()}, true, 0, false},
		{"settling at 1s", "1s", []runner.Option{runner.WithRedis(), runner.WithSettling()}, true, 3 * time.Second, true},
		{"settling at always", "always", []runner.Option{runner.WithRedis(), runner.WithSettling()}, true, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnerEnv(ns, rs)
			env["TRAWL_FSYNC"] = tc.fsync
			r := startRunner(t, env, tc.opts...)
			o := r.ConsumeOptions(terminated)
			if (o.Ready != nil) != tc.ready {
				t.Errorf("Ready set: %v, want %v", o.Ready != nil, tc.ready)
			} else if o.Ready != nil {
				if err := o.Ready(testwait.Context(t)); err != nil {
					t.Errorf("Ready with Redis up = %v", err)
				}
			}
			if o.SettleAfter != tc.settle {
				t.Errorf("SettleAfter %s, want %s", o.SettleAfter, tc.settle)
			}
			if (o.Kept != nil) != (tc.settle > 0) {
				t.Errorf("Kept set: %v, want %v", o.Kept != nil, tc.settle > 0)
			}
			families, err := r.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			served := false
			for _, f := range families {
				served = served || f.GetName() == "trawl_settle_handed_back_total"
			}
			if served != tc.served {
				t.Errorf("trawl_settle_handed_back_total served: %v, want %v", served, tc.served)
			}
		})
	}
}

// A stop during start-up (here: still waiting for Redis) is clean.
func TestRunnerStopDuringStartUp(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t)
	env := runnerEnv(ns, nil)
	env["TRAWL_REDIS_URL"] = "redis://" + deadAddr(t) + "/0"
	logs := &testwait.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithCancel(testwait.Context(t))
	done := make(chan error, 1)
	go func() {
		done <- runner.NewThenRun(ctx, log, func(ctx context.Context) (loopsOnly, error) {
			r, err := runner.Start(ctx, "itest", envconfig.LoadCommon(envconfig.FromMap(env), "127.0.0.1:0"), log, runner.WithRedis())
			return loopsOnly{r}, err
		})
	}()
	testwait.Eventually(t, 10*time.Second, "start-up to wait for redis", func() bool { return strings.Contains(logs.String(), "waiting for redis") })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("NewThenRun after a stop during start-up = %v, want nil", err)
	}
}

// The exit code of a service binary, from a real process and a real signal.
func TestRunnerExitCode(t *testing.T) {
	t.Parallel()
	if scenario := os.Getenv("TRAWL_TEST_RUNNER_CHILD"); scenario != "" {
		runnerChild(scenario)
		return
	}
	ns := natsembed.StartT(t)
	rs := redisproc.StartT(t, redisproc.Options{})
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name, scenario string
		env            map[string]string
		signalAfter    string // a log line; "" sends no signal
		want           int
	}{
		{"signal while waiting for redis", "serve", map[string]string{"TRAWL_REDIS_URL": "redis://" + deadAddr(t) + "/0"}, "waiting for redis", runner.ExitOK},
		{"signal while waiting for nats", "serve", map[string]string{"TRAWL_NATS_URL": "nats://" + deadAddr(t)}, "starting", runner.ExitOK},
		{"signal when running", "serve", nil, "itest running", runner.ExitOK},
		{"start-up fails", "serve", map[string]string{"TRAWL_HTTP_ADDR": busy.Addr().String()}, "", runner.ExitFailed},
		{"a loop fails", "fail", nil, "", runner.ExitFailed},
		{"bad configuration", "serve", map[string]string{"TRAWL_SHARDS": "0"}, "", runner.ExitConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestRunnerExitCode$")
			cmd.Env = append(os.Environ(), "TRAWL_TEST_RUNNER_CHILD="+tc.scenario, "TRAWL_HTTP_ADDR=127.0.0.1:0",
				"TRAWL_NATS_URL="+ns.URL(), "TRAWL_REDIS_URL="+rs.URL(), "TRAWL_STREAM_MEMORY=true")
			for k, v := range tc.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			seen := make(chan struct{})
			var out testwait.Buffer
			readDone := make(chan struct{})
			go func() {
				defer close(readDone)
				sc := bufio.NewScanner(stderr)
				once := sync.Once{}
				for sc.Scan() {
					fmt.Fprintln(&out, sc.Text())
					if tc.signalAfter != "" && strings.Contains(sc.Text(), tc.signalAfter) {
						once.Do(func() { close(seen) })
					}
				}
			}()
			if tc.signalAfter != "" {
				select {
				case <-seen:
				case <-time.After(15 * time.Second):
					_ = cmd.Process.Kill()
					t.Fatalf("no %q from the child:\n%s", tc.signalAfter, out.String())
				}
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			// The child's stderr ends when it exits; Wait must come after the last read.
			select {
			case <-readDone:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("the child did not exit:\n%s", out.String())
			}
			_ = cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != tc.want {
				t.Fatalf("exit code %d, want %d; child's log:\n%s", got, tc.want, out.String())
			}
		})
	}
}

// runnerChild is the service binary of TestRunnerExitCode.
func runnerChild(scenario string) {
	c := envconfig.LoadCommon(&envconfig.Reader{}, "127.0.0.1:0")
	runner.Main("itest", c, c.Validate(), func(ctx context.Context, log *slog.Logger) (loopsOnly, error) {
		log.Info("starting")
		r, err := runner.Start(ctx, "itest", c, log, runner.WithRedis())
		if err != nil {
			return loopsOnly{}, err
		}
		r.Go("work", func(ctx context.Context) error {
			if scenario == "fail" {
				return errors.New("work failed")
			}
			<-ctx.Done()
			return nil
		})
		return loopsOnly{r}, nil
	})
}

// loopsOnly is a service that is nothing but its runner's loops.
type loopsOnly struct{ *runner.Runner }

func (s loopsOnly) Run(ctx context.Context) error { return s.RunLoops(ctx) }

// deadAddr is a local address that refuses connections for the whole test: a socket is
// bound to it and never listens, so no other test's server can take the port meanwhile,
// as it could a port found free and released.
func deadAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind a dead address: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// ownConnection is the test's own client, apart from the runner's.
func ownConnection(t *testing.T, ns *natsembed.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
	defer cancel()
	nc, js, err := natsx.Connect(ctx, ns.URL(), "itest", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// A check registered with GoOnReconnect runs each time NATS is back, not before; a check
// that keeps failing is tried the stated number of times, then given up with an error
// log, and the service goes on.
func TestGoOnReconnect(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t)
	logs := &testwait.Buffer{}
	ctx, cancel := context.WithTimeout(testwait.Context(t), 15*time.Second)
	defer cancel()
	r, err := runner.Start(ctx, "itest", envconfig.LoadCommon(envconfig.FromMap(runnerEnv(ns, nil)), "127.0.0.1:0"),
		slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	var mu sync.Mutex
	ok, failing := 0, 0
	var lostAts []time.Time
	r.GoOnReconnect("good check", 3, time.Millisecond, "nothing", func(_ context.Context, lostAt time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		ok++
		lostAts = append(lostAts, lostAt)
		return nil
	})
	r.GoOnReconnect("bad check", 3, time.Millisecond, "the bad thing stays", func(context.Context, time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		failing++
		return errors.New("no luck")
	})
	stop := runInBackground(t, r)
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return ok, failing
	}
	if o, f := counts(); o != 0 || f != 0 {
		t.Fatalf("checks ran %d and %d times before any reconnect, want 0", o, f)
	}
	var restarts []time.Time
	for round := 1; round <= 2; round++ {
		restarts = append(restarts, time.Now())
		if err := ns.Restart(); err != nil {
			t.Fatal(err)
		}
		testwait.EventuallyState(t, 10*time.Second, fmt.Sprintf("the checks of reconnect %d", round), func() (bool, string) {
			o, f := counts()
			return o == round && f == 3*round && strings.Count(logs.String(), "bad check after a NATS reconnect given up") == round,
				fmt.Sprintf("good check ran %d times, bad check %d; log:\n%s", o, f, logs.String())
		})
	}
	// Each check is told when the connection was lost: during its restart, after the
	// restart began and before the next.
	mu.Lock()
	for i, lost := range lostAts {
		if lost.Before(restarts[i]) || (i+1 < len(restarts) && !lost.Before(restarts[i+1])) {
			t.Errorf("check %d told the connection was lost at %s; the restart began at %s", i+1, lost.Format(time.StampMicro), restarts[i].Format(time.StampMicro))
		}
	}
	mu.Unlock()
	if !strings.Contains(logs.String(), "the bad thing stays") {
		t.Errorf("the give-up log does not say what is at risk:\n%s", logs.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("a check that failed stopped the service: %v", err)
	}
}

// A stop that waits for a loop still finishing what it holds says which one, while it
// waits, rather than hanging without a word.
func TestRunnerStopNamesTheLoopsItWaitsFor(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t)
	var logged syncBuffer
	ctx, cancel := context.WithTimeout(testwait.Context(t), 15*time.Second)
	defer cancel()
	r, err := runner.Start(ctx, "itest", envconfig.LoadCommon(envconfig.FromMap(runnerEnv(ns, nil)), "127.0.0.1:0"),
		slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	release := make(chan struct{})
	r.Go("quick", func(ctx context.Context) error { <-ctx.Done(); return nil })
	r.Go("slow drain", func(ctx context.Context) error { <-ctx.Done(); <-release; return nil })
	stop := runInBackground(t, r)
	testwait.Eventually(t, 10*time.Second, "the runner to be ready", func() bool { return httpOK(r.Addr(), "/readyz") == nil })
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	testwait.Eventually(t, 10*time.Second, "the stop to name the loop it waits for", func() bool {
		l := logged.String()
		return strings.Contains(l, `msg="stopping: waiting for loops to finish what they hold"`) && strings.Contains(l, `loops="[slow drain]"`)
	})
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log sink safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
