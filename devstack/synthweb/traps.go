package synthweb

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The trap host's traps besides the calendar, each stopped by one of the crawler's URL
// rules (see Config.MaxURLLength):
//
//   - /loop/ links to "a/b/" relative to itself: /loop/a/b/, /loop/a/b/a/b/, … for ever,
//     the shape of a relative link on a page served under many paths. The parser refuses a
//     path that repeats a segment three times, so /loop/a/b/a/b/a/b/ is never requested.
//   - /grow/ links to itself plus a 700-character segment: /grow/aaa…, /grow/aaa…/bbb…,
//     … The third segment makes the URL longer than 2048 bytes, so it is never requested.
const (
	loopPrefix = "/loop/"
	growPrefix = "/grow/"
	growSeg    = 700
	// trapRepeats is how often one path segment may occur before the crawler refuses
	// the URL (urlnorm.RepeatsSegment, the parser's trap rule).
	trapRepeats = 3
)

func (m *model) loopPage(h int, path string) resource {
	rest := strings.TrimPrefix(path, loopPrefix)
	if len(rest)%4 != 0 || strings.Repeat("a/b/", len(rest)/4) != rest || len(rest)/4 > 64 {
		return notFound()
	}
	rng := m.pageRand(h, hashPath(path))
	g := newGen(m, h, path, rng)
	g.add(h, path+"a/b/", "deeper")
	g.add(h, "/", "home")
	return resource{status: http.StatusOK, contentType: htmlType,
		title: m.hosts[h].Name + " loop " + path, links: g.links, textSeed: rng.Uint64()}
}

func growSegment(i int) string { return strings.Repeat(string(rune('a'+i)), growSeg) }

func (m *model) growPage(h int, path string) resource {
	rest := strings.TrimPrefix(path, growPrefix)
	var segs []string
	if rest != "" {
		segs = strings.Split(rest, "/")
	}
	if len(segs) > 25 {
		return notFound()
	}
	for i, s := range segs {
		if s != growSegment(i) {
			return notFound()
		}
	}
	next := growPrefix + strings.Join(append(segs, growSegment(len(segs))), "/")
	rng := m.pageRand(h, hashPath(path))
	g := newGen(m, h, path, rng)
	g.add(h, next, "longer")
	g.add(h, "/", "home")
	return resource{status: http.StatusOK, contentType: htmlType,
		title: fmt.Sprintf("%s grow %d", m.hosts[h].Name, len(segs)), links: g.links, textSeed: rng.Uint64()}
}

// repeatsSegment reports a path (of an absolute URL) that holds one segment trapRepeats or
// more times: the parser's trap rule, written independently of it.
func repeatsSegment(u string) bool {
	_, rest, _ := strings.Cut(u, "://")
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return false
	}
	path := rest[i:]
	if j := strings.IndexAny(path, "?#"); j >= 0 {
		path = path[:j]
	}
	count := map[string]int{}
	for _, s := range strings.Split(path, "/") {
		if s == "" {
			continue
		}
		if count[s]++; count[s] >= trapRepeats {
			return true
		}
	}
	return false
}

// admits reports whether the crawler's parser emits a link to target (a URL as resolved
// from an href, before dedup strips session ids).
func (m *model) admits(target string) bool {
	return len(target) <= m.cfg.MaxURLLength && !repeatsSegment(target)
}

// key is the URL the crawler requests for a link: the target, or with session ids
// stripped (by dedup) unless the crawler keeps them.
func (m *model) key(l link) string {
	if l.canon != "" && !m.cfg.KeepSessionIDs {
		return l.canon
	}
	return l.target
}

// sessionPages are the session-ids host's pages: the path and query a link to page n
// carries (token is a fresh session id for the linking URL), and the same without the
// session id, the form a crawler that strips session ids requests. Page 5's "sid=7" is
// not a session id (too short to be a token) and is kept by such a crawler.
var sessionPages = []struct {
	link  func(token string) string
	plain string
}{
	{func(t string) string { return "/s/0;jsessionid=" + strings.ToUpper(t[:32]) }, "/s/0"},
	{func(t string) string { return "/s/1?sid=" + t[:32] }, "/s/1"},
	{func(t string) string { return "/s/2?PHPSESSID=" + t[:26] + "&lang=en" }, "/s/2?lang=en"},
	{func(t string) string { return "/s/3?sessionid=" + t[:32] }, "/s/3"},
	{func(t string) string { return "/s/4?ASPSESSIONIDQQGGGNCG=" + letters(t[:24]) }, "/s/4"},
	{func(string) string { return "/s/5?sid=7" }, "/s/5?sid=7"},
}

// letters maps hex digits to upper-case letters (ASP session ids are letters only).
func letters(hex string) string {
	b := []byte(hex)
	for i, c := range b {
		if c >= '0' && c <= '9' {
			b[i] = 'G' + c - '0'
		} else {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// sessionToken is the session id a page served at pathQuery hands out in its link to page
// n: a function of the requested URL, as if every request without a cookie started a new
// session. So a crawler that keeps session ids finds new URLs on every page, however many
// times it has seen the page.
func sessionToken(pathQuery string, n int) string {
	a := hashPath(pathQuery + "#" + strconv.Itoa(n))
	b := hashPath(strconv.Itoa(n) + "#" + pathQuery)
	return fmt.Sprintf("%016x%016x", a, b)
}

func (m *model) sessionHost(h int, pathQuery string) resource {
	path, _, _ := strings.Cut(pathQuery, "?")
	g := newGen(m, h, path, m.pageRand(h, homeKey))
	link := func(n int) {
		pq := sessionPages[n].link(sessionToken(pathQuery, n))
		g.addCanon(h, pq, sessionPages[n].plain, fmt.Sprintf("page %d", n))
	}
	if pathQuery == "/" {
		for n := range sessionPages {
			link(n)
		}
		return resource{status: http.StatusOK, contentType: htmlType,
			title: m.hosts[h].Name + " session-ids home", links: g.links, textSeed: g.rng.Uint64()}
	}
	// /s/<n>, with or without a ;path parameter and any query: the server ignores session
	// ids, as real ones do for a session they do not know.
	rest, ok := strings.CutPrefix(path, "/s/")
	num, _, _ := strings.Cut(rest, ";")
	n, numOK := parseNum(num)
	if !ok || !numOK || n >= len(sessionPages) {
		return notFound()
	}
	link((n + 1) % len(sessionPages))
	link((n + 2) % len(sessionPages))
	g.add(h, "/", "home")
	// The text depends on the page only: every session-id spelling of a page is the same
	// document.
	return resource{status: http.StatusOK, contentType: htmlType,
		title: fmt.Sprintf("%s session page %d", m.hosts[h].Name, n), links: g.links,
		textSeed: m.pageRand(h, uint64(n)).Uint64()}
}

// dupPages are the duplicates host's copies: each serves the page of another path,
// byte for byte, or (near) with one word of its text changed.
var dupPages = []struct {
	path, of string
	near     bool
}{
	{"/index.html", "/", false},
	{"/copy/0", "/doc/0", false},
	{"/doc/1?print=1", "/doc/1", false},
	{"/mirror/doc/2", "/doc/2", false},
	{"/near/0", "/doc/0", true},
	{"/near/2", "/doc/2", true},
}

const (
	dupDocs = 3
	// dupParas paragraphs of filler make about 1,200 words, so one changed word changes
	// three of ~1,200 word 3-shingles: a near duplicate for any text fingerprint.
	dupParas = 30
	// dupSwapWord is the word the near copies change, to a word the filler never uses.
	dupSwapWord = 400
	swapped     = "zeppelin"
)

func (m *model) duplicatesHost(h int, path, query string) resource {
	pq := path
	if query != "" {
		pq += "?" + query
	}
	for _, d := range dupPages {
		if d.path == pq {
			res := m.duplicatesHost(h, d.of, "")
			if d.near {
				res.swapWord = dupSwapWord
			}
			return res
		}
	}
	if query != "" {
		return notFound()
	}
	// Links are written absolute, so a copy served under another directory links to
	// exactly what the original links to.
	abs := func(g *gen, p, text string) { g.raw(m.url(h, p), text, "", m.url(h, p)) }
	if path == "/" {
		rng := m.pageRand(h, homeKey)
		g := newGen(m, h, path, rng)
		for n := range dupDocs {
			abs(g, "/doc/"+strconv.Itoa(n), fmt.Sprintf("article %d", n))
		}
		for _, d := range dupPages {
			abs(g, d.path, "again: "+d.path)
		}
		return resource{status: http.StatusOK, contentType: htmlType,
			title: m.hosts[h].Name + " duplicates home", links: g.links, textSeed: rng.Uint64()}
	}
	rest, ok := strings.CutPrefix(path, "/doc/")
	n, numOK := parseNum(rest)
	if !ok || !numOK || n >= dupDocs {
		return notFound()
	}
	rng := m.pageRand(h, uint64(n))
	g := newGen(m, h, path, rng)
	abs(g, "/", "home")
	return resource{status: http.StatusOK, contentType: htmlType,
		title: fmt.Sprintf("%s article %d", m.hosts[h].Name, n), links: g.links,
		textSeed: rng.Uint64(), paras: dupParas}
}

// Duplicates returns the duplicates host's pages whose visible text repeats another
// page's: URL → the URL of the page it copies. Exact copies serve the original's body byte
// for byte (/index.html of /, /copy/0 of /doc/0, /doc/1?print=1 of /doc/1, /mirror/doc/2
// of /doc/2); near copies (NearDuplicates) change one word in about 1,200 (/near/0 of
// /doc/0, /near/2 of /doc/2). Every URL, original or copy, is fetched by a crawl of depth
// 1 or more, all at depth 1, so which of a group the crawler meets first is a matter of
// timing: a content-dedup check should expect, per group (an original and the copies
// mapped to it), every page but one flagged, rather than particular ones. No other page
// of the web duplicates another (in a crawl that strips session ids). Empty without the
// special hosts.
func (w *Web) Duplicates() map[string]string { return w.m.duplicates(false) }

// NearDuplicates is the part of Duplicates whose text differs from the original's in one
// word.
func (w *Web) NearDuplicates() map[string]string { return w.m.duplicates(true) }

func (m *model) duplicates(nearOnly bool) map[string]string {
	out := map[string]string{}
	h, ok := m.special[KindDuplicates]
	if !ok {
		return out
	}
	for _, d := range dupPages {
		if d.near || !nearOnly {
			out[m.url(h, d.path)] = m.url(h, d.of)
		}
	}
	return out
}
