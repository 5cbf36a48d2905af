package testwait

import (
	"strings"
	"testing"
	"time"
)

// recorder stands in for a test so a failing wait can be observed without failing this one.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

func run(t *testing.T, r *recorder, fn func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
	}()
	fn()
}

func TestEventually(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cond     func() (bool, string)
		fails    bool
		mentions string
	}{
		{"met at once", func() (bool, string) { return true, "" }, false, ""},
		{"never met", func() (bool, string) { return false, "" }, true, "waiting for"},
		{"never met, with state", func() (bool, string) { return false, "x=3" }, true, "last state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			start := time.Now()
			run(t, r, func() { EventuallyState(r, 50*time.Millisecond, "it", tc.cond) })
			if (r.failed != "") != tc.fails {
				t.Fatalf("failed = %q, want failure %v", r.failed, tc.fails)
			}
			if !strings.Contains(r.failed, tc.mentions) {
				t.Errorf("failure %q does not mention %q", r.failed, tc.mentions)
			}
			if tc.fails && time.Since(start) < 50*time.Millisecond {
				t.Errorf("gave up after %s, before its 50ms", time.Since(start))
			}
		})
	}
}

func TestEventuallyPollsUntilMet(t *testing.T) {
	n := 0
	Eventually(t, 5*time.Second, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}

func TestContextEndsBeforeTheTestDeadline(t *testing.T) {
	ctx := Context(t)
	d, ok := t.Deadline()
	cd, cok := ctx.Deadline()
	if ok != cok {
		t.Fatalf("test deadline set %v, context deadline set %v", ok, cok)
	}
	if ok && !cd.Before(d) {
		t.Fatalf("context deadline %s not before the test's %s", cd, d)
	}
}
