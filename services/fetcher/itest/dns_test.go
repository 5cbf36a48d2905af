package itest

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/services/fetcher/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
)

// dnsAnswers is a resolver that answers each name as the test says, counting the lookups
// that reach it (below the fetcher's DNS cache).
type dnsAnswers struct {
	mu      sync.Mutex
	answer  map[string]func(n int) ([]netip.Addr, error) // by name; n counts from 1
	lookups map[string]int
}

func (d *dnsAnswers) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	d.lookups[host]++
	n, f := d.lookups[host], d.answer[host]
	d.mu.Unlock()
	if f == nil {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return f(n)
}

func (d *dnsAnswers) count(host string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lookups[host]
}

// A name the DNS says does not exist ends its task quickly with the reason
// "dns: no such host", asked once more after a short wait (a resolver that answered wrongly
// once does not end a host); a resolver that fails (SERVFAIL) leaves robots.txt
// unreachable, to be retried with backoff as before. Before, a missing name made robots.txt
// unreachable too: its URLs backed off 30 s, 60 s, 120 s… before failing.
func TestNoSuchHost(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(""), "/p": html(pageHTML)})
	port := s.Listener.Addr().(*net.TCPAddr).Port
	loopback := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	dns := &dnsAnswers{lookups: map[string]int{}, answer: map[string]func(int) ([]netip.Addr, error){
		"servfail.example": func(int) ([]netip.Addr, error) {
			return nil, &net.DNSError{Err: "server misbehaving", Name: "servfail.example", IsTemporary: true}
		},
		"flaky.example": func(n int) ([]netip.Addr, error) {
			if n == 1 {
				return nil, &net.DNSError{Err: "no such host", Name: "flaky.example", IsNotFound: true}
			}
			return loopback, nil
		},
	}}
	in := st.startWith(st.config(nil), "a", service.WithResolver(dns))
	defer in.stop(t)

	url := func(host string) string { return "http://" + host + ":" + strconv.Itoa(port) + "/p" }
	for _, tc := range []struct {
		name, host string
		kinds      []crawlmsg.OutcomeKind // any of them
		permanent  bool
		reason     string // the outcome's error starts with it
		lookups    int
	}{
		{"missing name ends", "gone.example", []crawlmsg.OutcomeKind{crawlmsg.OutcomeError}, true, "dns: no such host: gone.example", 2},
		{"missing name again, from the DNS cache", "gone.example", []crawlmsg.OutcomeKind{crawlmsg.OutcomeError}, true, "dns: no such host: gone.example", 2},
		{"failed resolver backs off", "servfail.example", []crawlmsg.OutcomeKind{crawlmsg.OutcomeRobotsUnavailable}, false, "", 1},
		// robots.txt fetched, and the page too when the host's gap allowed it.
		{"one wrong answer is asked again", "flaky.example", []crawlmsg.OutcomeKind{crawlmsg.OutcomeRobots, crawlmsg.OutcomeFetched}, false, "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := task(url(tc.host))
			start := time.Now()
			st.publishTask(tk)
			o := st.outcome(tk.Lease)
			took := time.Since(start)
			if !slices.Contains(tc.kinds, o.Kind) || o.Permanent != tc.permanent || !strings.HasPrefix(o.Error, tc.reason) {
				t.Fatalf("outcome %s permanent=%v error %q, want %v permanent=%v error %q…", o.Kind, o.Permanent, o.Error, tc.kinds, tc.permanent, tc.reason)
			}
			// The recheck waits 2 s; the frontier's backoff would have waited 30 s.
			if took > 10*time.Second {
				t.Fatalf("outcome after %s, want well under the 30 s backoff", took)
			}
			if n := dns.count(tc.host); n != tc.lookups {
				t.Fatalf("%d lookups of %s, want %d (later tasks answered from the cache)", n, tc.host, tc.lookups)
			}
		})
	}
	// Only flaky.example reached the site, robots.txt first.
	if got := s.requests(); len(got) == 0 || got[0] != "/robots.txt" {
		t.Fatalf("site requests %v, want flaky.example's robots.txt first", got)
	}
}
