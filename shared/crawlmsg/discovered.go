package crawlmsg

import (
	"fmt"
)

// The messages of discovery: URLs found (crawl.discovered) and the new ones dedup sends
// to a scheduler shard (crawl.frontier.<shard>).

// Via says how a URL was found.
type Via string

const (
	ViaSeed     Via = "seed"
	ViaLink     Via = "link"
	ViaRedirect Via = "redirect"
	// ViaSitemap marks a URL found through the sitemaps protocol: a sitemap named by
	// robots.txt (or a host's /sitemap.xml), a sitemap index's child, or a URL a sitemap
	// lists.
	ViaSitemap Via = "sitemap"
)

// Discovered is one URL found by a parser (outlink), a fetcher (redirect target) or an
// operator (seed). URL is already normalised by the producer (urlnorm.Normalize).
type Discovered struct {
	URL   string `json:"url"`
	Depth int    `json:"depth"`          // link hops from a seed; a redirect target keeps the depth of the redirecting URL
	Via   Via    `json:"via,omitempty"`  // how it was found
	Hops  int    `json:"hops,omitempty"` // redirect hops so far (caps redirect chains)
	// Kind is what the URL is fetched for (a page, a page requisite, a sitemap); Embeds the
	// embed hops in a row that led to it.
	Kind   Kind `json:"kind,omitempty"`
	Embeds int  `json:"embeds,omitempty"`
	// Recrawl is set on a known URL queued again by its recrawl schedule (Via recrawl).
	Recrawl *Recrawl `json:"recrawl,omitempty"`
	// Under is set on a sitemap (Kind sitemap) whose listed URLs may lie anywhere under
	// this prefix ("<origin>/" of the host whose robots.txt named it, sitemaps.org's
	// cross-submission); empty, a sitemap may list only URLs under its own directory.
	Under string `json:"under,omitempty"`
	// Lastmod (unix seconds) and Priority (0..1) are what a sitemap said of a URL it
	// lists (Via sitemap); zero and nil when it said nothing.
	Lastmod  int64    `json:"lastmod,omitempty"`
	Priority *float64 `json:"priority,omitempty"`
}

// Extra is the part of d the frontier keeps in its queue entry.
func (d Discovered) Extra() Extra {
	return Extra{Kind: d.Kind, Embeds: d.Embeds, Recrawl: d.Recrawl, Under: d.Under}
}

// LinkGroup is the URLs found on one page (or given as seeds): the unit the frontier
// counts backlinks by.
type LinkGroup struct {
	Source string       `json:"source,omitempty"` // URL of the page the links came from; empty for seeds
	URLs   []Discovered `json:"urls"`
}

// LinksVersion is the version of a DiscoveredBatch or FrontierBatch that carries several
// link groups (Groups). One group is written as version 1 (Source and URLs), as before
// groups existed; a reader that knows only version 1 rejects a batch of groups instead of
// reading its first page's links alone.
const LinksVersion = 2

// DiscoveredBatch is the payload on crawl.discovered: the URLs of one page, or of every
// page of one parser batch as link groups, so the volume is per batch, not per link.
type DiscoveredBatch struct {
	V      int          `json:"v"`
	Source string       `json:"source,omitempty"` // version 1: the one group's source
	URLs   []Discovered `json:"urls,omitempty"`   // version 1: the one group's URLs
	// Groups are the link groups of version 2 (Source and URLs are then empty).
	Groups []LinkGroup `json:"groups,omitempty"`
}

// LinkGroups returns the batch's groups whatever its version.
func (b *DiscoveredBatch) LinkGroups() []LinkGroup {
	return linkGroups(b.V, b.Source, b.URLs, b.Groups)
}

// FrontierBatch is the payload on crawl.frontier.<shard>: URLs that passed the seen-test,
// all of whose hosts map to that shard, in the groups of the DiscoveredBatch they came in
// (their sources let the frontier count backlinks).
type FrontierBatch struct {
	V      int          `json:"v"`
	Source string       `json:"source,omitempty"` // version 1: the one group's source
	URLs   []Discovered `json:"urls,omitempty"`   // version 1: the one group's URLs
	// Groups are the link groups of version 2 (Source and URLs are then empty).
	Groups []LinkGroup `json:"groups,omitempty"`
}

// LinkGroups returns the batch's groups whatever its version.
func (b *FrontierBatch) LinkGroups() []LinkGroup { return linkGroups(b.V, b.Source, b.URLs, b.Groups) }

func linkGroups(v int, source string, urls []Discovered, groups []LinkGroup) []LinkGroup {
	if v == LinksVersion {
		return groups
	}
	return []LinkGroup{{Source: source, URLs: urls}}
}

// linksVersion is the version a batch of these groups is written as, moving a single
// group into the version 1 fields.
func linksVersion(source *string, urls *[]Discovered, groups *[]LinkGroup) int {
	if len(*groups) == 1 && *source == "" && len(*urls) == 0 {
		*source, *urls, *groups = (*groups)[0].Source, (*groups)[0].URLs, nil
	}
	if len(*groups) > 0 {
		return LinksVersion
	}
	if *urls == nil {
		*urls = []Discovered{}
	}
	return Version
}

// checkLinks is the reader's check of a batch's version and shape.
func checkLinks(v any, got int, source string, urls []Discovered, groups []LinkGroup) error {
	switch got {
	case Version:
		if len(groups) > 0 {
			return fmt.Errorf("%w: %T of version 1 has groups", ErrMalformed, v)
		}
	case LinksVersion:
		if len(groups) == 0 || source != "" || len(urls) > 0 {
			return fmt.Errorf("%w: %T of version 2 needs groups alone", ErrMalformed, v)
		}
	default:
		return fmt.Errorf("%w: %T has v=%d, want %d or %d", ErrVersion, v, got, Version, LinksVersion)
	}
	return nil
}
