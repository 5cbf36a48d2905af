package docsweb

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Summary is what nginx saw, for a person reading a failed or finished run: per host the
// requests, the distinct URLs, the HTML pages served and how many of them gzip-encoded, the
// statuses and the last request; then the URLs requested more than once, most first.
func Summary(entries []Entry, sites []Site, now time.Time) string {
	type hostStats struct {
		reqs, html, gzip int
		bytes            int64
		urls             map[string]int
		status           map[int]int
		last             Entry
		prev             *Entry
		closest          time.Duration // smallest gap from one request's end to the next's start
	}
	stats := map[string]*hostStats{}
	var hosts []string
	for _, s := range sites {
		hosts = append(hosts, s.Host())
	}
	sorted := slices.SortedStableFunc(slices.Values(entries), func(a, b Entry) int { return a.Start.Compare(b.Start) })
	for _, e := range sorted {
		h := stats[e.Host]
		if h == nil {
			h = &hostStats{urls: map[string]int{}, status: map[int]int{}}
			stats[e.Host] = h
			if !slices.Contains(hosts, e.Host) {
				hosts = append(hosts, e.Host)
			}
		}
		h.reqs++
		h.bytes += e.Bytes
		h.urls[e.Key()]++
		h.status[e.Status]++
		if e.Status == 200 && strings.HasPrefix(e.Type, "text/html") {
			h.html++
			if e.Encoding == "gzip" {
				h.gzip++
			}
		}
		if !e.End.Before(h.last.End) {
			h.last = e
		}
		if h.prev != nil {
			if gap := e.Start.Sub(h.prev.End); h.reqs == 2 || gap < h.closest {
				h.closest = gap
			}
		}
		h.prev = &e
	}
	var b strings.Builder
	fmt.Fprintf(&b, "nginx served %d requests:\n", len(entries))
	var repeated []string
	for _, host := range hosts {
		h := stats[host]
		if h == nil {
			fmt.Fprintf(&b, "  %s: no request\n", host)
			continue
		}
		var st []string
		for _, code := range slices.Sorted(maps.Keys(h.status)) {
			st = append(st, fmt.Sprintf("%d×%d", h.status[code], code))
		}
		closest := "-"
		if h.reqs > 1 {
			closest = h.closest.String()
		}
		fmt.Fprintf(&b, "  %s: %d requests of %d URLs, %d HTML pages (%d gzip-encoded), %d body octets, status %s; closest gap %s; last %s %s %d, %s ago\n",
			host, h.reqs, len(h.urls), h.html, h.gzip, h.bytes, strings.Join(st, " "), closest,
			h.last.End.Format(stamp), h.last.URI, h.last.Status, now.Sub(h.last.End).Round(100*time.Millisecond))
		for k, n := range h.urls {
			if n > 1 {
				repeated = append(repeated, fmt.Sprintf("%d× %s", n, k))
			}
		}
	}
	if len(repeated) > 0 {
		slices.SortFunc(repeated, func(a, b string) int {
			var na, nb int
			fmt.Sscanf(a, "%d", &na)
			fmt.Sscanf(b, "%d", &nb)
			return cmp.Or(nb-na, strings.Compare(a, b))
		})
		fmt.Fprintf(&b, "requested more than once (%d URLs):\n", len(repeated))
		for i, r := range repeated {
			if i == 10 {
				fmt.Fprintf(&b, "  … and %d more\n", len(repeated)-i)
				break
			}
			fmt.Fprintf(&b, "  %s\n", r)
		}
	}
	return b.String()
}
