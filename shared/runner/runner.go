// Package runner is the one shape of a Trawl service process. A service is a package
// with New (start-up: Start, then what is the service's own) returning a value whose Run
// registers the service's loops and hands over to RunLoops, and whose Close releases what
// New opened when Run is never called. main.go gives New to Main, which calls NewThenRun.
//
// Start brings up what every service needs — NATS, the JetStream topology, Redis and the
// crawl's identity when the service uses Redis, the metrics registry and the /metrics,
// /healthz, /readyz listener — and the service adds its own parts and registers its loops
// with Go. RunLoops runs the loops under one group until the context ends or one loop
// fails, then shuts down in order:
//
//  1. the loops' context ends; each finishes what it holds (drains, acks, publishes);
//  2. once every loop has returned, the HTTP listener and the crawl watch stop, so
//     /metrics and the probes answer while the loops drain;
//  3. the service's own closers run (OnClose, last registered first);
//  4. NATS is flushed (acks and publishes still buffered reach the server) and closed;
//  5. Redis is closed.
//
// Exit rule: a stop (SIGINT, SIGTERM: the context ends) before the service is ready —
// while it still waits for NATS, Redis or its own start-up — is a clean stop, not a
// failure: Run returns nil and Main exits 0, as it does for a stop after start-up. A
// start-up that fails on its own, or a loop that fails, exits 1; a bad configuration
// exits 2. NewThenRun holds the rule.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/crawlid"
	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/topology"
)

// FlushTimeout bounds the NATS flush on close: long enough for the server to take the
// last acks and publishes written, short enough not to hold a supervisor's restart. A
// client that is reconnecting holds nothing to flush (natsx.Connect).
const FlushTimeout = 2 * time.Second

// Option changes what Start brings up.
type Option func(*options) error

type options struct {
	redis    bool
	bodies   bool
	settling bool
}

// WithRedis connects to TRAWL_REDIS_URL and opens the crawl's identity (crawlid): Redis
// becomes part of readiness, and Crawl.Ready is what the service's consume loops wait on for the service's loops.
func WithRedis() Option {
	return func(o *options) error { o.redis = true; return nil }
}

// WithBodies opens the JetStream object store of page bodies sent by reference.
func WithBodies() Option {
	return func(o *options) error { o.bodies = true; return nil }
}

// WithSettling makes the service's ConsumeBatches loops settle their acks: a handled
// message is acked a TRAWL_FSYNC window after its handler returned, and only once NATS
// and Redis showed they kept what it wrote (see ConsumeOptions). It is for the stages
// whose acks stand for writes a later stage depends on (dedup, parser, scheduler); a
// service without it acks at once and serves no trawl_settle_ series.
func WithSettling() Option {
	return func(o *options) error { o.settling = true; return nil }
}

// Runner is a started service's shared plumbing. Its exported fields are set by Start and
// read-only afterwards.
type Runner struct {
	Name     string
	Log      *slog.Logger
	NC       *nats.Conn
	JS       jetstream.JetStream
	Topology topology.Options
	Redis    redis.UniversalClient // nil without WithRedis
	Crawl    *crawlid.Guard        // nil without WithRedis
	Bodies   jetstream.ObjectStore // nil without WithBodies
	Registry *prometheus.Registry
	// Metrics declares the service's series (trawl_<name>_…) in Registry: the one way.
	Metrics *obs.Metrics
	HTTP    *obs.Server

	loops     []loop
	closers   []func()
	closeOnce sync.Once
	reconnMu  sync.Mutex
	onReconn  []func()
	// lostAt is when the NATS connection was last lost (unix ns; 0: never).
	lostAt     atomic.Int64
	errorAfter int                // TRAWL_LOG_ERROR_AFTER
	deadAfter  int                // TRAWL_DEAD_LETTER_AFTER
	window     time.Duration      // the TRAWL_FSYNC window, whatever the options
	settle     time.Duration      // the TRAWL_FSYNC window with WithSettling, else 0: natsx.ConsumeOptions.SettleAfter
	handedBack prometheus.Counter // nil without WithSettling
	// owned are the work-queue consumers this service declares as their owner, whose
	// acknowledged messages it removes (sweep).
	owned        []topology.ConsumerSpec
	ackedRemoved *prometheus.CounterVec // nil when it owns none
}

type loop struct {
	name string
	fn   func(context.Context) error
}

// Start connects and declares what every service needs, waiting for NATS and Redis until
// ctx ends. name names the process to NATS (trawl-<name>) and prefixes its errors. On
// error, what was opened is closed again.
func Start(ctx context.Context, name string, c envconfig.Common, log *slog.Logger, opts ...Option) (_ *Runner, err error) {
	o := options{}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	r := &Runner{Name: name, Log: log, Topology: c.Topology(), Registry: obs.NewRegistry(), errorAfter: c.ErrorAfter, deadAfter: c.DeadAfter, window: c.Durability.Window()}
	r.Metrics = obs.NewMetrics(r.Registry, name)
	if o.settling {
		r.settle = c.Durability.Window()
		r.handedBack = r.Metrics.With("settle").Counter("handed_back_total", "Handled messages nak'ed instead of acknowledged, to be handled again, because NATS or Redis was out of reach after their handler began: it may be back from an OS crash without what they wrote.")
	}
	defer func() {
		if err != nil {
			r.Close()
			err = fmt.Errorf("%s: %w", name, err)
		}
	}()
	natsOpts, err := c.NATSOptions()
	if err != nil {
		return nil, err
	}
	if r.NC, r.JS, err = natsx.Connect(ctx, c.NATSURL, "trawl-"+name, log, natsOpts...); err != nil {
		return nil, err
	}
	logDisconnect := r.NC.Opts.DisconnectedErrCB
	r.NC.SetDisconnectErrHandler(func(nc *nats.Conn, err error) {
		r.lostAt.Store(time.Now().UnixNano())
		if logDisconnect != nil {
			logDisconnect(nc, err)
		}
	})
	logReconnect := r.NC.Opts.ReconnectedCB
	r.NC.SetReconnectHandler(func(nc *nats.Conn) {
		if logReconnect != nil {
			logReconnect(nc)
		}
		r.reconnMu.Lock()
		fns := slices.Clone(r.onReconn)
		r.reconnMu.Unlock()
		for _, fn := range fns {
			fn()
		}
	})
	if c.Durability.AtomicBatches() {
		r.JS = natsx.AtomicBatches(r.JS)
	}
	timings := c.Timings()
	timings.As = name
	if err = natsx.Ensure(ctx, r.JS, r.Topology, timings, log); err != nil {
		return nil, err
	}
	if err = r.startSweep(ctx, timings); err != nil {
		return nil, err
	}
	if o.bodies {
		if r.Bodies, err = natsx.ObjectStore(ctx, r.JS, topology.Bodies(r.Topology)); err != nil {
			return nil, fmt.Errorf("object store %s: %w", topology.BodiesBucket, err)
		}
	}
	checks := map[string]obs.Check{"nats": r.natsReady}
	if o.redis {
		if r.Redis, err = redisx.Connect(ctx, c.RedisURL, log, c.RedisOptions()...); err != nil {
			return nil, err
		}
		if r.Crawl, err = crawlid.Open(ctx, r.JS, r.Redis, c, log); err != nil {
			return nil, err
		}
		r.Crawl.Register(r.Metrics)
		checks["redis"] = r.Crawl.Check
	}
	if r.HTTP, err = obs.NewServer(c.HTTPAddr, r.Registry, checks, c.Pprof); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Runner) natsReady(context.Context) error {
	if !r.NC.IsConnected() {
		return fmt.Errorf("nats: %s", r.NC.Status())
	}
	return nil
}

// TerminatedHelp is the help of every service's messages_terminated_total, the counter
// ConsumeOptions is given, by reason (natsx.DeadPermanent, natsx.DeadExhausted).
const TerminatedHelp = "Messages given up, parked in CRAWL_DEAD unless it could not take them (docs/operations.md, \"Dead letters\"): `permanent` (malformed, unknown version, over a limit), `exhausted` (a temporary failure past `TRAWL_DEAD_LETTER_AFTER` deliveries)."

// ConsumeOptions are a consume loop's options as every service sets them: a message that
// keeps failing is logged at error level from TRAWL_LOG_ERROR_AFTER deliveries on, and one
// given up (a permanent error, or TRAWL_DEAD_LETTER_AFTER deliveries) is parked in
// CRAWL_DEAD; when the
// service uses Redis, the loop does not pull while the crawl guard says Redis cannot take
// the work (Crawl.Ready), so an outage spends no deliveries; with WithSettling,
// ConsumeBatches acks a handled message only after the TRAWL_FSYNC window (SettleAfter);
// each terminated message is
// counted in terminated under labels and its reason; the loop logs with the service's
// logger. The caller adds what is the loop's own (Batch, InFlight, Weight, DrainTimeout)
// and may wrap Ready or narrow Log.
func (r *Runner) ConsumeOptions(terminated *prometheus.CounterVec, labels ...string) natsx.ConsumeOptions {
	labels = labels[:len(labels):len(labels)] // append below copies: OnTerm runs concurrently
	o := natsx.ConsumeOptions{
		ErrorAfter:  r.errorAfter,
		Dead:        &natsx.DeadLetter{JS: r.JS, After: r.deadAfter, Settle: r.window, Kept: r.natsKept},
		SettleAfter: r.settle,
		OnTerm:      func(reason string) { terminated.WithLabelValues(append(labels, reason)...).Inc() },
		Log:         r.Log,
	}
	if r.Crawl != nil {
		o.Ready = r.Crawl.Ready
	}
	if r.settle > 0 {
		o.Kept, o.OnHandBack = r.kept, func(n int) { r.handedBack.Add(float64(n)) }
	}
	return o
}

// kept is natsx.ConsumeOptions.Kept for every settling loop: NATS stayed connected since the
// handler began (an ack queued while the client reconnects would reach a server that may be
// back older, without the outputs the handler published before), and Redis answered a check
// begun a window after the handler ended, none failing since it began (crawlid.Guard.Kept).
// A NATS server that crashed unseen takes the ack down with it: the message comes back.
func (r *Runner) kept(ctx context.Context, start, end time.Time) bool {
	if r.lostAt.Load() >= start.UnixNano() || !r.NC.IsConnected() {
		return false
	}
	return r.Crawl == nil || r.Crawl.Kept(ctx, start, end.Add(r.settle))
}

// natsKept is natsx.DeadLetter.Kept for every loop: NATS stayed connected since a letter was
// stored. A server that crashed unseen takes the terminate down with the letter.
func (r *Runner) natsKept(since time.Time) bool {
	return r.lostAt.Load() < since.UnixNano() && r.NC.IsConnected()
}

// Addr is the address /metrics, /healthz and /readyz are served on.
func (r *Runner) Addr() string { return r.HTTP.Addr() }

// Go registers a loop for RunLoops. A loop runs until its context ends and then returns once
// it has finished what it holds. A loop that returns while the service is running — with
// an error or without — stops the others, and Run returns its error.
func (r *Runner) Go(name string, fn func(ctx context.Context) error) {
	r.loops = append(r.loops, loop{name, fn})
}

// OnReconnect registers fn to run each time the NATS connection is back after it was lost,
// on the client's callback goroutine: fn must not block (signal a loop instead). A server
// that comes back may have come back older, from its last fsync, after an OS crash; what a
// service checks at start against such a rollback it checks again here, since its own
// process did not restart.
func (r *Runner) OnReconnect(fn func()) {
	r.reconnMu.Lock()
	defer r.reconnMu.Unlock()
	r.onReconn = append(r.onReconn, fn)
}

// GoOnReconnect registers a loop, named name, that runs check each time the NATS connection
// is back (OnReconnect): what a service checks at start against a server that came back
// older. check is given when the connection was lost: what the server stored before then
// it stored before any crash that followed, and a rollback only takes a stream's tail, so
// a message of ours the server still holds from before then ends a walk down a stream as
// it does at start, while one stored since proves nothing. (The server stamps messages by
// its own clock: a skew between the two clocks shorter than the server's way back from a
// crash does no harm.) Reconnects while a check is due
// or running ask for one more, from the earliest of their losses. Each try first removes
// what the work-queue consumers the service owns acknowledged and NATS still holds
// (startSweep), so that check reads the streams as a clean restart leaves them. A failed check is tried
// again after backoff, then twice as long, up to attempts tries in all; the last failure
// is logged at error level with risk, what a check given up leaves undone, until the next
// reconnect. It never stops the service.
func (r *Runner) GoOnReconnect(name string, attempts int, backoff time.Duration, risk string, check func(ctx context.Context, lostAt time.Time) error) {
	var (
		mu      sync.Mutex
		pending int64 // the earliest loss not yet checked (unix ns; 0: none)
	)
	again := make(chan struct{}, 1)
	r.OnReconnect(func() {
		lost := r.lostAt.Load()
		mu.Lock()
		if pending == 0 || lost < pending {
			pending = lost
		}
		mu.Unlock()
		select {
		case again <- struct{}{}:
		default: // one is due already
		}
	})
	r.Go(name, func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-again:
			}
			mu.Lock()
			lostAt := time.Unix(0, pending)
			pending = 0
			mu.Unlock()
			wait := backoff
			for try := 1; ; try++ {
				// What a check reads sees the work queues as a clean restart leaves them.
				err := r.sweep(ctx)
				if err == nil {
					err = check(ctx, lostAt)
				}
				if err == nil || ctx.Err() != nil {
					break
				}
				if try >= attempts {
					r.Log.Error(name+" after a NATS reconnect given up: "+risk, "tries", try, "err", err)
					break
				}
				r.Log.Warn(name+" after a NATS reconnect failed; trying again", "try", try, "in", wait, "err", err)
				if !ctxsleep.Sleep(ctx, wait) {
					return nil
				}
				wait *= 2
			}
		}
	})
}

// sweepAttempts and sweepBackoff bound the removal of acknowledged messages at start and
// after a reconnect.
const (
	sweepAttempts = 5
	sweepBackoff  = 500 * time.Millisecond
)

// startSweep removes, from the work queues whose consumers this service owns, the messages
// those consumers acknowledged that NATS still holds (natsx.RemoveAcked), before the
// service reads them, and again after each reconnect, before the checks registered with
// GoOnReconnect: a server back from an OS crash, at the start of the whole stack or under
// this running process, may hold them. Each consumer is swept by its owner alone.
func (r *Runner) startSweep(ctx context.Context, t topology.StageTimings) error {
	work := map[string]bool{}
	for _, sc := range topology.Streams(r.Topology) {
		work[sc.Name] = sc.Retention == jetstream.WorkQueuePolicy
	}
	for _, c := range topology.Consumers(r.Topology, t) {
		if work[c.Stream] && c.Owner == r.Name {
			r.owned = append(r.owned, c)
		}
	}
	if len(r.owned) == 0 {
		return nil
	}
	r.ackedRemoved = r.Metrics.With("nats").CounterVec("acked_removed_total", "Messages of a work-queue stream removed because their consumer had acknowledged them and NATS, back from a crash, still held them (they would never be delivered nor removed).", "stream")
	for try := 1; ; try++ {
		err := r.sweep(ctx)
		if err == nil {
			break
		}
		if try >= sweepAttempts || ctx.Err() != nil {
			return fmt.Errorf("removing acknowledged messages NATS still holds: %w", err)
		}
		r.Log.Warn("removing acknowledged messages NATS still holds failed; trying again", "try", try, "err", err)
		if !ctxsleep.Sleep(ctx, sweepBackoff) {
			return ctx.Err()
		}
	}
	r.GoOnReconnect("acknowledged-message sweep", sweepAttempts, sweepBackoff,
		"a message its consumer acknowledged that NATS still holds stays in its work queue, never delivered nor removed", func(context.Context, time.Time) error { return nil })
	return nil
}

// sweep is one pass of startSweep's removal.
func (r *Runner) sweep(ctx context.Context) error {
	for _, c := range r.owned {
		sctx, cancel := context.WithTimeout(ctx, sweepTimeout)
		n, err := natsx.RemoveAcked(sctx, r.JS, c.Stream, c.Config.Durable)
		cancel()
		if n > 0 {
			r.ackedRemoved.WithLabelValues(c.Stream).Add(float64(n))
			r.Log.Warn("removed messages their consumer had acknowledged that NATS still held (back from a crash)", "stream", c.Stream, "consumer", c.Config.Durable, "messages", n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sweepTimeout bounds one consumer's sweep.
const sweepTimeout = 10 * time.Second

// OnClose registers fn to run on Close after every loop has returned and before NATS and
// Redis are closed; the last registered runs first.
func (r *Runner) OnClose(fn func()) { r.closers = append(r.closers, fn) }

// stopReportEvery spaces the log lines of a stop that waits for its loops.
const stopReportEvery = 5 * time.Second

// RunLoops runs the registered loops until ctx ends or one of them fails, shuts down in
// the package's order and closes the runner. It returns the first loop's error.
func (r *Runner) RunLoops(ctx context.Context) error {
	defer r.Close()
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	plumbCtx, stopPlumbing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPlumbing()

	var (
		once     sync.Once
		firstErr error
	)
	fail := func(name string, err error) {
		once.Do(func() {
			firstErr = fmt.Errorf("%s: %s: %w", r.Name, name, err)
			r.Log.Error("stopping", "loop", name, "err", err)
		})
		stopLoops()
	}
	var (
		runMu   sync.Mutex
		running = map[string]int{} // the service's loops not returned yet, by name
	)
	run := func(wg *sync.WaitGroup, ctx context.Context, l loop, track bool) {
		if track {
			runMu.Lock()
			running[l.name]++
			runMu.Unlock()
		}
		wg.Go(func() {
			err := l.fn(ctx)
			if track {
				runMu.Lock()
				if running[l.name]--; running[l.name] == 0 {
					delete(running, l.name)
				}
				runMu.Unlock()
			}
			if loopCtx.Err() != nil {
				// Shutting down: a loop's error now is what it met while finishing.
				if err != nil && !errors.Is(err, context.Canceled) {
					fail(l.name, err)
				}
				return
			}
			if err == nil {
				err = errors.New("ended while the service was running")
			}
			fail(l.name, err)
		})
	}

	var plumbing, loops sync.WaitGroup
	run(&plumbing, plumbCtx, loop{"http", r.HTTP.Run}, false)
	if r.Crawl != nil {
		run(&plumbing, plumbCtx, loop{"crawl watch", func(ctx context.Context) error { r.Crawl.Watch(ctx); return nil }}, false)
	}
	for _, l := range r.loops {
		run(&loops, loopCtx, l, true)
	}
	r.Log.Info(r.Name+" running", "http", r.Addr(), "loops", len(r.loops))
	<-loopCtx.Done()
	// A loop finishes what it holds before it returns (bounded by its own drain timeout):
	// a stop that takes longer says which loops it waits for.
	stopped := make(chan struct{})
	go func() {
		t := time.NewTicker(stopReportEvery)
		defer t.Stop()
		for {
			select {
			case <-stopped:
				return
			case <-t.C:
				runMu.Lock()
				names := slices.Sorted(maps.Keys(running))
				runMu.Unlock()
				r.Log.Warn("stopping: waiting for loops to finish what they hold", "loops", names)
			}
		}
	}()
	loops.Wait()
	close(stopped)
	stopPlumbing()
	plumbing.Wait()
	r.Log.Info(r.Name + " stopped")
	return firstErr
}

// Close runs the service's closers, flushes and closes NATS, then closes Redis. It is
// safe to call more than once and on a Runner whose loops never ran.
func (r *Runner) Close() {
	r.closeOnce.Do(func() {
		for _, fn := range slices.Backward(r.closers) {
			fn()
		}
		if r.NC != nil {
			// Acks and core publishes are buffered writes: without the flush a clean stop
			// leaves the last batch to be redelivered.
			if err := r.NC.FlushTimeout(FlushTimeout); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				r.Log.Warn("nats flush on close", "err", err)
			}
			r.NC.Close()
		}
		if r.Redis != nil {
			_ = r.Redis.Close()
		}
	})
}

// Service is a started service, as its package's New returns it: Run registers its loops
// and runs them (RunLoops) until ctx ends, releasing everything it holds before it
// returns; Close releases a Service that is not Run, and does nothing after Run.
type Service interface {
	Run(ctx context.Context) error
	Close()
}

// NewThenRun is a service's whole life: newService (Start and the service's own
// start-up), then the service's Run. It holds the exit rule: when ctx ends before
// newService returns, the stop is clean and NewThenRun returns nil, whatever newService
// returned.
func NewThenRun[S Service](ctx context.Context, log *slog.Logger, newService func(context.Context) (S, error)) error {
	s, err := newService(ctx)
	if err != nil {
		if ctx.Err() != nil {
			log.Info("stopped before it was ready", "err", err)
			return nil
		}
		return err
	}
	defer s.Close()
	return s.Run(ctx)
}
