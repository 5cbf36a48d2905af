// Package inproc runs a Trawl service inside a test's own process, the way each
// service's integration tests run theirs: the configuration read from a map of variables
// and held to its Validate, as main.go holds it; the service's life run by
// runner.NewThenRun, as runner.Main runs it; its log in the test's log; and at the test's
// end the service stopped and waited for, its Run's error failing the test unless the test
// asked for it.
package inproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/testwait"
)

// Within bounds a service's start-up (New: NATS, Redis, the topology) and its stop (Run
// draining and returning).
const Within = 30 * time.Second

// Config reads a service's configuration with load (its config.Load) from envs, each map
// over the ones before it, and requires it valid.
func Config[C interface{ Validate() error }](t testing.TB, load func(*envconfig.Reader) (C, error), envs ...map[string]string) C {
	t.Helper()
	vars := map[string]string{}
	for _, env := range envs {
		maps.Copy(vars, env)
	}
	cfg, err := envconfig.Valid(load(envconfig.FromMap(vars)))
	if err != nil {
		t.Fatalf("configuration: %v", err)
	}
	return cfg
}

// Running is a service started by Start.
type Running[S runner.Service] struct {
	// Svc is the service New returned.
	Svc    S
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result, once done is closed

	mu    sync.Mutex
	asked bool // the test has taken Run's result: the cleanup does not judge it
}

// Start builds a service with newService (its package's New on the test's configuration)
// and runs it until Stop or the end of the test. A start-up that fails, or takes longer
// than Within, fails the test.
func Start[S runner.Service](t testing.TB, log *slog.Logger, newService func(context.Context) (S, error)) *Running[S] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running[S]{cancel: cancel, done: make(chan struct{})}
	type result struct {
		svc S
		err error
	}
	built := make(chan result, 1)
	go func() {
		r.err = runner.NewThenRun(ctx, log, func(ctx context.Context) (S, error) {
			svc, err := newService(ctx)
			built <- result{svc, err}
			return svc, err
		})
		close(r.done)
	}()
	select {
	case b := <-built:
		if b.err != nil {
			cancel()
			<-r.done
			t.Fatalf("service not started: %v", b.err)
		}
		r.Svc = b.svc
	case <-time.After(Within):
		cancel()
		t.Fatalf("service not started within %s: New still waits on NATS, Redis or its own start-up", Within)
	}
	t.Cleanup(func() {
		err := r.stop()
		r.mu.Lock()
		asked := r.asked
		r.mu.Unlock()
		if err != nil && !asked {
			t.Errorf("service: %v", err)
		}
	})
	return r
}

// Stop ends the service's Run and waits for it to return, at most Within. It returns
// Run's error, the same on every call; the test then judges it, the cleanup does not.
func (r *Running[S]) Stop() error {
	r.mu.Lock()
	r.asked = true
	r.mu.Unlock()
	return r.stop()
}

func (r *Running[S]) stop() error {
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(Within):
		return fmt.Errorf("Run did not return within %s of its context's end", Within)
	}
}

// WaitReady polls the service's /readyz on addr until it answers 200: NATS topology
// declared, Redis up, the loops running. Run returning first, or Within passing, fails
// the test.
func (r *Running[S]) WaitReady(t testing.TB, addr string) {
	t.Helper()
	testwait.EventuallyState(t, Within, "the service at "+addr+" ready", func() (bool, string) {
		select {
		case <-r.done:
			t.Fatalf("service at %s returned before it was ready: %v", addr, r.Err())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return resp.StatusCode == http.StatusOK, resp.Status + ": " + strings.TrimSpace(string(body))
	})
}

// Cancel ends Run's context, as SIGTERM does, without waiting for Run to return.
func (r *Running[S]) Cancel() { r.cancel() }

// Done is closed when Run has returned, on its own or by Stop.
func (r *Running[S]) Done() <-chan struct{} { return r.done }

// Err is Run's error once Done is closed (nil before); the test then judges it, the
// cleanup does not.
func (r *Running[S]) Err() error {
	select {
	case <-r.done:
	default:
		return nil
	}
	r.mu.Lock()
	r.asked = true
	r.mu.Unlock()
	return r.err
}

// Logger is a service's log written to the test's log (LogWriter), and to also when
// given, at level and up.
func Logger(t testing.TB, level slog.Level, also io.Writer) *slog.Logger {
	w := newTestWriter(t)
	w.also = also
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// LogWriter writes each line it is given to the test's log (a child process's output,
// say). Lines written after the test has ended are dropped: a service or process still
// draining must not write to a finished test.
func LogWriter(t testing.TB) io.Writer { return newTestWriter(t) }

func newTestWriter(t testing.TB) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return w
}

type testWriter struct {
	mu     sync.Mutex
	t      testing.TB
	also   io.Writer
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.also != nil {
		if _, err := w.also.Write(p); err != nil {
			return 0, err
		}
	}
	if !w.closed {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
