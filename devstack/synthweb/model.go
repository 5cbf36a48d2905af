package synthweb

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
)

const (
	htmlType = "text/html; charset=utf-8"
	textType = "text/plain; charset=utf-8"
	pdfType  = "application/pdf"

	// homeLinks is how many level-1 pages an ordinary home page links to.
	homeLinks = 4
	// trapEntry is the calendar month the trap's home page links to.
	trapEntryYear, trapEntryMonth = 2025, 1
)

// model is the pure, immutable description of the web: everything the
// handler serves and Expected walks comes from here.
type model struct {
	cfg     Config
	port    int
	hosts   []HostInfo
	index   map[string]int // "ip:port" -> host index
	special map[HostKind]int
	levels  []span // levels[i] are the ordinary pages at level i+1
	fanout  int    // children per page from one level to the next
}

// span is a run of page numbers [start, start+size).
type span struct{ start, size int }

// newModel describes the web whose hosts are served on ips (one per host, see hostIPs).
func newModel(cfg Config, ips []string, port int) *model {
	m := &model{cfg: cfg, port: port, index: make(map[string]int), special: make(map[HostKind]int)}
	for i, a := range ips {
		kind := KindOrdinary
		if i >= cfg.Hosts {
			kind = extraKinds(cfg)[i-cfg.Hosts]
			m.special[kind] = i
		}
		name := a
		if i < cfg.VirtualHosts {
			name = virtualName(i)
		}
		h := HostInfo{Name: name, Addr: a, Origin: originOf(name, port), Kind: kind}
		switch {
		case kind == KindCrawlDelay:
			h.CrawlDelay = cfg.CrawlDelay
		case kind == KindOrdinary:
			h.CrawlDelay = cfg.RobotsCrawlDelay
		}
		m.hosts = append(m.hosts, h)
		m.index[strings.TrimPrefix(h.Origin, "http://")] = i
	}

	// Levels grow by the fanout so each page can link to all of its children
	// and still have room for random links within LinksPerPage.
	m.fanout = max(1, cfg.LinksPerPage/2)
	size := min(cfg.PagesPerHost, homeLinks, cfg.LinksPerPage)
	for start := 0; start < cfg.PagesPerHost; {
		size = min(size, cfg.PagesPerHost-start)
		m.levels = append(m.levels, span{start, size})
		start += size
		size *= m.fanout
	}
	return m
}

func numHosts(cfg Config) int {
	return cfg.Hosts + len(extraKinds(cfg))
}

// extraKinds are the kinds of the hosts after the ordinary ones, in address order.
func extraKinds(cfg Config) []HostKind {
	var kinds []HostKind
	if cfg.Special {
		kinds = append(kinds, specialKinds...)
	}
	if cfg.Sitemaps {
		kinds = append(kinds, KindSitemaps)
	}
	if cfg.SPA {
		kinds = append(kinds, KindSPA, KindSPAScript)
	}
	return kinds
}

// level returns the level (from 1) of ordinary page n and its position
// within that level.
func (m *model) level(n int) (lvl, pos int) {
	for i, s := range m.levels {
		if n < s.start+s.size {
			return i + 1, n - s.start
		}
	}
	panic(fmt.Sprintf("synthweb: page %d beyond %d pages", n, m.cfg.PagesPerHost))
}

func (m *model) url(h int, pathQuery string) string { return m.hosts[h].Origin + pathQuery }

// lookup maps a normalised absolute URL to its host and path+query; ok is
// false for URLs outside the web.
func (m *model) lookup(u string) (h int, pathQuery string, ok bool) {
	rest, found := strings.CutPrefix(u, "http://")
	if !found {
		return 0, "", false
	}
	hostport, pq, _ := strings.Cut(rest, "/")
	h, ok = m.index[hostport]
	return h, "/" + pq, ok
}

func (m *model) robots(h int) robotsFile {
	base := robotsFile{status: http.StatusOK, groups: []robotsGroup{{
		agents: []string{"*"},
		rules:  []robotsRule{{pattern: "/nowhere/"}},
	}}}
	if m.hosts[h].Kind == KindOrdinary {
		base.groups[0].crawlDelay = m.cfg.RobotsCrawlDelay
	}
	switch m.hosts[h].Kind {
	case KindRobotsRules:
		return robotsFile{status: http.StatusOK, groups: []robotsGroup{
			{
				comment: "Default rules: deliberately different from the trawl group.",
				agents:  []string{"*"},
				rules:   []robotsRule{{pattern: "/public/"}, {allow: true, pattern: "/private/"}},
			},
			{
				comment: "A group may name several agents; product tokens match case-insensitively.",
				agents:  []string{"otherbot", "Trawl"},
				rules: []robotsRule{
					{pattern: "/private/"},
					{allow: true, pattern: "/private/open.html"},
					{pattern: "/*.pdf$"},
					{pattern: "/tmp"},
				},
			},
		}}
	case KindCrawlDelay:
		return robotsFile{status: http.StatusOK, groups: []robotsGroup{{
			agents: []string{"*"}, crawlDelay: m.cfg.CrawlDelay,
		}}}
	case KindRobots404:
		return robotsFile{status: http.StatusNotFound}
	case KindRobots503:
		return robotsFile{status: http.StatusServiceUnavailable}
	case KindSitemaps:
		return m.sitemapsRobots(h)
	case KindSPA:
		return m.spaRobots()
	}
	return base
}

func (m *model) allowed(h int, pathQuery string) bool {
	return robotsAllowed(m.robots(h), ProductToken, pathQuery)
}

// resource is one response of the web.
type resource struct {
	status      int
	contentType string
	location    string // Location header as sent (may be relative)
	locTarget   string // normalised absolute URL location resolves to
	title       string
	base        string // <base href> as written, "" for none
	links       []link
	body        string   // body of non-HTML resources, and of verbatim HTML
	verbatim    bool     // an HTML body served as body, not generated
	scripted    bool     // links are written by a script: only a rendering crawler finds them
	bait        []string // URLs that appear only inside a non-HTML body
	textSeed    uint64   // PRNG stream for the filler paragraphs
	paras       int      // filler paragraphs; 0 means 3
	swapWord    int      // 1-based position of a filler word replaced by swapped; 0 = none
	// requisites are what the page or style sheet loads (Config.Requisites).
	requisites []requisite
}

// link is one <a> element.
type link struct {
	href   string // as written in the markup, before HTML escaping
	text   string
	rel    string
	target string // normalised absolute URL href resolves to; "" for non-HTTP schemes
	canon  string // target without its session id, when it has one; see model.key
	style  int    // markup variant, see render
}

func (l link) follow() bool {
	if l.target == "" {
		return false
	}
	for _, tok := range strings.Fields(l.rel) {
		if strings.EqualFold(tok, "nofollow") {
			return false
		}
	}
	return true
}

func notFound() resource {
	return resource{status: http.StatusNotFound, contentType: htmlType, title: "404 not found"}
}

// resource returns what host h serves for pathQuery (robots.txt excluded).
func (m *model) resource(h int, pathQuery string) resource {
	path, query, _ := strings.Cut(pathQuery, "?")
	switch m.hosts[h].Kind {
	case KindOrdinary:
		if query != "" {
			return notFound()
		}
		return m.ordinary(h, path)
	case KindRobotsRules:
		return m.rulesHost(h, path, query)
	case KindRedirect:
		if query != "" {
			return notFound()
		}
		return m.redirectHost(h, path)
	case KindErrors:
		if query != "" {
			return notFound()
		}
		return m.errorsHost(h, path)
	case KindTrap:
		if query != "" {
			return notFound()
		}
		return m.trapHost(h, path)
	case KindSessionIDs:
		return m.sessionHost(h, pathQuery)
	case KindDuplicates:
		return m.duplicatesHost(h, path, query)
	case KindSitemaps:
		if query != "" {
			return notFound()
		}
		return m.sitemapsHost(h, path)
	case KindSPA:
		return m.spaHost(h, path, query)
	case KindSPAScript:
		return m.spaScriptHost(h, path, query)
	default: // crawl-delay, robots-404, robots-503, slow: a small leaf site
		if query != "" {
			return notFound()
		}
		return m.smallSite(h, path, 5)
	}
}

// pageRand gives each (host, page) its own deterministic stream, so pages
// can be generated independently and in any order.
func (m *model) pageRand(h int, key uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(m.cfg.Seed), uint64(h)<<40^key))
}

const homeKey = 1 << 39

// parseNum parses a canonical non-negative decimal (no sign, no leading
// zeros) so every page has exactly one URL.
func parseNum(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

func pagePath(n int) string { return "/p/" + strconv.Itoa(n) }

func (m *model) ordinary(h int, path string) resource {
	pages := m.cfg.PagesPerHost
	if path == "/" {
		return m.ordinaryHome(h)
	}
	if r, ok := m.requisiteResource(h, path); ok {
		return r
	}
	if rest, ok := strings.CutPrefix(path, "/p/"); ok {
		if n, ok := parseNum(rest); ok && n < pages {
			return m.ordinaryPage(h, n)
		}
	}
	if rest, ok := strings.CutPrefix(path, "/files/"); ok {
		if n, ok := parseNum(strings.TrimSuffix(rest, ".txt")); ok && n < pages && strings.HasSuffix(rest, ".txt") {
			bait := m.url(h, "/unlinked/"+strconv.Itoa(n))
			return resource{
				status: http.StatusOK, contentType: textType,
				body: fmt.Sprintf("Plain text file %d of %s.\n"+
					"Nothing in here is a link; a crawler that parses it as HTML would follow\n"+
					"<a href=\"/unlinked/%d\">this bait</a> or %s\n", n, m.hosts[h].Name, n, bait),
				bait: []string{bait},
			}
		}
	}
	// Pages that must never be fetched still exist, so a crawler that does
	// fetch them gets an ordinary 200 and the mistake shows up only in the
	// request log, where the tests look for it.
	for _, prefix := range []string{"/hidden/", "/unlinked/", "/nowhere/"} {
		if rest, ok := strings.CutPrefix(path, prefix); ok {
			if _, ok := parseNum(rest); ok {
				return m.leaf(h, path)
			}
		}
	}
	return notFound()
}

// leaf is a page whose only link is to its host's home page (a seed), so its
// depth never matters for what else gets crawled.
func (m *model) leaf(h int, path string) resource {
	rng := m.pageRand(h, hashPath(path))
	g := newGen(m, h, path, rng)
	g.add(h, "/", "home")
	return resource{
		status: http.StatusOK, contentType: htmlType,
		title: m.hosts[h].Name + " " + path, links: g.links, textSeed: rng.Uint64(),
	}
}

func hashPath(p string) uint64 {
	// FNV-1a: tiny, stable across Go versions (unlike maphash).
	h := uint64(14695981039346656037)
	for i := 0; i < len(p); i++ {
		h ^= uint64(p[i])
		h *= 1099511628211
	}
	return h | 1<<38 // keep clear of page numbers
}

func (m *model) ordinaryHome(h int) resource {
	rng := m.pageRand(h, homeKey)
	g := newGen(m, h, "/", rng)
	for n := m.levels[0].start; n < m.levels[0].start+m.levels[0].size; n++ {
		g.add(h, pagePath(n), fmt.Sprintf("page %d", n))
	}
	// Cross links between homes (all seeds) tie the hosts together without
	// disturbing depths.
	g.add((h+1)%m.cfg.Hosts, "/", "next site")
	if m.cfg.Special {
		g.add(m.cfg.Hosts+h%len(specialKinds), "/", "a special site")
	}
	g.raw("#top", "top", "", "")
	return m.withRequisites(h, resource{
		status: http.StatusOK, contentType: htmlType,
		title: m.hosts[h].Name + " home", links: g.links, textSeed: rng.Uint64(),
	})
}

func (m *model) ordinaryPage(h, n int) resource {
	rng := m.pageRand(h, uint64(n))
	lvl, pos := m.level(n)
	self := pagePath(n)
	res := resource{status: http.StatusOK, contentType: htmlType, title: fmt.Sprintf("%s page %d", m.hosts[h].Name, n)}

	g := newGen(m, h, self, rng)
	// A <base> one directory down changes how every relative link resolves;
	// a crawler that ignores it requests /p/<k>'s siblings as /<k> instead.
	switch n % 10 {
	case 2:
		res.base = m.url(h, "/p/sub/")
		g.setBase("/p/sub/")
	case 7:
		res.base = "sub/" // relative to the page itself
		g.setBase("/p/sub/")
	}

	var next span
	if lvl < len(m.levels) {
		next = m.levels[lvl]
	}
	// Children first: they are what makes every page reachable.
	for c := next.start + pos*m.fanout; c < next.start+min((pos+1)*m.fanout, next.size); c++ {
		g.add(h, pagePath(c), fmt.Sprintf("page %d", c))
	}
	for len(g.links) < m.cfg.LinksPerPage {
		switch {
		case next.size > 0:
			th := h
			if m.cfg.Hosts > 1 && rng.IntN(4) == 0 {
				th = (h + 1 + rng.IntN(m.cfg.Hosts-1)) % m.cfg.Hosts
			}
			c := next.start + rng.IntN(next.size)
			g.add(th, pagePath(c), fmt.Sprintf("page %d", c))
		default:
			// The last level has nothing deeper; homes are seeds, so
			// linking them keeps depths intact.
			th := rng.IntN(len(m.hosts))
			g.add(th, "/", "a home page")
		}
	}

	if len(g.links) > 0 && n%3 == 0 {
		// Same target again, in a different spelling.
		first := g.links[0]
		if th, pq, ok := m.lookup(first.target); ok {
			g.add(th, pq, "again")
		}
	}
	if n%5 == 1 {
		g.raw("#top", "back to top", "", "")
	}
	if n%5 == 3 {
		g.raw("mailto:webmaster@example.invalid", "mail us", "", "")
		g.raw("javascript:void(0)", "menu", "", "")
	}
	if n%4 == 1 {
		g.add(h, "/files/"+strconv.Itoa(n)+".txt", "plain text")
	}
	if n%4 == 3 {
		// Reachable only through this nofollow link.
		rels := []string{"nofollow", "external nofollow", "NoFollow noopener"}
		g.addRel(h, "/hidden/"+strconv.Itoa(n), "sponsored", rels[(n/4)%len(rels)])
	}
	if n%6 == 4 {
		g.add(h, "/nowhere/"+strconv.Itoa(n), "disallowed by robots.txt")
	}
	if m.cfg.Special {
		k := h + n
		if k%5 == 0 {
			g.add(m.cfg.Hosts+(k/5)%len(specialKinds), "/", "a special site")
		}
		if k%11 == 7 {
			// Deep links into hosts whose robots.txt forbids them.
			if k%2 == 0 {
				g.add(m.special[KindRobotsRules], "/private/from-"+strconv.Itoa(h)+".html", "private")
			} else {
				g.add(m.special[KindRobots503], "/p/1", "unavailable")
			}
		}
	}
	res.links = g.links
	res.textSeed = rng.Uint64()
	return res
}

// smallSite is a home page linking to pages /p/0..pages-1, each a leaf.
func (m *model) smallSite(h int, path string, pages int) resource {
	if path == "/" {
		rng := m.pageRand(h, homeKey)
		g := newGen(m, h, path, rng)
		for i := 0; i < pages; i++ {
			g.add(h, pagePath(i), fmt.Sprintf("page %d", i))
		}
		return resource{status: http.StatusOK, contentType: htmlType,
			title: m.hosts[h].Name + " " + m.hosts[h].Kind.String() + " home", links: g.links, textSeed: rng.Uint64()}
	}
	if rest, ok := strings.CutPrefix(path, "/p/"); ok {
		if n, ok := parseNum(rest); ok && n < pages {
			return m.leaf(h, path)
		}
	}
	return notFound()
}

// rulesPaths are linked from the robots-rules host's home page; which are
// allowed follows from its robots.txt alone.
var rulesPaths = []string{
	"/public/1.html",
	"/public/2.html",
	"/private/secret.html",       // Disallow: /private/
	"/private/open.html",         // Allow: /private/open.html is longer
	"/private/open.html?lang=en", // Allow is a prefix match
	"/private",                   // no trailing slash: not under /private/
	"/PRIVATE/upper.html",        // paths are case-sensitive
	"/doc.pdf",                   // Disallow: /*.pdf$
	"/doc.pdf?x=1",               // $ anchors the end: query escapes it
	"/report.PDF",                // case-sensitive again
	"/tmpfile.html",              // Disallow: /tmp is a prefix match
	"/temp.html",
	"/temp.html?a=1&b=2", // & must be written &amp; in HTML
}

func (m *model) rulesHost(h int, path, query string) resource {
	if path == "/" && query == "" {
		rng := m.pageRand(h, homeKey)
		g := newGen(m, h, path, rng)
		for _, p := range rulesPaths {
			g.add(h, p, p)
		}
		g.add(0, "/", "elsewhere")
		return resource{status: http.StatusOK, contentType: htmlType,
			title: m.hosts[h].Name + " robots rules home", links: g.links, textSeed: rng.Uint64()}
	}
	if strings.HasSuffix(path, ".pdf") || strings.HasSuffix(path, ".PDF") {
		if path != "/doc.pdf" && path != "/report.PDF" {
			return notFound()
		}
		return resource{status: http.StatusOK, contentType: pdfType, body: "%PDF-1.4\n% synthetic, not a real PDF\n"}
	}
	// Any other path is a leaf: links from elsewhere point at paths of this
	// host that robots.txt forbids, and a crawler that ignores it should
	// still get a page.
	if path == "/robots.txt" {
		return notFound()
	}
	// The query is part of the page's identity: /private/open.html?lang=en is not a copy
	// of /private/open.html (the duplicates host is where copies live).
	if query != "" {
		path += "?" + query
	}
	return m.leaf(h, path)
}

func redirectTo(status int, location, target string) resource {
	return resource{status: status, contentType: htmlType, title: "moved", location: location, locTarget: target}
}

func (m *model) redirectHost(h int, path string) resource {
	switch path {
	case "/":
		rng := m.pageRand(h, homeKey)
		g := newGen(m, h, path, rng)
		for _, p := range []string{"/old/0", "/old/1", "/old/2", "/chain/0", "/away", "/p/4"} {
			g.add(h, p, p)
		}
		if m.cfg.Special {
			g.add(h, "/to-private", "/to-private")
		}
		return resource{status: http.StatusOK, contentType: htmlType,
			title: m.hosts[h].Name + " redirect home", links: g.links, textSeed: rng.Uint64()}
	// Location spellings vary: root-relative, absolute and dot-relative must
	// all be resolved against the redirecting URL.
	case "/old/0":
		return redirectTo(http.StatusMovedPermanently, "/p/0", m.url(h, "/p/0"))
	case "/old/1":
		return redirectTo(http.StatusMovedPermanently, m.url(h, "/p/1"), m.url(h, "/p/1"))
	case "/old/2":
		return redirectTo(http.StatusMovedPermanently, "../p/2", m.url(h, "/p/2"))
	case "/chain/0":
		return redirectTo(http.StatusFound, "/chain/1", m.url(h, "/chain/1"))
	case "/chain/1":
		return redirectTo(http.StatusTemporaryRedirect, "/p/3", m.url(h, "/p/3"))
	case "/away":
		// Level-1 page of host 0: its depth via its own home is also 1.
		to := m.url(0, pagePath(m.levels[0].start))
		return redirectTo(http.StatusMovedPermanently, to, to)
	case "/to-private":
		if !m.cfg.Special {
			return notFound()
		}
		to := m.url(m.special[KindRobotsRules], "/private/redirected.html")
		return redirectTo(http.StatusFound, to, to)
	}
	if rest, ok := strings.CutPrefix(path, "/p/"); ok {
		if n, ok := parseNum(rest); ok && n < 5 {
			return m.leaf(h, path)
		}
	}
	return notFound()
}

func (m *model) errorsHost(h int, path string) resource {
	switch path {
	case "/":
		rng := m.pageRand(h, homeKey)
		g := newGen(m, h, path, rng)
		for _, p := range []string{"/p/0", "/p/1", "/missing/0", "/missing/1", "/gone", "/broken"} {
			g.add(h, p, p)
		}
		return resource{status: http.StatusOK, contentType: htmlType,
			title: m.hosts[h].Name + " errors home", links: g.links, textSeed: rng.Uint64()}
	case "/p/0", "/p/1":
		return m.leaf(h, path)
	case "/gone":
		return resource{status: http.StatusGone, contentType: htmlType, title: "410 gone"}
	case "/broken":
		return resource{status: http.StatusInternalServerError, contentType: htmlType, title: "500 internal server error"}
	}
	return notFound()
}

func monthPath(year, month int) string { return fmt.Sprintf("/cal/%04d/%02d", year, month) }

func (m *model) trapHost(h int, path string) resource {
	if path == "/" {
		rng := m.pageRand(h, homeKey)
		g := newGen(m, h, path, rng)
		g.add(h, monthPath(trapEntryYear, trapEntryMonth), "calendar")
		g.add(h, loopPrefix, "loop")
		g.add(h, growPrefix, "grow")
		return resource{status: http.StatusOK, contentType: htmlType,
			title: m.hosts[h].Name + " trap home", links: g.links, textSeed: rng.Uint64()}
	}
	if strings.HasPrefix(path, loopPrefix) {
		return m.loopPage(h, path)
	}
	if strings.HasPrefix(path, growPrefix) {
		return m.growPage(h, path)
	}
	rest, ok := strings.CutPrefix(path, "/cal/")
	if !ok {
		return notFound()
	}
	ys, ms, _ := strings.Cut(rest, "/")
	year, err1 := strconv.Atoi(ys)
	month, err2 := strconv.Atoi(ms)
	if err1 != nil || err2 != nil || year < 1 || year > 9999 || month < 1 || month > 12 || monthPath(year, month) != path {
		return notFound()
	}
	idx := year*12 + month - 1
	rng := m.pageRand(h, uint64(idx))
	g := newGen(m, h, path, rng)
	for _, d := range []int{-1, 1} {
		j := idx + d
		if y, mo := j/12, j%12+1; y >= 1 && y <= 9999 {
			g.add(h, monthPath(y, mo), fmt.Sprintf("%04d-%02d", y, mo))
		}
	}
	g.add(h, "/", "home")
	return resource{status: http.StatusOK, contentType: htmlType,
		title: fmt.Sprintf("%s calendar %04d-%02d", m.hosts[h].Name, year, month), links: g.links, textSeed: rng.Uint64()}
}
