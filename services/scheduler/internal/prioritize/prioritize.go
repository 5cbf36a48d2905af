// Package prioritize maps discovered URLs to the frontier's front queues.
//
// Two prioritisers exist (TRAWL_PRIORITIZER): BreadthFirst (by depth, the default) and
// Preference, Cho, Garcia-Molina and Page's importance score I(P) = X·IB(P) + Y·IL(P),
// where IB is the backlink popularity of P's host (kept in Redis by the frontier, so the
// final queue is computed in the add script) and IL is read from the URL string here.
package prioritize

import (
	"math"
	"strings"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
)

// Names accepted by TRAWL_PRIORITIZER.
const (
	NameBreadth    = "breadth"
	NamePreference = "preference"
)

// BreadthFirst puts a URL in the queue of its depth, the deepest ones sharing the last
// queue: seeds first, then their links, and so on (min(depth, F-1)).
type BreadthFirst struct{}

// Priority implements frontier.Prioritizer.
func (BreadthFirst) Priority(u crawlmsg.Discovered, queues int) int {
	if queues <= 1 {
		return 0
	}
	return min(max(min(max(u.Depth, 0), queues-1)-Nudge(u, time.Now()), 0), queues-1)
}

// Nudge is how many front queues a URL moves up (positive) or down beyond what its depth
// or score says: its sitemap rating, and for a recrawl how overdue and how changeable it is.
func Nudge(u crawlmsg.Discovered, now time.Time) int {
	return SitemapNudge(u) + RecrawlNudge(u, now)
}

// RecrawlNudge moves a due URL up one queue when it has waited past its due time for half
// its interval or more (the frontier's backlog held it back), and one more when most of its
// fetches found a change (at least two judged): freshness is worth most where pages change.
// A URL queued for the first time is not moved.
func RecrawlNudge(u crawlmsg.Discovered, now time.Time) int {
	st := u.Recrawl
	if u.Via != crawlmsg.ViaRecrawl || st == nil {
		return 0
	}
	n := 0
	if st.Due > 0 && st.Interval > 0 && now.UnixMilli()-st.Due >= st.Interval/2 {
		n++
	}
	if st.Fetches >= 2 && 2*st.Changes > st.Fetches {
		n++
	}
	return n
}

// SitemapNudge is how many front queues a sitemap's <priority> moves a URL it lists up
// (positive) or down: one up at 0.75 and above, one down at 0.25 and below, none around
// the protocol's default of 0.5. Only a nudge: a site rates its own pages, against each
// other, and every site rates its own highly.
func SitemapNudge(u crawlmsg.Discovered) int {
	if u.Priority == nil || math.IsNaN(*u.Priority) {
		return 0
	}
	return int(math.Round(2 * (min(max(*u.Priority, 0), 1) - 0.5)))
}

// Preference scores a URL I(P) = X·IB(P) + Y·IL(P) and maps the score onto the front
// queues with QueueFor: one unit of score is one queue, counted up from the lowest.
//
// IB(P) = log2(1 + backlinks of P's host): host-level popularity, counted by the frontier
// as the number of distinct pages on other hosts whose frontier batches held a URL of the
// host. Only Redis knows it, so the frontier adds X·IB in its add script to the part
// computed here (LinkScore); Priority alone is the score with IB = 0.
//
// IL(P) is LinkFeatures(P.URL), in [0, MaxLinkScore].
type Preference struct {
	X, Y float64
}

// Priority implements frontier.Prioritizer for a host without known backlinks.
func (p Preference) Priority(u crawlmsg.Discovered, queues int) int {
	return QueueFor(p.LinkScore(u), queues)
}

// BacklinkWeight is X, the weight of IB(P) (frontier.BacklinkScorer).
func (p Preference) BacklinkWeight() float64 { return p.X }

// LinkScore is Y·IL(P), the part of the score known from the URL (frontier.BacklinkScorer),
// plus the URL's Nudge (one unit of score is one queue).
func (p Preference) LinkScore(u crawlmsg.Discovered) float64 {
	return p.Y*LinkFeatures(u.URL) + float64(Nudge(u, time.Now()))
}

// scoreEpsilon keeps integral scores on their side of a queue boundary whatever the last
// bit of log2 is in Go and in Redis's Lua (which computes log(1+n)/log(2) in C).
const scoreEpsilon = 1e-9

// QueueFor maps a score onto queues 0..queues-1: queue F-1-⌊score⌋, clamped, so a higher
// score is a lower index (higher priority) and a score below 1 lands in the last queue.
// lua/add.lua applies the same rule to X·IB + LinkScore.
func QueueFor(score float64, queues int) int {
	if queues <= 1 || math.IsNaN(score) || score <= 0 {
		return max(queues-1, 0)
	}
	q := float64(queues-1) - math.Floor(score+scoreEpsilon)
	if q < 0 {
		return 0
	}
	return int(q)
}

// IB is the backlink score of a host with n counted backlinks: log2(1+n). lua/add.lua
// computes the same (Go's twin, for tests and documentation).
func IB(n int64) float64 {
	if n <= 0 {
		return 0
	}
	return math.Log(1+float64(n)) / math.Log(2)
}

// MaxLinkScore is the largest LinkFeatures value.
const MaxLinkScore = 4.0

// LinkFeatures is IL(P): how much a URL looks like a worthwhile, canonical page, from the
// string alone, in [0, MaxLinkScore]. Each feature is a cheap proxy that crawl studies
// and common crawler heuristics associate with important or non-trap pages:
//
//	path depth (non-empty segments)   ≤1: 1    2: 0.75  3: 0.5  4: 0.25  ≥5: 0
//	query parameters                   0: 1    1: 0.5   2: 0.25 ≥3: 0
//	no session-like parameter or long opaque token (ids, hashes): 1, else 0
//	page-like last segment (none, no extension, .html, .php, …): 0.5, else 0
//	URL length                         ≤64: 0.5   ≤128: 0.25   longer: 0
//
// The input is a normalised absolute URL; anything else scores 0.
func LinkFeatures(raw string) float64 {
	i := strings.Index(raw, "://")
	if i < 0 {
		return 0
	}
	rest := raw[i+3:]
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		rest = rest[j:]
	} else {
		rest = ""
	}
	if j := strings.IndexByte(rest, '#'); j >= 0 {
		rest = rest[:j]
	}
	path, query, _ := strings.Cut(rest, "?")

	score := 0.0
	segs, last := 0, ""
	for s := range strings.SplitSeq(path, "/") {
		if s != "" {
			segs++
		}
		last = s
	}
	score += max(0, 1-0.25*float64(max(segs-1, 0)))

	params := 0
	clean := !longToken(path) && !strings.Contains(strings.ToLower(path), "sessionid=") &&
		!strings.Contains(strings.ToLower(path), ";sid=")
	for kv := range strings.SplitSeq(query, "&") {
		if kv == "" {
			continue
		}
		params++
		name, value, _ := strings.Cut(kv, "=")
		if sessionParam(name) || longToken(value) {
			clean = false
		}
	}
	switch params {
	case 0:
		score++
	case 1:
		score += 0.5
	case 2:
		score += 0.25
	}
	if clean {
		score++
	}
	if pageLike(last) {
		score += 0.5
	}
	switch {
	case len(raw) <= 64:
		score += 0.5
	case len(raw) <= 128:
		score += 0.25
	}
	return score
}

// sessionParam reports a query parameter name that usually carries a per-visitor token:
// such URLs multiply one page into many.
func sessionParam(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "sid", "sessid", "sessionid", "session_id", "session", "sess", "jsessionid", "phpsessid",
		"cfid", "cftoken", "token", "auth", "authtoken", "access_token":
		return true
	}
	return strings.HasPrefix(n, "aspsessionid")
}

// longToken reports an opaque token: a run of letters and digits of 32 or more, or of 20
// or more mixing letters and digits (hashes, ids, base64 state).
func longToken(s string) bool {
	run, letters, digits := 0, false, false
	check := func() bool {
		return run >= 32 || (run >= 20 && letters && digits)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			run++
			digits = true
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			run++
			letters = true
		default:
			if check() {
				return true
			}
			run, letters, digits = 0, false, false
		}
	}
	return check()
}

// pageExt are extensions of pages (as opposed to media, archives, scripts, feeds).
var pageExt = map[string]bool{
	"html": true, "htm": true, "xhtml": true, "shtml": true, "php": true, "asp": true,
	"aspx": true, "jsp": true, "cfm": true, "cgi": true, "pl": true,
}

// pageLike reports a last path segment that names a page: none (a directory), no
// extension, or a page extension.
func pageLike(last string) bool {
	dot := strings.LastIndexByte(last, '.')
	if dot < 0 {
		return true
	}
	return pageExt[strings.ToLower(last[dot+1:])]
}
