package polite_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/safedial"
)

// hop is what one request of a chain answers.
type hop struct {
	status int
	loc    string
	body   string
	err    error
}

// redirectTo answers a redirect to the robots.txt of host.
func redirectTo(host string) hop {
	return hop{status: http.StatusMovedPermanently, loc: "http://" + host + "/robots.txt"}
}

// WalkRobots ends a chain as every process that walks one within a call must: the final
// response decides, a failed hop after a redirect is unreachable, and a refused origin, a
// stopped hop or an ended context give no entry at all.
func TestWalkRobots(t *testing.T) {
	secret := errors.New("secret unreadable")
	tests := []struct {
		name      string
		hops      []hop
		cancel    bool
		want      robots.Class // 0: no entry
		wantErr   error        // with no entry
		wantInErr string       // in the entry's Error
		wantAsked int
	}{
		{name: "the origin's own file", hops: []hop{{status: 200, body: "User-agent: *\nDisallow: /x\n"}}, want: robots.Parsed, wantAsked: 1},
		{name: "two redirects, then the file", hops: []hop{redirectTo("b.test"), redirectTo("c.test"), {status: 200}}, want: robots.Parsed, wantAsked: 3},
		{name: "still redirecting after the hops followed", hops: []hop{redirectTo("b.test"), redirectTo("c.test"), redirectTo("d.test"), redirectTo("e.test"), redirectTo("f.test"), redirectTo("g.test"), redirectTo("h.test")},
			want: robots.Unavailable, wantAsked: polite.RobotsMaxHops + 1},
		{name: "a redirect with no Location", hops: []hop{{status: http.StatusFound}}, want: robots.Unavailable, wantAsked: 1},
		{name: "a 404", hops: []hop{{status: 404}}, want: robots.Unavailable, wantAsked: 1},
		{name: "a 503 after a redirect", hops: []hop{redirectTo("b.test"), {status: 503}}, want: robots.Unreachable, wantAsked: 2},
		{name: "no response from the origin", hops: []hop{{err: errors.New("connection refused")}}, want: robots.Unreachable, wantInErr: "connection refused", wantAsked: 1},
		{name: "no response after a redirect", hops: []hop{redirectTo("b.test"), {err: errors.New("connection refused")}}, want: robots.Unreachable,
			wantInErr: "robots.txt redirect 1 to http://b.test/robots.txt: connection refused", wantAsked: 2},
		{name: "a redirect to a refused address", hops: []hop{redirectTo("b.test"), {err: fmt.Errorf("dial: %w", safedial.ErrBlockedAddress)}}, want: robots.Unreachable,
			wantInErr: "robots.txt redirect 1", wantAsked: 2},
		{name: "the origin's address refused", hops: []hop{{err: fmt.Errorf("dial: %w", safedial.ErrBlockedAddress)}}, wantErr: safedial.ErrBlockedAddress, wantAsked: 1},
		{name: "a hop stopped", hops: []hop{redirectTo("b.test"), {err: polite.StopRobots(secret)}}, wantErr: secret, wantAsked: 2},
		{name: "the context ended", hops: []hop{{err: context.Canceled}}, cancel: true, wantErr: context.Canceled, wantAsked: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var asked []string
			get := func(ctx context.Context, n int, u *url.URL, maxBody int64) (polite.RobotsResponse, error) {
				asked = append(asked, u.String())
				if n != len(asked)-1 {
					t.Errorf("hop %d asked as hop %d", len(asked)-1, n)
				}
				if maxBody != 1001 {
					t.Errorf("hop %d may read %d octets, want the limit and one", n, maxBody)
				}
				h := tt.hops[min(n, len(tt.hops)-1)]
				if tt.cancel {
					cancel()
				}
				return polite.RobotsResponse{Status: h.status, Location: h.loc, Body: []byte(h.body)}, h.err
			}
			e, err := polite.WalkRobots(ctx, "trawl", "http://a.test/robots.txt", 1000, get)
			if len(asked) != tt.wantAsked {
				t.Errorf("asked %d hops (%v), want %d", len(asked), asked, tt.wantAsked)
			}
			if tt.want == 0 {
				if e != nil || !errors.Is(err, tt.wantErr) {
					t.Fatalf("WalkRobots = %+v, %v; want no entry and %v", e, err, tt.wantErr)
				}
				return
			}
			if err != nil || e == nil {
				t.Fatalf("WalkRobots = %+v, %v; want a %s entry", e, err, tt.want)
			}
			if e.Class != tt.want {
				t.Errorf("class %s (status %d, %q), want %s", e.Class, e.Status, e.Error, tt.want)
			}
			if !strings.Contains(e.Error, tt.wantInErr) {
				t.Errorf("entry's error %q, want it to hold %q", e.Error, tt.wantInErr)
			}
		})
	}
	t.Run("the hops are the redirects' targets", func(t *testing.T) {
		var asked []string
		chain := []hop{{status: 301, loc: "/elsewhere/robots.txt"}, redirectTo("b.test"), {status: 200}}
		_, err := polite.WalkRobots(t.Context(), "trawl", "http://a.test/robots.txt", 1000, func(_ context.Context, n int, u *url.URL, _ int64) (polite.RobotsResponse, error) {
			asked = append(asked, u.String())
			return polite.RobotsResponse{Status: chain[n].status, Location: chain[n].loc}, nil
		})
		want := []string{"http://a.test/robots.txt", "http://a.test/elsewhere/robots.txt", "http://b.test/robots.txt"}
		if err != nil || strings.Join(asked, " ") != strings.Join(want, " ") {
			t.Errorf("asked %v, %v; want %v", asked, err, want)
		}
	})
}
