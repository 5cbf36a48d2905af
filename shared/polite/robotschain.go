package polite

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/safedial"
)

// RobotsResponse is one response of a robots.txt chain: its status, its Location header as
// received, and its content, decoded, cut at the octets the request was allowed.
type RobotsResponse struct {
	Status   int
	Location string
	Body     []byte
}

// RobotsGet makes the request of hop n of a robots.txt chain (0: the origin's own file) to
// target, reading at most maxBody octets of its content. An error StopRobots wraps ends
// the chain with no entry.
type RobotsGet func(ctx context.Context, n int, target *url.URL, maxBody int64) (RobotsResponse, error)

type stopError struct{ err error }

func (e stopError) Error() string { return e.err.Error() }
func (e stopError) Unwrap() error { return e.err }

// StopRobots wraps err so that WalkRobots returns it with no entry: the hop was not
// requested for a reason that says nothing about the host (a secret that cannot be read),
// so no verdict may be cached.
func StopRobots(err error) error { return stopError{err} }

// WalkRobots follows a robots.txt chain from robotsURL within one call, each hop made by
// get and redirects followed as FollowRobots says, and returns the entry for agent that
// the chain ends in, maxBytes of its content parsed. The final status and content decide; no
// response at all (an address refused after a redirect among them) makes robots.txt
// unreachable. There is no entry, only the error, when ctx ends, when get stops the chain
// (StopRobots), or when the origin's own address is refused (safedial.ErrBlockedAddress at
// hop 0): nothing was requested of the host then. The renderer and `trawlctl robots check`
// walk their chains here; the fetcher spreads a chain over tasks, one hop a turn of its
// host, so it keeps its own loop over FollowRobots.
func WalkRobots(ctx context.Context, agent, robotsURL string, maxBytes int64, get RobotsGet) (*robots.Entry, error) {
	started := time.Now()
	u, err := url.Parse(robotsURL)
	if err != nil {
		return nil, fmt.Errorf("robots.txt URL %q: %w", robotsURL, err)
	}
	for n := 0; ; n++ {
		// One octet over the limit tells robots.Parse the file went on, so it drops a cut line.
		res, err := get(ctx, n, u, maxBytes+1)
		var stop stopError
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, err
		case errors.As(err, &stop):
			return nil, stop.err
		case n == 0 && errors.Is(err, safedial.ErrBlockedAddress):
			return nil, err
		case n > 0:
			return robots.UnreachableEntry(agent, fmt.Errorf("robots.txt redirect %d to %s: %w", n, u, err), started), nil
		default:
			return robots.UnreachableEntry(agent, err, started), nil
		}
		next := Location(res.Status, u, res.Location)
		if !FollowRobots(n, next) {
			return robots.NewEntry(agent, res.Status, res.Body, int(maxBytes), started), nil
		}
		if u, err = url.Parse(next); err != nil {
			// Location gives normalised URLs only.
			return robots.UnreachableEntry(agent, err, started), nil
		}
	}
}
