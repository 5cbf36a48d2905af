package synthweb

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Violation is a pair of requests to one host that breaks a rule.
type Violation struct {
	Host   string
	A, B   Request // A started first
	Reason string
}

func (v Violation) String() string {
	return fmt.Sprintf("host %s: %s [%s .. %s] and %s [%s .. %s]: %s",
		v.Host,
		v.A.Path, v.A.Start.Format(stampMicro), v.A.End.Format(stampMicro),
		v.B.Path, v.B.Start.Format(stampMicro), v.B.End.Format(stampMicro),
		v.Reason)
}

const stampMicro = "15:04:05.000000"

// byHost groups requests per host, each group ordered by Start.
func byHost(reqs []Request) (map[string][]Request, []string) {
	groups := make(map[string][]Request)
	for _, r := range reqs {
		groups[r.Host] = append(groups[r.Host], r)
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
func Overlaps(reqs []Request) []Violation {
	groups, hosts := byHost(reqs)
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
				out = append(out, Violation{Host: h, A: a, B: b,
					Reason: fmt.Sprintf("overlap: second started %s before the first ended", a.End.Sub(b.Start))})
			}
		}
	}
	return out
}

// Gaps returns consecutive requests to the same host (robots.txt included)
// where next.Start - prev.End is below minGap(host). Overlapping requests
// have a negative gap and are reported too. A nil minGap means zero.
func Gaps(reqs []Request, minGap func(host string) time.Duration) []Violation {
	groups, hosts := byHost(reqs)
	var out []Violation
	for _, h := range hosts {
		var want time.Duration
		if minGap != nil {
			want = minGap(h)
		}
		g := groups[h]
		for i := 1; i < len(g); i++ {
			a, b := g[i-1], g[i]
			if gap := b.Start.Sub(a.End); gap < want {
				out = append(out, Violation{Host: h, A: a, B: b,
					Reason: fmt.Sprintf("gap %s < %s", gap, want)})
			}
		}
	}
	return out
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
