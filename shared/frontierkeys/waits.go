package frontierkeys

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reasons a host in the heap is not due yet.
const (
	WaitBackoff    = "backoff"     // an error streak (err > 0): exponential backoff or Retry-After
	WaitCrawlDelay = "crawl-delay" // robots.txt Crawl-delay (cd > 0)
	WaitDelay      = "delay"       // the adaptive politeness delay
)

// errorLogScan bounds how many lines of a shard's error log are searched for a waiting
// host's last error (the log keeps TRAWL_RECENT_ERRORS lines, 100 by default).
const errorLogScan = 200

// HostWait is one host of the heap that waits, and why.
type HostWait struct {
	Host       string        `json:"host"`
	Shard      int           `json:"shard"`
	Next       time.Time     `json:"next"`
	Reason     string        `json:"reason"`
	Streak     int64         `json:"error_streak,omitempty"`
	CrawlDelay time.Duration `json:"crawl_delay_ns,omitempty"`
	// ResponseTime is the host's last response time: the politeness delay is k times it,
	// so a slow host explains a long wait.
	ResponseTime time.Duration `json:"response_time_ns,omitempty"`
	// LastError is the host's newest line in the error log ("" when it has rolled out).
	LastError string `json:"last_error,omitempty"`
}

// Waits is what the frontier waits on: the idle hosts of the heap, classified from their
// host state. Reading it costs a fixed number of commands per shard and one HMGET per
// sampled host, however many hosts the crawl holds.
type Waits struct {
	// Now is the frontier's clock (the Redis server's TIME) when the reading was taken.
	Now time.Time `json:"now"`
	// Due hosts may be dispatched now; Waiting hosts wait for their next fetch time.
	Due     int64 `json:"due"`
	Waiting int64 `json:"waiting"`
	// InFlight hosts have a task out.
	InFlight int64 `json:"in_flight"`
	// Retired hosts were given up after a failure streak (the stats counter).
	Retired int64 `json:"retired"`
	// Hosts are the waiting hosts classified, latest next fetch time first: all of them
	// when Sampled == Waiting, otherwise the latest of each shard.
	Hosts   []HostWait `json:"hosts,omitempty"`
	Sampled int        `json:"sampled"`
	// Backoff, CrawlDelay and Delay count Hosts by Reason.
	Backoff    int `json:"backoff"`
	CrawlDelay int `json:"crawl_delay"`
	Delay      int `json:"delay"`
	// Earliest is the next time any waiting host becomes due (zero when none waits).
	Earliest time.Time `json:"earliest,omitempty"`
}

// Latest is the waiting host due last (the slowest), or nil.
func (w Waits) Latest() *HostWait {
	if len(w.Hosts) == 0 {
		return nil
	}
	return &w.Hosts[0]
}

// Waits reads what the frontier waits on, classifying at most about sample waiting hosts
// (the latest due of each shard; at least one per shard).
func (r *Reader) Waits(ctx context.Context, sample int) (Waits, error) {
	rdb, prefix, shards := r.rdb, r.prefix, r.shards
	var w Waits
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return w, fmt.Errorf("frontier waits: time: %w", err)
	}
	w.Now = now
	per := 1
	if shards > 0 {
		per = max(1, (sample+shards-1)/shards)
	}
	nowMs := strconv.FormatInt(now.UnixMilli(), 10)
	type shardCmds struct {
		due, heap, inflight *redis.IntCmd
		retired             *redis.StringCmd
		first, last         *redis.ZSliceCmd
		errs                *redis.StringSliceCmd
	}
	cmds := make([]shardCmds, shards)
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range cmds {
			ks := ForShard(prefix, k, shards)
			c := &cmds[k]
			c.due = p.ZCount(ctx, ks.Heap(), "-inf", nowMs)
			c.heap = p.ZCard(ctx, ks.Heap())
			c.inflight = p.ZCard(ctx, ks.Inflight())
			c.retired = p.HGet(ctx, ks.Stats(), "retired")
			c.first = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: ks.Heap(), Start: "(" + nowMs, Stop: "+inf", ByScore: true, Count: 1})
			c.last = p.ZRevRangeWithScores(ctx, ks.Heap(), 0, int64(per-1))
			c.errs = p.LRange(ctx, ks.Errors(), 0, errorLogScan-1)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return w, fmt.Errorf("frontier waits: %w", err)
	}
	type hostCmd struct {
		i   int
		cmd *redis.SliceCmd
	}
	var hc []hostCmd
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, c := range cmds {
			w.Due += c.due.Val()
			w.Waiting += c.heap.Val() - c.due.Val()
			w.InFlight += c.inflight.Val()
			n, _ := strconv.ParseInt(c.retired.Val(), 10, 64)
			w.Retired += n
			if f := c.first.Val(); len(f) > 0 {
				t := time.UnixMilli(int64(f[0].Score))
				if w.Earliest.IsZero() || t.Before(w.Earliest) {
					w.Earliest = t
				}
			}
			for _, z := range c.last.Val() {
				next := time.UnixMilli(int64(z.Score))
				if !next.After(now) {
					break // due: it does not wait
				}
				h, _ := z.Member.(string)
				w.Hosts = append(w.Hosts, HostWait{Host: h, Shard: k, Next: next})
				hc = append(hc, hostCmd{len(w.Hosts) - 1, p.HMGet(ctx, ForShard(prefix, k, shards).Host(h), HostErr, HostCD, HostRT)})
			}
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return w, fmt.Errorf("frontier waits: hosts: %w", err)
	}
	for _, c := range hc {
		hw := &w.Hosts[c.i]
		v := c.cmd.Val()
		num := func(i int) int64 {
			if i >= len(v) {
				return 0
			}
			s, _ := v[i].(string)
			n, _ := strconv.ParseInt(s, 10, 64)
			return n
		}
		hw.Streak, hw.CrawlDelay = num(0), time.Duration(num(1))*time.Millisecond
		hw.ResponseTime = time.Duration(num(2)) * time.Millisecond
		switch {
		case hw.Streak > 0:
			hw.Reason = WaitBackoff
			w.Backoff++
		case hw.CrawlDelay > 0:
			hw.Reason = WaitCrawlDelay
			w.CrawlDelay++
		default:
			hw.Reason = WaitDelay
			w.Delay++
		}
		for _, line := range cmds[hw.Shard].errs.Val() {
			if r, ok := ParseErrorRecord(line); ok && r.Host == hw.Host {
				hw.LastError = r.Describe()
				break
			}
		}
	}
	w.Sampled = len(w.Hosts)
	sort.SliceStable(w.Hosts, func(i, j int) bool { return w.Hosts[i].Next.After(w.Hosts[j].Next) })
	return w, nil
}

// why says what holds the host back, as an operator reads it.
func (h HostWait) why() string {
	switch {
	case h.Reason == WaitBackoff:
		return fmt.Sprintf("error backoff, streak %d", h.Streak)
	case h.Reason == WaitCrawlDelay:
		return "Crawl-delay " + h.CrawlDelay.String()
	case h.ResponseTime > 0:
		// The adaptive delay: k × the response time, at least the minimum delay.
		return "politeness delay after a " + h.ResponseTime.Round(time.Millisecond).String() + " response"
	}
	return "politeness delay"
}

// Describe is the record as an operator reads it: kind, status and error.
func (r ErrorRecord) Describe() string {
	var b strings.Builder
	b.WriteString(r.Kind)
	if r.Status != 0 {
		fmt.Fprintf(&b, " %d", r.Status)
	}
	if r.Error != "" {
		b.WriteString(": ")
		b.WriteString(r.Error)
	}
	return b.String()
}

// String says in one line what the frontier waits on, or "" when no host waits: how many
// hosts back off and until when with the last error, how many wait out a Crawl-delay or
// the politeness delay, how many were retired, and the slowest host's next time.
func (w Waits) String() string {
	if w.Waiting == 0 && w.Retired == 0 {
		return ""
	}
	var parts []string
	if w.Backoff > 0 {
		var until time.Time
		var last string
		for _, h := range w.Hosts {
			if h.Reason == WaitBackoff {
				if h.Next.After(until) {
					until = h.Next
				}
				if last == "" && h.LastError != "" {
					last = h.Host + ": " + h.LastError
				}
			}
		}
		s := fmt.Sprintf("%d backing off until %s", w.Backoff, until.Format("15:04:05"))
		if last != "" {
			s += " (last error " + last + ")"
		}
		parts = append(parts, s)
	}
	if w.CrawlDelay > 0 {
		parts = append(parts, fmt.Sprintf("%d in Crawl-delay", w.CrawlDelay))
	}
	if w.Delay > 0 {
		parts = append(parts, fmt.Sprintf("%d in politeness delay", w.Delay))
	}
	if w.Sampled < int(w.Waiting) {
		parts = append(parts, fmt.Sprintf("(%d of %d waiting hosts sampled)", w.Sampled, w.Waiting))
	}
	parts = append(parts, fmt.Sprintf("%d retired", w.Retired))
	if l := w.Latest(); l != nil {
		parts = append(parts, fmt.Sprintf("slowest %s next at %s (in %s: %s)", l.Host, l.Next.Format("15:04:05"),
			l.Next.Sub(w.Now).Round(100*time.Millisecond), l.why()))
	}
	return "hosts waiting: " + strings.Join(parts, ", ")
}
