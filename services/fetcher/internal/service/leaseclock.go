package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// leaseClock places a lease deadline on this process's clock. The scheduler stamps a fetch
// task's deadline from Redis's clock (TIME inside its dispatch script), and the fetcher may
// run on another machine whose clock is off: compared as they are, a clock behind lets a
// request run on after its lease is reaped and the host is dispatched again (two requests
// in flight to one host); a clock ahead makes every task look expired, so each URL is
// requeued for ever. So the fetcher measures the offset between Redis's clock and its own
// and turns each deadline into the time left, counted on its own monotonic clock.
type leaseClock struct {
	wall      func() time.Time // this machine's clock (time.Now; a test skews it)
	redisTime func(ctx context.Context) (time.Time, error)
	log       *slog.Logger
	// offset is Redis's clock minus ours, plus up to the round trip of the measurement
	// (see measure), so that a deadline is never placed later than it is.
	offset atomic.Int64
}

// clockSamples is how many TIME round trips a measurement takes; the fastest is kept, as
// its midpoint is the closest to the instant Redis read its clock.
const clockSamples = 3

// clockEvery is how often the offset is measured again: clocks drift and get stepped.
const clockEvery = 30 * time.Second

// clockWarn is the offset beyond which the fetcher says its clock is off: leases are still
// kept, but other tools comparing times (logs, trawlctl) will be confused.
const clockWarn = time.Second

// measure takes the offset now.
func (c *leaseClock) measure(ctx context.Context) error {
	best := time.Duration(-1)
	var off time.Duration
	for range clockSamples {
		t0, m0 := c.wall(), time.Now()
		rt, err := c.redisTime(ctx)
		if err != nil {
			return fmt.Errorf("fetcher: read Redis's clock: %w", err)
		}
		rtt := time.Since(m0)
		if best < 0 || rtt < best {
			best = rtt
			// Redis read its clock somewhere within the round trip; taking the start makes
			// the offset at least the true one, so a deadline is placed early, never late.
			off = rt.Sub(t0)
		}
	}
	prev := time.Duration(c.offset.Swap(int64(off)))
	if abs(off) > clockWarn && abs(off-prev) > clockWarn/2 {
		c.log.Warn("this machine's clock differs from Redis's; lease deadlines are converted by the measured offset, but fix the clock (NTP)", "offset", off.Round(time.Millisecond))
	}
	return nil
}

// keep measures the offset every clockEvery until ctx ends; a failed measurement keeps
// the last offset (Redis being away is the gate's business, not the clock's).
func (c *leaseClock) keep(ctx context.Context) error {
	t := time.NewTicker(clockEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := c.measure(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("clock offset not measured; keeping the last one", "err", err)
			}
		}
	}
}

// local is the instant on this process's clock (monotonic, as time.Now gives) at which
// Redis's clock reads deadlineMs.
func (c *leaseClock) local(deadlineMs int64) time.Time {
	left := time.UnixMilli(deadlineMs).Sub(c.wall()) - time.Duration(c.offset.Load())
	return time.Now().Add(left)
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
