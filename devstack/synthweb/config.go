// Package synthweb serves a deterministic synthetic web on loopback for the
// crawler's end-to-end tests, the local demo and benchmarks.
//
// Every host is its own 127.x.y.z address on one shared port, so a crawler
// sees many distinct hosts (politeness, robots, per-host queues) with no DNS
// or network setup: Linux routes all of 127.0.0.0/8 to lo. Pages are
// generated on request from the seed, so large webs cost nothing to build.
// The server logs every request with its start and end time, so tests can
// check crawler invariants (politeness, robots, dedup) from the server's own
// point of view.
//
// # Depth
//
// Ordinary hosts are layered: a page at level l links only to pages at
// level l+1 (on its own or another host) and to home pages, which are all
// seeds. Every path from the seeds to a page therefore has the same length,
// so a crawler that takes the depth of the first link it happens to see
// (as a distributed crawler does) agrees with Expected's breadth-first
// depths, provided all Seeds are submitted before crawling starts.
//
// # Special hosts
//
// With Config.Special (DefaultConfig) the web also has one host of each
// special HostKind: robots.txt variants, a Crawl-delay, redirects, errors, a
// slow host, crawler traps (an endless calendar, a relative link that repeats
// path segments for ever, ever-longer URLs), a host whose links carry fresh
// session ids, and a host of duplicate pages (Web.Duplicates). What a correct
// crawler does with the traps and session ids depends on its URL rules, which
// Config describes (KeepSessionIDs, MaxURLLength) so that Expected stays exact.
// Web.Walk gives the link stream of a correct crawl, for measuring the dedup
// stage.
package synthweb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// ProductToken is the robots.txt product token the crawler identifies with;
// the robots-rules host has a group for it that must win over "*".
const ProductToken = "trawl"

// HostKind says how a host behaves.
type HostKind int

const (
	KindOrdinary    HostKind = iota // layered content pages
	KindRobotsRules                 // robots.txt with a group for ProductToken that differs from "*"
	KindCrawlDelay                  // robots.txt advertises Crawl-delay
	KindRobots404                   // robots.txt is 404: everything allowed
	KindRobots503                   // robots.txt is 503: nothing but robots.txt may be requested
	KindRedirect                    // 301/302/307 redirects, a chain, a cross-host one
	KindErrors                      // 404s, a 410 and one page that always answers 500
	KindSlow                        // every response takes Config.SlowDelay
	KindTrap                        // crawler traps: an endless calendar, repeating path segments, ever-longer URLs
	KindSessionIDs                  // every page links to the others with fresh session ids in the URL
	KindDuplicates                  // pages whose text copies another page's, exactly or but for one word
	KindSitemaps                    // pages listed only in sitemaps named by robots.txt (Config.Sitemaps)
	KindSPA                         // application shells whose links and text a script writes (Config.SPA)
	KindSPAScript                   // the script of the KindSPA host's pages, another host (Config.SPA)
)

// specialKinds is the order special hosts get addresses after the ordinary
// ones.
var specialKinds = []HostKind{
	KindRobotsRules, KindCrawlDelay, KindRobots404, KindRobots503,
	KindRedirect, KindErrors, KindSlow, KindTrap, KindSessionIDs, KindDuplicates,
}

func (k HostKind) String() string {
	switch k {
	case KindOrdinary:
		return "ordinary"
	case KindRobotsRules:
		return "robots-rules"
	case KindCrawlDelay:
		return "crawl-delay"
	case KindRobots404:
		return "robots-404"
	case KindRobots503:
		return "robots-503"
	case KindRedirect:
		return "redirect"
	case KindErrors:
		return "errors"
	case KindSlow:
		return "slow"
	case KindTrap:
		return "trap"
	case KindSessionIDs:
		return "session-ids"
	case KindDuplicates:
		return "duplicates"
	case KindSitemaps:
		return "sitemaps"
	case KindSPA:
		return "spa"
	case KindSPAScript:
		return "spa-script"
	default:
		return fmt.Sprintf("HostKind(%d)", int(k))
	}
}

// Config shapes the web. Zero numeric fields take the defaults noted; use
// DefaultConfig to also get the special hosts.
type Config struct {
	Hosts        int           // number of ordinary content hosts (default 20)
	PagesPerHost int           // pages per ordinary host (default 20)
	LinksPerPage int           // followable outlinks per ordinary page (default 6): mostly same host, some cross-host
	Seed         int64         // PRNG seed for the link graph and text
	CrawlDelay   time.Duration // Crawl-delay advertised by the crawl-delay host (default 1s; may be fractional)
	SlowDelay    time.Duration // per-response delay of the slow host (default 300ms; negative = none)
	BaseIP       string        // first address (default "127.0.1.1"); hosts take consecutive addresses
	// VirtualHosts of the ordinary hosts (the first ones) are name-based virtual hosts
	// on one address, BaseIP: vhost1.synth.test, vhost2.synth.test, …, told apart by the
	// Host header, as many sites on one server are. The crawler resolves their names
	// through Web.Resolve (TRAWL_RESOLVE). The other hosts take the addresses after it.
	// More than Hosts makes the hosts after the ordinary ones (Sitemaps, SPA) virtual too, in
	// order, so a web served on 0.0.0.0 alone (one address) can have them.
	VirtualHosts int
	Port         int // 0 = pick a port free on all addresses
	// OneListener serves every host address through one listener on 0.0.0.0 (Linux
	// delivers the whole of 127.0.0.0/8 to it) instead of one listener per address, the
	// host still told by the address a request arrived on: a web of tens of thousands of
	// hosts then holds one file descriptor, not one per host, under the process's limit.
	OneListener bool
	Special     bool // include the special hosts (true in DefaultConfig)
	// RobotsCrawlDelay, if set, is a Crawl-delay every ordinary host's robots.txt
	// advertises (HostInfo.CrawlDelay), beside the crawl-delay host's own CrawlDelay: a web
	// where several hosts ask for the same long delay, so that a rule can honour it for one
	// of them alone.
	RobotsCrawlDelay time.Duration
	// Latency, if set, is how long every response of an ordinary host takes (robots.txt
	// too), as the slow host's take SlowDelay: long enough beside a crawler's gap, a host
	// allowed several connections has them in flight at once.
	Latency time.Duration
	// Sitemaps adds one host after all others (KindSitemaps) whose robots.txt names a
	// sitemap index of two sitemaps, one gzipped, listing pages no page links to
	// (Web.SitemapOnly). Off by default, so every other web stays as it is.
	Sitemaps bool
	// SPA adds two hosts after all others: an app host of application shells whose links
	// and text a script writes, and the host of that script (see spa.go). Off by default.
	SPA bool
	// SPAPages is how many pages the app has besides its home page (default 6).
	SPAPages int
	// Render says the crawler renders the app host's pages (TRAWL_RENDER=auto or always):
	// Expected then holds its script-only pages and the browser's requests; without it,
	// none of them may be requested.
	Render bool
	// SPADelay holds each answer of the app host's JSON endpoint this long (0: none), so a
	// test can catch a browser in the middle of rendering a page (Web.SPAWaiting).
	SPADelay time.Duration

	// The crawler's URL rules that decide which URLs exist for it, so that Expected
	// describes the crawl of a crawler configured this way. The zero values are the
	// crawler's defaults.

	// KeepSessionIDs says the crawler keeps session ids in URLs (TRAWL_STRIP_SESSION_IDS
	// =false). By default it strips them, and the session-ids host's pages are fetched
	// once each under their plain URLs; kept, every fetch mints new URLs, to the depth
	// limit.
	KeepSessionIDs bool
	// MaxURLLength is the longest URL the crawler follows (TRAWL_MAX_URL_LENGTH, default
	// 2048); longer links are never requested. The crawler also never follows a link whose
	// path repeats a segment three or more times (the parser's trap rule).
	MaxURLLength int
	// Requisites gives every ordinary home page requisites: a style sheet that imports
	// another and loads an image and a font, an icon, a script, an image, and an image
	// robots.txt forbids (see requisites.go).
	Requisites bool
	// FetchRequisites says the crawler fetches page requisites (TRAWL_EMBEDS=on, or auto
	// with an archiver running), to TRAWL_MAX_EMBED_HOPS=2; without it Expected forbids
	// every requisite.
	FetchRequisites bool
}

// DefaultConfig is the standard web: 20 ordinary hosts of 20 pages plus all
// special hosts.
func DefaultConfig() Config {
	return Config{
		Hosts:        20,
		PagesPerHost: 20,
		LinksPerPage: 6,
		CrawlDelay:   time.Second,
		SlowDelay:    300 * time.Millisecond,
		BaseIP:       "127.0.1.1",
		Special:      true,
		MaxURLLength: 2048,
	}
}

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.Hosts < 0 || c.PagesPerHost < 0 || c.LinksPerPage < 0 || c.CrawlDelay < 0 || c.Port < 0 || c.MaxURLLength < 0 || c.VirtualHosts < 0 || c.RobotsCrawlDelay < 0 || c.Latency < 0 {
		return c, errors.New("synthweb: negative Hosts, PagesPerHost, LinksPerPage, CrawlDelay, Port, MaxURLLength, VirtualHosts, RobotsCrawlDelay or Latency")
	}
	if c.Port > 65535 {
		return c, fmt.Errorf("synthweb: port %d out of range", c.Port)
	}
	if c.Hosts == 0 {
		c.Hosts = d.Hosts
	}
	if c.PagesPerHost == 0 {
		c.PagesPerHost = d.PagesPerHost
	}
	if c.LinksPerPage == 0 {
		c.LinksPerPage = d.LinksPerPage
	}
	if c.CrawlDelay == 0 {
		c.CrawlDelay = d.CrawlDelay
	}
	switch {
	case c.SlowDelay == 0:
		c.SlowDelay = d.SlowDelay
	case c.SlowDelay < 0:
		c.SlowDelay = 0
	}
	if c.BaseIP == "" {
		c.BaseIP = d.BaseIP
	}
	if c.MaxURLLength == 0 {
		c.MaxURLLength = d.MaxURLLength
	}
	if c.SPAPages <= 0 {
		c.SPAPages = 6
	}
	if n := numHosts(c); c.VirtualHosts > n {
		return c, fmt.Errorf("synthweb: %d virtual hosts of %d hosts", c.VirtualHosts, n)
	}
	return c, nil
}

// virtualName is the name of the i-th (from 0) virtual host.
func virtualName(i int) string { return fmt.Sprintf("vhost%d.synth.test", i+1) }

// hostIPs returns each host's address: the virtual hosts share the first of addrs, every
// other host has one of its own. addrs are the distinct addresses to listen on.
func hostIPs(cfg Config) (ips, addrs []string, err error) {
	n := numHosts(cfg)
	distinct := n
	if cfg.VirtualHosts > 0 {
		distinct = n - cfg.VirtualHosts + 1
	}
	addrs, err = hostAddrs(cfg.BaseIP, distinct)
	if err != nil {
		return nil, nil, err
	}
	ips = make([]string, n)
	for i := range ips {
		switch {
		case i < cfg.VirtualHosts:
			ips[i] = addrs[0]
		case cfg.VirtualHosts > 0:
			ips[i] = addrs[i-cfg.VirtualHosts+1]
		default:
			ips[i] = addrs[i]
		}
	}
	return ips, addrs, nil
}

// hostAddrs returns n consecutive loopback addresses starting at base. A web of virtual
// hosts only (n is 1) may also take 0.0.0.0: every address of a machine or container, for
// a web that other containers reach by name.
func hostAddrs(base string, n int) ([]string, error) {
	ip, err := netip.ParseAddr(base)
	if err != nil || !ip.Is4() {
		return nil, fmt.Errorf("synthweb: BaseIP %q is not an IPv4 address", base)
	}
	if ip.IsUnspecified() {
		if n != 1 {
			return nil, fmt.Errorf("synthweb: BaseIP %s serves virtual hosts only, and %d hosts have an address of their own", base, n-1)
		}
		return []string{base}, nil
	}
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	b := ip.As4()
	first := binary.BigEndian.Uint32(b[:])
	addrs := make([]string, n)
	for i := range addrs {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], first+uint32(i))
		addr := netip.AddrFrom4(a)
		// Stay inside 127/8 and off its broadcast address, the only range
		// that needs no interface configuration.
		if !loopback.Contains(addr) || addr == netip.MustParseAddr("127.255.255.255") || addr == netip.MustParseAddr("127.0.0.0") {
			return nil, fmt.Errorf("synthweb: %d hosts from %s run outside usable 127.0.0.0/8 addresses", n, base)
		}
		addrs[i] = addr.String()
	}
	return addrs, nil
}

// HostInfo describes one host of the web.
type HostInfo struct {
	// Name is the host as its URLs name it: its address ("127.0.1.3"), or a virtual
	// host's name ("vhost1.synth.test").
	Name       string
	Addr       string        // the address it is served on (IP only), shared by the virtual hosts
	Origin     string        // "http://<Name>:PORT"
	Kind       HostKind      //
	CrawlDelay time.Duration // advertised Crawl-delay; 0 when none
}

func originOf(addr string, port int) string {
	return "http://" + net.JoinHostPort(addr, fmt.Sprint(port))
}
