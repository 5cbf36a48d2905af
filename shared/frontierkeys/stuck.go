package frontierkeys

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LastErr is the hash host → a fetcher's last error for the task out on the host
// ("<token>\t<first ms>\t<last ms>\t<tries>\t<error>", LeaseError). A fetcher writes it on
// each failed try to store a task's results (NoteLeaseError), only while the token still
// holds the host's lease; the scheduler deletes it when the lease ends (outcome or reap)
// and names it in the lease's error log line and, after the last attempt, in the URL's
// failure. So it holds one entry per host with a task out, at most.
func (s Shard) LastErr() string { return s.ks.Key("lasterr") }

// MaxLeaseErrorLen bounds an error kept in LastErr (bytes).
const MaxLeaseErrorLen = 512

// LeaseError is one LastErr entry.
type LeaseError struct {
	Token string    `json:"token"`
	First time.Time `json:"first"` // the first failure of this lease's task
	Last  time.Time `json:"last"`  // the newest
	Tries int64     `json:"tries"` // failures so far
	Error string    `json:"error"` // the newest
}

// ParseLeaseError decodes a LastErr value; ok is false for one it cannot read.
func ParseLeaseError(v string) (LeaseError, bool) {
	f := strings.SplitN(v, "\t", 5)
	if len(f) != 5 {
		return LeaseError{}, false
	}
	first, e1 := strconv.ParseInt(f[1], 10, 64)
	last, e2 := strconv.ParseInt(f[2], 10, 64)
	tries, e3 := strconv.ParseInt(f[3], 10, 64)
	if e1 != nil || e2 != nil || e3 != nil {
		return LeaseError{}, false
	}
	return LeaseError{Token: f[0], First: time.UnixMilli(first), Last: time.UnixMilli(last), Tries: tries, Error: f[4]}, true
}

// noteScript records a task's error under its host if its token still holds the lease:
// a late write after the lease ended must not stay behind (or name the next task's URL).
// The clock is the Redis server's, as for every other frontier time. KEYS: lease, lasterr.
// ARGV: host, token, error.
var noteScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or string.sub(v, 1, #ARGV[2] + 1) ~= ARGV[2] .. ' ' then return 0 end
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local first, tries = now, 1
local old = redis.call('HGET', KEYS[2], ARGV[1])
if old then
  local tok, f, _, n = string.match(old, '^([^\t]*)\t(%d+)\t(%d+)\t(%d+)\t')
  if tok == ARGV[2] then first, tries = f, tonumber(n) + 1 end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. '\t' .. first .. '\t' .. now .. '\t' .. string.format('%.0f', tries) .. '\t' .. ARGV[3])
return 1
`)

// NoteLeaseError records err as the last error of the task holding host's lease under
// token, so that a stalled lease is named with its cause (trawlctl status, the status
// page, the progress line) and a URL whose attempts run out fails with it. It reports
// whether the lease still held. Tabs and newlines of the error are made spaces.
func NoteLeaseError(ctx context.Context, rdb redis.Scripter, prefix string, shard, shards int, host, token string, err error) (bool, error) {
	msg := strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(err.Error())
	if len(msg) > MaxLeaseErrorLen {
		msg = msg[:MaxLeaseErrorLen]
	}
	ks := ForShard(prefix, shard, shards)
	n, rerr := noteScript.Run(ctx, rdb, []string{ks.Lease(), ks.LastErr()}, LeaseSlot(host, token), token, msg).Int()
	if rerr != nil {
		return false, fmt.Errorf("frontier: note lease error of %s: %w", host, rerr)
	}
	return n == 1, nil
}

// StuckLease is a task out on a host, as a stall report shows it.
type StuckLease struct {
	Shard    int       `json:"shard"`
	Host     string    `json:"host"`
	URL      string    `json:"url"`
	Attempt  int       `json:"attempt"`
	Deadline time.Time `json:"deadline"`
	// Since is when the task was leased (its deadline less the lease TTL the reader was
	// given; zero without one).
	Since time.Time `json:"since,omitempty"`
	// LastError is the fetcher's last error for this task; nil when it reported none (it
	// is still fetching, or died or hung before it could).
	LastError *LeaseError `json:"last_error,omitempty"`
}

// Stuck says the task makes no progress: its lease is overdue, its fetcher reported an
// error for it, or it has been out for more than half the lease TTL, which no request
// needs (a request ends TRAWL_FETCH_TIMEOUT after it starts, and the lease TTL exceeds that
// by 5 s at least; half of the default 2 m is twice the default fetch timeout).
func (l StuckLease) Stuck(now time.Time, leaseTTL time.Duration) bool {
	return l.Overdue(now) || l.LastError != nil || (leaseTTL > 0 && now.Sub(l.Since) > leaseTTL/2)
}

// Overdue says the lease's deadline has passed at now: the task's fetcher has not answered
// in time, and the reaper will bring the URL back.
func (l StuckLease) Overdue(now time.Time) bool { return !now.Before(l.Deadline) }

// Describe is one line for an operator: the URL, its host, how long its lease has left or
// is overdue, and its fetcher's last error.
func (l StuckLease) Describe(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (host %s, attempt %d): ", l.URL, l.Host, l.Attempt+1)
	if !l.Since.IsZero() {
		fmt.Fprintf(&b, "out for %s, ", now.Sub(l.Since).Round(time.Second))
	}
	if l.Overdue(now) {
		fmt.Fprintf(&b, "lease overdue by %s", now.Sub(l.Deadline).Round(time.Second))
	} else {
		fmt.Fprintf(&b, "lease ends in %s", l.Deadline.Sub(now).Round(time.Second))
	}
	if e := l.LastError; e != nil {
		fmt.Fprintf(&b, "; failing for %s (%d tries), last error %s ago: %s", now.Sub(e.First).Round(time.Second), e.Tries,
			now.Sub(e.Last).Round(time.Second), e.Error)
	} else {
		b.WriteString("; no error reported by its fetcher")
	}
	return b.String()
}

// stuckScan bounds the leases of each shard Reader.Stuck looks at (the oldest).
const stuckScan = 64

// Stuck reads the tasks out that are Stuck (leaseTTL is TRAWL_LEASE_TTL), oldest first, at
// most limit of them, among the stuckScan oldest leases of each shard, with the Redis
// clock's now.
func (r *Reader) Stuck(ctx context.Context, leaseTTL time.Duration, limit int) ([]StuckLease, time.Time, error) {
	ls, now, err := r.Leases(ctx, leaseTTL, stuckScan)
	if err != nil {
		return nil, now, err
	}
	out := ls[:0]
	for _, l := range ls {
		if l.Stuck(now, leaseTTL) && len(out) < limit {
			out = append(out, l)
		}
	}
	return out, now, nil
}

// Leases reads the tasks out, the earliest deadline first, at most limit of each shard
// (the oldest leases: the likeliest stuck), with the Redis clock's now; leaseTTL (0 =
// unknown) dates them. Costs three round trips however many leases are out.
func (r *Reader) Leases(ctx context.Context, leaseTTL time.Duration, limit int) ([]StuckLease, time.Time, error) {
	rdb, prefix, shards := r.rdb, r.prefix, r.shards
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return nil, now, fmt.Errorf("frontier leases: time: %w", err)
	}
	per := int64(max(1, limit))
	zs := make([]*redis.ZSliceCmd, shards)
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range zs {
			zs[k] = p.ZRangeWithScores(ctx, ForShard(prefix, k, shards).Inflight(), 0, per-1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, now, fmt.Errorf("frontier leases: %w", err)
	}
	var out []StuckLease
	type cmds struct{ lease, lasterr *redis.SliceCmd }
	cs := make([]cmds, shards)
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, z := range zs {
			hosts := make([]string, 0, len(z.Val()))
			for _, m := range z.Val() {
				h, _ := m.Member.(string)
				hosts = append(hosts, h)
				l := StuckLease{Shard: k, Host: SlotHost(h), Deadline: time.UnixMilli(int64(m.Score))}
				if leaseTTL > 0 {
					l.Since = l.Deadline.Add(-leaseTTL)
				}
				out = append(out, l)
			}
			if len(hosts) > 0 {
				ks := ForShard(prefix, k, shards)
				cs[k] = cmds{p.HMGet(ctx, ks.Lease(), hosts...), p.HMGet(ctx, ks.LastErr(), hosts...)}
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, now, fmt.Errorf("frontier leases: %w", err)
	}
	i := 0
	for k, z := range zs {
		for j := range z.Val() {
			l := &out[i]
			i++
			if cs[k].lease == nil {
				continue
			}
			token := ""
			if v, ok := cs[k].lease.Val()[j].(string); ok {
				tok, e, perr := ParseLease(v)
				token = tok
				if perr == nil {
					l.URL, l.Attempt = e.URL, e.Attempt
				}
			}
			if v, ok := cs[k].lasterr.Val()[j].(string); ok {
				if le, ok := ParseLeaseError(v); ok && le.Token == token {
					l.LastError = &le
				}
			}
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Deadline.Before(out[b].Deadline) })
	return out, now, nil
}

// LeaseHeld reports whether token still holds host's lease: the task it names has not
// ended (by its outcome or the reaper). A fetcher asks before the request of a task that
// JetStream may be handing out a second time (its delivery state lost with a NATS
// restart): a task whose lease ended was answered already, and its request, made again,
// would come outside the host's turn.
func LeaseHeld(ctx context.Context, rdb redis.Cmdable, prefix string, shard, shards int, host, token string) (bool, error) {
	v, err := rdb.HGet(ctx, ForShard(prefix, shard, shards).Lease(), LeaseSlot(host, token)).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("frontier: lease of %s: %w", host, err)
	}
	return strings.HasPrefix(v, token+" "), nil
}
