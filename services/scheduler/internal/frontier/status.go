package frontier

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/politeness"
)

// Bounds of the text an error log line keeps: enough to recognise the URL and the cause,
// small enough that the log (RecentErrors lines per shard) stays a few tens of KiB.
const (
	maxLogURL   = 512
	maxLogError = 200
	maxLogHost  = 255
)

// errorLine is the Complete script's error log line for an outcome that may be retried or
// fail ("" for the others): "<kind>\t<status>\t<host>\t<url>\t<error>". The fields come
// from the wire, so separators are blanked and lengths cut.
func errorLine(o crawlmsg.Outcome, p plan) string {
	if p.act != actRetry && p.act != actFailed {
		return ""
	}
	var b strings.Builder
	b.Grow(64 + min(len(o.URL), maxLogURL) + min(len(o.Error), maxLogError))
	b.WriteString(logField(string(o.Kind), 32))
	b.WriteByte('\t')
	b.WriteString(strconv.Itoa(o.Status))
	b.WriteByte('\t')
	b.WriteString(logField(o.Host, maxLogHost))
	b.WriteByte('\t')
	b.WriteString(logField(o.URL, maxLogURL))
	b.WriteByte('\t')
	b.WriteString(logField(o.Error, maxLogError))
	return b.String()
}

// logField makes s one valid UTF-8 field of at most n bytes without control characters.
func logField(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// ErrorRecord is one line of a shard's error log.
type ErrorRecord = frontierkeys.ErrorRecord

// ParseErrorRecord decodes an error log line; ok is false for a line it cannot read.
func ParseErrorRecord(line string) (ErrorRecord, bool) { return frontierkeys.ParseErrorRecord(line) }

// HostActivity is what the frontier keeps of a host for the status page.
type HostActivity struct {
	Host string
	// Fetched is how many of the host's URLs ended fetched.
	Fetched int64
	// LastMs and AvgMs are the host's last response time and its moving average.
	LastMs, AvgMs int64
	// Addr is the server address the host was last requested at ("" = unknown), and
	// Server that address's state (per-server politeness; Known is false without any).
	Addr   string
	Server politeness.ServerState
}

// Status is a shard's state for the status page: its counters and queue sizes as
// frontierkeys reads them (trawlctl status shows the same), the busiest and the slowest
// hosts, and the most recent errors.
type Status struct {
	frontierkeys.ShardStatus
	Busiest []HostActivity // most fetched first
	Slowest []HostActivity // highest average response time first
	Errors  []ErrorRecord  // newest first
}

// Status reads the shard's status with the top hosts and the last errors newest first
// (at most the kept TopHosts and RecentErrors) in two round trips: the views, then the
// listed hosts' response times.
func (f *Frontier) Status(ctx context.Context, now time.Time, top, nErrors int) (Status, error) {
	top = min(max(top, 0), f.o.TopHosts)
	nErrors = min(max(nErrors, 0), f.o.RecentErrors)
	var (
		reads      *frontierkeys.StatusReads
		busy, slow *redis.ZSliceCmd
		errs       *redis.StringSliceCmd
		status     Status
	)
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		reads = f.k.QueueStatus(ctx, p, now, f.o.FrontQueues)
		if top > 0 {
			busy = p.ZRevRangeWithScores(ctx, f.k.Busiest(), 0, int64(top-1))
			slow = p.ZRevRangeWithScores(ctx, f.k.Slowest(), 0, int64(top-1))
		}
		if nErrors > 0 {
			errs = p.LRange(ctx, f.k.Errors(), 0, int64(nErrors-1))
		}
		return nil
	})
	if err != nil {
		return Status{}, fmt.Errorf("frontier: status: %w", err)
	}
	status.ShardStatus = reads.Status(f.o.Shard, f.o.FrontQueues)
	if errs != nil {
		for _, line := range errs.Val() {
			if r, ok := ParseErrorRecord(line); ok {
				status.Errors = append(status.Errors, r)
			}
		}
	}
	if top == 0 {
		return status, nil
	}
	for _, z := range busy.Val() {
		h, _ := z.Member.(string)
		status.Busiest = append(status.Busiest, HostActivity{Host: h, Fetched: int64(z.Score)})
	}
	for _, z := range slow.Val() {
		h, _ := z.Member.(string)
		status.Slowest = append(status.Slowest, HostActivity{Host: h, AvgMs: int64(z.Score)})
	}
	if err := f.fillHosts(ctx, status.Busiest, status.Slowest); err != nil {
		return Status{}, err
	}
	return status, nil
}

// fillHosts completes the listed hosts from their host:<host> hashes. A host whose state
// expired keeps what its view said.
func (f *Frontier) fillHosts(ctx context.Context, lists ...[]HostActivity) error {
	cmds := map[string]*redis.SliceCmd{}
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, l := range lists {
			for _, a := range l {
				if cmds[a.Host] == nil {
					cmds[a.Host] = p.HMGet(ctx, f.k.Host(a.Host), frontierkeys.HostFetched, frontierkeys.HostRT, frontierkeys.HostRTAvg, frontierkeys.HostAddr)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("frontier: status hosts: %w", err)
	}
	num := func(v any) (int64, bool) {
		s, ok := v.(string)
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	for _, l := range lists {
		for i := range l {
			v := cmds[l[i].Host].Val()
			if len(v) != 4 {
				continue
			}
			if n, ok := num(v[0]); ok {
				l[i].Fetched = n
			}
			if n, ok := num(v[1]); ok {
				l[i].LastMs = n
			}
			if n, ok := num(v[2]); ok {
				l[i].AvgMs = n
			}
			if a, ok := v[3].(string); ok {
				l[i].Addr = a
			}
		}
	}
	return f.fillServers(ctx, lists...)
}

// fillServers reads the state of the addresses the listed hosts were last requested at.
func (f *Frontier) fillServers(ctx context.Context, lists ...[]HostActivity) error {
	var addrs []netip.Addr
	for _, l := range lists {
		for _, a := range l {
			if ip, err := netip.ParseAddr(a.Addr); err == nil {
				addrs = append(addrs, ip)
			}
		}
	}
	if len(addrs) == 0 {
		return nil
	}
	st, err := politeness.ReadServers(ctx, f.rdb, f.o.KeyPrefix, addrs)
	if err != nil {
		return fmt.Errorf("frontier: status hosts: %w", err)
	}
	for _, l := range lists {
		for i := range l {
			if ip, err := netip.ParseAddr(l[i].Addr); err == nil {
				l[i].Server = st[ip]
			}
		}
	}
	return nil
}
