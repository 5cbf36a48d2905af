// Package testwait is how Trawl's tests wait: a context that ends before the test binary's
// own deadline, and Eventually, which polls a condition. It is an ordinary package (not a
// _test file) so that the tests of every module can import it; only tests do.
package testwait

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

// margin is kept between a context's end and the test binary's deadline, so a wait that
// runs out fails the test with its own message instead of the binary's panic.
const margin = 5 * time.Second

// Context returns a context that ends at the test's deadline less a margin (none without
// -timeout) and is cancelled when the test ends.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if d, ok := deadline(t); ok {
		ctx, cancel = context.WithDeadline(context.Background(), d)
	}
	t.Cleanup(cancel)
	return ctx
}

func deadline(t testing.TB) (time.Time, bool) {
	dt, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return time.Time{}, false
	}
	d, ok := dt.Deadline()
	if !ok {
		return time.Time{}, false
	}
	if early := d.Add(-margin); time.Until(early) > 0 {
		d = early
	}
	return d, true
}

// Eventually polls cond until it holds, and fails the test (naming what it waited for)
// when within has passed or the test's deadline is near.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyState(t, within, what, func() (bool, string) { return cond(), "" })
}

// EventuallyState is Eventually for a condition that also describes what it saw; the
// last description is in the failure message.
func EventuallyState(t testing.TB, within time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	end := time.Now().Add(within)
	if d, ok := deadline(t); ok && d.Before(end) {
		end = d
	}
	// Short at first, so a condition met at once costs little; capped, so a long wait
	// does not spin.
	pause := time.Millisecond
	for {
		ok, state := cond()
		if ok {
			return
		}
		if !time.Now().Before(end) {
			if state != "" {
				t.Fatalf("timed out after %s waiting for %s; last state: %s", within, what, state)
			}
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(min(pause, time.Until(end)))
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// Buffer collects what something writes while the test polls it (a command's output, a
// browser's log): safe for one writer and concurrent readers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
