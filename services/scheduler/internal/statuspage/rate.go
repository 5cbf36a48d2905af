package statuspage

import (
	"sync"
	"time"
)

// sample is one reading of every shard's counters. ok[i] is false when shard i could not
// be read; its counters are then meaningless.
type sample struct {
	at         time.Time
	fetched    []int64
	dispatched []int64
	ok         []bool
}

// ring keeps the last samples in memory: rates need two readings, and keeping them here
// means the status page costs Redis nothing beyond the counters it reads anyway.
type ring struct {
	mu   sync.Mutex
	keep int
	buf  []sample // oldest first
}

func newRing(keep int) *ring { return &ring{keep: max(keep, 2)} }

func (r *ring) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) == r.keep {
		copy(r.buf, r.buf[1:])
		r.buf = r.buf[:len(r.buf)-1]
	}
	r.buf = append(r.buf, s)
}

// rates are per-second rates of the fetched and dispatched counters, per shard (nil when
// unknown: fewer than two readings, or a counter that went backwards, as after a reset).
type rates struct {
	fetched, dispatched []*float64
}

// rates returns each shard's rates between its newest reading and its oldest one within
// window of it.
func (r *ring) rates(shards int, window time.Duration) rates {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := rates{fetched: make([]*float64, shards), dispatched: make([]*float64, shards)}
	for i := range shards {
		newest := -1
		for j := len(r.buf) - 1; j >= 0; j-- {
			if i < len(r.buf[j].ok) && r.buf[j].ok[i] {
				newest = j
				break
			}
		}
		if newest < 0 {
			continue
		}
		n := r.buf[newest]
		oldest := -1
		for j := newest - 1; j >= 0; j-- {
			s := r.buf[j]
			if n.at.Sub(s.at) > window {
				break
			}
			if i < len(s.ok) && s.ok[i] {
				oldest = j
			}
		}
		if oldest < 0 {
			continue
		}
		o := r.buf[oldest]
		dt := n.at.Sub(o.at).Seconds()
		out.fetched[i] = perSecond(n.fetched[i]-o.fetched[i], dt)
		out.dispatched[i] = perSecond(n.dispatched[i]-o.dispatched[i], dt)
	}
	return out
}

func perSecond(delta int64, dt float64) *float64 {
	if dt <= 0 || delta < 0 {
		return nil
	}
	v := float64(delta) / dt
	return &v
}

// Point is the crawl's fetch rate over one sampling interval; null when no shard was
// read at both ends of it (Redis unreachable), which is no rate of zero.
type Point struct {
	AtMs           int64    `json:"t_ms"`
	PagesPerSecond *float64 `json:"pages_per_second"`
}

// history returns the fetch rate over each interval between consecutive readings, oldest
// first, summed over the shards read both times.
func (r *ring) history() []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Point, 0, len(r.buf))
	for j := 1; j < len(r.buf); j++ {
		a, b := r.buf[j-1], r.buf[j]
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0 {
			continue
		}
		var sum *float64
		for i := range min(len(a.ok), len(b.ok)) {
			if !a.ok[i] || !b.ok[i] {
				continue
			}
			// A counter that went backwards (a reset) adds nothing to the interval.
			sum = addRate(sum, new(float64(max(b.fetched[i]-a.fetched[i], 0))/dt))
		}
		out = append(out, Point{AtMs: b.at.UnixMilli(), PagesPerSecond: sum})
	}
	return out
}
