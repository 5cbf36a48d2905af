package synthweb

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Violation is a pair of requests to one host, or to one server address, that breaks a
// rule.
type Violation struct {
	Host   string  // the host; "" for a violation per address
	Addr   string  // the address, for a violation per address (OverlapsByAddr, GapsByAddr)
	A, B   Request // A started first
	Reason string
}

func (v Violation) String() string {
	if v.Host == "" {
		return fmt.Sprintf("address %s: %s%s [%s .. %s] and %s%s [%s .. %s]: %s",
			v.Addr,
			v.A.Host, v.A.Path, v.A.Start.Format(stampMicro), v.A.End.Format(stampMicro),
			v.B.Host, v.B.Path, v.B.Start.Format(stampMicro), v.B.End.Format(stampMicro),
			v.Reason)
	}
	return fmt.Sprintf("host %s: %s [%s .. %s] and %s [%s .. %s]: %s",
		v.Host,
		v.A.Path, v.A.Start.Format(stampMicro), v.A.End.Format(stampMicro),
		v.B.Path, v.B.Start.Format(stampMicro), v.B.End.Format(stampMicro),
		v.Reason)
}

const stampMicro = "15:04:05.000000"

func hostKey(r Request) string { return r.Host }
func addrKey(r Request) string { return r.Addr }

// group groups requests by key, each group ordered by Start.
func group(reqs []Request, key func(Request) string) (map[string][]Request, []string) {
	groups := make(map[string][]Request)
	for _, r := range reqs {
		groups[key(r)] = append(groups[key(r)], r)
	}
	hosts := make([]string, 0, len(groups))
	for h, g := range groups {
		slices.SortStableFunc(g, func(a, b Request) int {
			return cmp.Or(a.Start.Compare(b.Start), a.End.Compare(b.End))
		})
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	return groups, hosts
}

// Overlaps returns pairs of requests to the same host whose [Start,End]
// intervals overlap, i.e. the crawler had two requests to one host in
// flight at once.
func Overlaps(reqs []Request) []Violation { return overlaps(reqs, false) }

// OverlapsByAddr returns pairs of requests to the same server address, whatever their
// hosts, whose [Start,End] intervals overlap: two requests in flight to one server.
func OverlapsByAddr(reqs []Request) []Violation { return overlaps(reqs, true) }

func overlaps(reqs []Request, perAddr bool) []Violation {
	key := hostKey
	if perAddr {
		key = addrKey
	}
	groups, hosts := group(reqs, key)
	var out []Violation
	for _, h := range hosts {
		g := groups[h]
		for i, a := range g {
			// Sorted by Start, so only the following requests that start
			// before a ends can overlap it.
			for _, b := range g[i+1:] {
				if b.Start.After(a.End) {
					break
				}
				out = append(out, violation(h, perAddr, a, b,
					fmt.Sprintf("overlap: second started %s before the first ended", a.End.Sub(b.Start))))
			}
		}
	}
	return out
}

// Gaps returns consecutive requests to the same host (robots.txt included)
// where next.Start - prev.End is below minGap(host). Overlapping requests
// have a negative gap and are reported too. A nil minGap means zero.
func Gaps(reqs []Request, minGap func(host string) time.Duration) []Violation {
	return gaps(reqs, false, func(_, b Request) time.Duration {
		if minGap == nil {
			return 0
		}
		return minGap(b.Host)
	})
}

// GapsByAddr returns consecutive requests to the same server address, whatever their
// hosts, where next.Start - prev.End is below minGap(prev, next): the gap a request owes
// to the one before it on that server (per-server politeness: the rule of the host
// requested, next.Host). A nil minGap means zero.
func GapsByAddr(reqs []Request, minGap func(prev, next Request) time.Duration) []Violation {
	return gaps(reqs, true, func(a, b Request) time.Duration {
		if minGap == nil {
			return 0
		}
		return minGap(a, b)
	})
}

func gaps(reqs []Request, perAddr bool, want func(a, b Request) time.Duration) []Violation {
	key := hostKey
	if perAddr {
		key = addrKey
	}
	groups, keys := group(reqs, key)
	var out []Violation
	for _, k := range keys {
		g := groups[k]
		for i := 1; i < len(g); i++ {
			a, b := g[i-1], g[i]
			if w, gap := want(a, b), b.Start.Sub(a.End); gap < w {
				out = append(out, violation(k, perAddr, a, b, fmt.Sprintf("gap %s < %s", gap, w)))
			}
		}
	}
	return out
}

func violation(key string, perAddr bool, a, b Request, reason string) Violation {
	if perAddr {
		return Violation{Addr: key, A: a, B: b, Reason: reason}
	}
	return Violation{Host: key, A: a, B: b, Reason: reason}
}

// CountByURL counts requests per full URL, origin(host) + path. A nil
// origin uses "http://" + host.
func CountByURL(reqs []Request, origin func(host string) string) map[string]int {
	if origin == nil {
		origin = func(h string) string { return "http://" + h }
	}
	counts := make(map[string]int)
	for _, r := range reqs {
		counts[origin(r.Host)+r.Path]++
	}
	return counts
}

// Check compares a request log with the expectation and returns one line
// per problem, sorted; nil means the crawl was correct. robots.txt requests
// are ignored except that they are the only ones allowed on ForbiddenHosts.
// maxRetries is the crawler's retry limit for 5xx responses; origin maps a
// host to "http://host:port" (Web.Origin).
func (e Expectation) Check(reqs []Request, origin func(host string) string, maxRetries int) []string {
	var problems []string
	pages := make([]Request, 0, len(reqs))
	for _, r := range reqs {
		if r.Path == "/robots.txt" {
			continue
		}
		pages = append(pages, r)
		if e.ForbiddenHosts[r.Host] {
			problems = append(problems, fmt.Sprintf("requested %s%s on a host whose robots.txt is unavailable", origin(r.Host), r.Path))
		}
	}
	counts := CountByURL(pages, origin)
	for u := range e.Fetch {
		switch c := counts[u]; {
		case c == 0:
			problems = append(problems, "never fetched: "+u)
		case c > 1:
			problems = append(problems, fmt.Sprintf("fetched %d times, want once: %s", c, u))
		}
	}
	for u := range e.Retried {
		switch c := counts[u]; {
		case c == 0:
			problems = append(problems, "never fetched (always 5xx, must be tried): "+u)
		case c > 1+maxRetries:
			problems = append(problems, fmt.Sprintf("fetched %d times, more than 1+%d retries: %s", c, maxRetries, u))
		}
	}
	for u, c := range counts {
		if e.Fetch[u] || e.Retried[u] != 0 {
			continue
		}
		if e.Forbidden[u] {
			problems = append(problems, fmt.Sprintf("forbidden URL fetched %d times: %s", c, u))
			continue
		}
		problems = append(problems, fmt.Sprintf("unexpected URL fetched %d times: %s", c, u))
	}
	sort.Strings(problems)
	return slices.Compact(problems)
}

// Span is the time from the earliest request's start to the latest one's end (0 for none),
// over which a crawl's rate is judged.
func Span(reqs []Request) time.Duration {
	if len(reqs) == 0 {
		return 0
	}
	first, last := reqs[0].Start, reqs[0].End
	for _, q := range reqs {
		if q.Start.Before(first) {
			first = q.Start
		}
		if q.End.After(last) {
			last = q.End
		}
	}
	return last.Sub(first)
}
