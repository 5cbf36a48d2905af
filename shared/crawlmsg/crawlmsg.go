// Package crawlmsg defines Trawl's wire types: the messages the services exchange over
// NATS JetStream. Every message carries a schema version; a reader rejects versions it does
// not know with ErrVersion so that a mixed deployment fails loudly instead of misreading.
//
// Work messages (discovered, frontier, fetch, fetched) and parsed documents are JSON.
// Raw pages are the response body as the message payload with the metadata in a header,
// so that a tap can read the bytes without decoding base64.
package crawlmsg

import (
	"errors"
	"fmt"

	// Every message of every stage is encoded and decoded here, and encoding/json was
	// 15–22 % of the fetcher's, parser's, scheduler's and dedup's CPU. goccy/go-json reads
	// the same struct tags with the same semantics and writes the same bytes (tested
	// against encoding/json in wire_test.go, so taps keep decoding with the standard
	// library), at 3–7× the decoding and 2–3× the encoding speed on these types.
	json "github.com/goccy/go-json"
)

// Version is the schema version written by this code and the only one it reads.
const Version = 1

var (
	// ErrVersion marks a message written with a schema version this code does not read.
	ErrVersion = errors.New("crawlmsg: unsupported message version")
	// ErrMalformed marks a message that cannot be decoded or lacks a required field.
	// Both errors are permanent: redelivering the message cannot fix it.
	ErrMalformed = errors.New("crawlmsg: malformed message")
)

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

// FetchTask is one URL to fetch, holding its host's lease: alone on crawl.fetch.<shard>
// (version 1), or inside a TaskBatch, where it carries no version of its own.
type FetchTask struct {
	V       int    `json:"v,omitempty"`
	Shard   int    `json:"shard"`
	Host    string `json:"host"`    // politeness key: lowercased hostname without port
	URL     string `json:"url"`     // normalised absolute URL
	Depth   int    `json:"depth"`   // link hops from a seed
	Hops    int    `json:"hops"`    // redirect hops that led here
	Attempt int    `json:"attempt"` // 0 on the first try
	Kind    Kind   `json:"kind,omitempty"`
	Embeds  int    `json:"embeds,omitempty"`
	Lease   string `json:"lease"` // lease token; the outcome must echo it or it is ignored
	// Recrawl is the URL's state when it is fetched again (validators for a conditional
	// GET, the fingerprint to compare); nil on a first fetch.
	Recrawl *Recrawl `json:"recrawl,omitempty"`
	// Under is a sitemap's cross-submission prefix (Discovered.Under).
	Under string `json:"under,omitempty"`
	// Deadline is when the lease expires (unix milliseconds). A fetcher must not start a
	// request it cannot finish before the deadline: after it the scheduler may hand the
	// host to another fetcher.
	Deadline int64 `json:"deadline"`
}

// TaskBatchVersion is the version of TaskBatch. Batches joined single tasks (version 1) on
// the same subjects, so they have their own number: a fetcher that knows only single tasks
// rejects a batch instead of misreading it.
const TaskBatchVersion = 2

// TaskBatch is a payload on crawl.fetch.<shard>: several tasks of one dispatch, of
// different hosts, in one stored message. Its TasksHeader says how many, so a fetcher can
// count them before it decodes the message.
type TaskBatch struct {
	V     int         `json:"v"`
	Tasks []FetchTask `json:"tasks"`
}

// TasksHeader is the NATS header with the number of tasks in a crawl.fetch message.
const TasksHeader = "Trawl-Tasks"

// DecodeTasks reads a message of crawl.fetch: a batch (version 2) gives its tasks, a single
// task (version 1) a batch of one. A message that does not decode, carries another
// version, holds no task or a task without url, host or lease wraps ErrMalformed or
// ErrVersion (permanent): its tasks come from one dispatch, and their leases bring their
// URLs back.
func DecodeTasks(data []byte) ([]FetchTask, error) {
	var m taskMsg
	if err := decode(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %T: %v", ErrMalformed, (*TaskBatch)(nil), err)
	}
	switch m.V {
	case TaskBatchVersion:
	case Version:
		if !m.FetchTask.valid() {
			return nil, fmt.Errorf("%w: fetch task lacks url, host or lease", ErrMalformed)
		}
		return []FetchTask{m.FetchTask}, nil
	default:
		return nil, fmt.Errorf("%w: task batch has v=%d, want %d", ErrVersion, m.V, TaskBatchVersion)
	}
	if len(m.Tasks) == 0 {
		return nil, fmt.Errorf("%w: task batch holds no task", ErrMalformed)
	}
	for i := range m.Tasks {
		if !m.Tasks[i].valid() {
			return nil, fmt.Errorf("%w: task %d of a batch lacks url, host or lease", ErrMalformed, i)
		}
		m.Tasks[i].V = Version
	}
	return m.Tasks, nil
}

// taskMsg reads either form of a crawl.fetch message in one pass: a single task's fields
// (version 1) or a batch's tasks (version 2); the two share only "v". Decoding a lone
// task as a batch first and then again as a task cost every lone task two decodes.
type taskMsg struct {
	FetchTask
	Tasks []FetchTask `json:"tasks"`
}

func (t *FetchTask) valid() bool { return t.URL != "" && t.Host != "" && t.Lease != "" }

// OutcomeKind classifies what happened to a fetch task.
type OutcomeKind string

const (
	// OutcomeFetched: an HTTP response was received (any status; see Status).
	OutcomeFetched OutcomeKind = "fetched"
	// OutcomeError: the request failed without a response (timeout, refused, reset, DNS).
	OutcomeError OutcomeKind = "error"
	// OutcomeRobots: the task's request was robots.txt for the host, not the URL; the URL
	// goes back to the head of its host queue and waits the host's delay.
	OutcomeRobots OutcomeKind = "robots"
	// OutcomeRobotsUnavailable: robots.txt answered 5xx/429 or was unreachable; the RFC says
	// assume disallow all, so the URL is retried later like a failed fetch.
	OutcomeRobotsUnavailable OutcomeKind = "robots-unavailable"
	// OutcomeDisallowed: robots.txt forbids the URL; no request was made.
	OutcomeDisallowed OutcomeKind = "disallowed"
	// OutcomeBlocked: the URL may not be fetched at all (unsafe address, bad scheme,
	// unparseable); permanent, no request to the host.
	OutcomeBlocked OutcomeKind = "blocked"
	// OutcomeExpired: the fetcher got the task after its lease deadline and dropped it.
	OutcomeExpired OutcomeKind = "expired"
	// OutcomeTooLarge: a response was received but its page message cannot be stored
	// (its metadata, mostly the response headers, exceeds the largest message the stream
	// or the server accepts). Terminal: the same response would be refused again.
	OutcomeTooLarge OutcomeKind = "too-large"
	// OutcomeDeferred: the task made no request because another server it needed was busy
	// (the target of a robots.txt redirect to another host, inside that host's gap); the
	// URL goes back to the head of its host queue, not counted as an attempt, and the host
	// waits RetryAfter before its next task.
	OutcomeDeferred OutcomeKind = "deferred"
	// OutcomeServerBusy: the task made no request because the server address its host
	// resolves to was busy (per-server politeness, TRAWL_POLITENESS=ip: another request to
	// the address is in flight or inside its gap). Applied as OutcomeDeferred: the URL goes
	// back to the head of its host queue, not counted as an attempt, and the host waits
	// RetryAfter (the address's wait) before its next task.
	OutcomeServerBusy OutcomeKind = "server-busy"
	// OutcomeParked: the task made no request because a live site policy blocks its URL
	// (shared/policy). The URL is parked with the reason "blocked", not counted as an
	// attempt, and resumes when the block is lifted.
	OutcomeParked OutcomeKind = "parked"
)

// MaxBody is the largest body a page can carry (the ceiling of the fetcher's body cap).
// Bodies that do not fit in a message travel by reference (BodyRef), so this bounds
// memory per page in the fetcher and the parser, not the message size.
const MaxBody = 64 << 20

// Outcome is one fetch log entry: what the scheduler needs to release the host and set its
// next fetch time. It travels inside an OutcomeBatch, where it carries no version of its
// own (V stays 0 and is omitted).
type Outcome struct {
	V       int         `json:"v,omitempty"`
	Shard   int         `json:"shard"`
	Host    string      `json:"host"`
	URL     string      `json:"url"`
	Lease   string      `json:"lease"`
	Attempt int         `json:"attempt"`
	Kind    OutcomeKind `json:"kind"`
	// Requested says a request reached the network for this task (page or robots.txt).
	// When false the host's last request is older and no new delay is owed for it.
	Requested  bool    `json:"requested"`
	Status     int     `json:"status,omitempty"`      // HTTP status when Kind is fetched, robots or robots-unavailable
	StartedAt  int64   `json:"started_at,omitempty"`  // unix ms when the request started
	DurationMs int64   `json:"duration_ms,omitempty"` // request time to last body byte
	Bytes      int64   `json:"bytes,omitempty"`
	CrawlDelay float64 `json:"crawl_delay,omitempty"` // seconds, from the host's robots.txt (uncapped)
	// Robots says the task fetched the host's robots.txt first and then, the host's gap
	// after it having passed already, made the URL's own request or decision: CrawlDelay is
	// the fresh file's (0 = none), as in a robots outcome.
	Robots     bool    `json:"robots,omitempty"`
	RetryAfter float64 `json:"retry_after,omitempty"` // seconds, from a 429/503 Retry-After header
	Location   string  `json:"location,omitempty"`    // normalised redirect target for 3xx
	// Addr is the server address the task's request went to, or would have gone to (a
	// server-busy outcome); "" when unknown (no connection, or through a proxy).
	Addr  string `json:"addr,omitempty"`
	Error string `json:"error,omitempty"`
	// Permanent marks an error that retrying cannot fix (e.g. no such host).
	Permanent bool `json:"permanent,omitempty"`
	// Recrawl is set for a recrawled URL whose task stored no page (an error, a block, a
	// page too large, robots.txt unavailable): the parser never sees it, so should the URL
	// end failed, the scheduler writes its next schedule from this.
	Recrawl *RecrawlEntry `json:"recrawl,omitempty"`
}

// OutcomeBatchVersion is the version of OutcomeBatch. Batches replaced single outcomes
// (version 1) on the same subjects, so they have their own number: a reader that knows only
// single outcomes rejects a batch instead of misreading it.
const OutcomeBatchVersion = 2

// OutcomeBatch is the payload on crawl.fetched.<shard>: the outcomes of many tasks of that
// shard, published together by one fetcher (one stored message for many tasks).
type OutcomeBatch struct {
	V        int       `json:"v"`
	Outcomes []Outcome `json:"outcomes"`
}

// DecodeOutcomes reads a message of crawl.fetched. A batch (version 2) gives its outcomes;
// a single outcome of version 1 (written by a fetcher of an earlier release during a
// rolling upgrade) gives a batch of one. Outcomes that lack host, lease or kind are not
// returned but counted in invalid: the batch's other outcomes stand on their own, so one
// bad entry does not lose them. A message that does not decode, carries another version or
// holds no outcome at all wraps ErrMalformed or ErrVersion (permanent).
func DecodeOutcomes(data []byte) (outs []Outcome, invalid int, err error) {
	var b OutcomeBatch
	if err := decode(data, &b); err != nil {
		return nil, 0, fmt.Errorf("%w: %T: %v", ErrMalformed, &b, err)
	}
	switch b.V {
	case OutcomeBatchVersion:
	case Version:
		var o Outcome
		if err := Unmarshal(data, &o); err != nil {
			return nil, 0, err
		}
		o.V = 0
		return []Outcome{o}, 0, nil
	default:
		return nil, 0, fmt.Errorf("%w: outcome batch has v=%d, want %d", ErrVersion, b.V, OutcomeBatchVersion)
	}
	if len(b.Outcomes) == 0 {
		return nil, 0, fmt.Errorf("%w: outcome batch holds no outcome", ErrMalformed)
	}
	outs = b.Outcomes[:0]
	for _, o := range b.Outcomes {
		if !o.valid() {
			invalid++
			continue
		}
		outs = append(outs, o)
	}
	return outs, invalid, nil
}

func (o *Outcome) valid() bool { return o.Host != "" && o.Lease != "" && o.Kind != "" }

// Page is a raw HTTP response as published on crawl.pages: the body is the message payload
// and PageMeta travels in the MetaHeader header. A page with a capture (version
// PageCaptureVersion) carries the capture's octets in the payload after the body.
type Page struct {
	Meta PageMeta
	Body []byte
	// Raw is the body as received when it differs from Body (Meta.Capture.RawSize) and
	// travels inline; nil otherwise.
	Raw []byte
}

// PageCaptureVersion is the version of a page message that carries a capture. Its payload
// is the body (none when it goes by reference, BodyRef), then the request head, the
// response head and the body as received (none when it goes by reference, RawRef), whose
// lengths the capture gives (RequestSize, ResponseSize, RawSize): what an archive needs
// travels like the body, never in a header, which JetStream bounds to 64 KiB in all. A
// page without a capture is version 1 and its payload is the body alone, as before.
const PageCaptureVersion = 2

// RawHeader is where version 1 pages (fetchers of earlier releases) carried Raw, standard
// base64. It is read, never written: a header over 64 KiB makes JetStream refuse the
// message, and a gzip body over about 48 KiB made one.
const RawHeader = "Trawl-Raw-Body"

// MetaHeader is the NATS header holding a Page's JSON-encoded PageMeta.
const MetaHeader = "Trawl-Meta"

// PageMeta describes a raw response.
type PageMeta struct {
	V           int                 `json:"v"`
	URL         string              `json:"url"`
	Host        string              `json:"host"`
	Depth       int                 `json:"depth"`
	Status      int                 `json:"status"`
	Header      map[string][]string `json:"header,omitempty"`
	ContentType string              `json:"content_type,omitempty"` // media type without parameters, lowercased
	Charset     string              `json:"charset,omitempty"`      // from the Content-Type parameter
	FetchedAt   int64               `json:"fetched_at"`             // unix ms when the request started
	DurationMs  int64               `json:"duration_ms"`
	Truncated   bool                `json:"truncated,omitempty"` // body cut at the size cap
	// Redirects would list earlier hops inline; the fetcher never follows a page redirect
	// inline (the target goes through the frontier), so it stays empty. Chains are recorded
	// hop by hop instead: see Location and Hops.
	Redirects []string `json:"redirects,omitempty"`
	// Location is the normalised target of a 3xx (as Outcome.Location): the next hop.
	Location string `json:"location,omitempty"`
	// Hops is how many redirects led to this URL (FetchTask.Hops); when > 0 the previous
	// hop is the page whose Location is this URL.
	Hops  int    `json:"hops,omitempty"`
	Lease string `json:"lease,omitempty"`
	// Kind and Embeds are the task's (FetchTask.Kind, FetchTask.Embeds).
	Kind   Kind `json:"kind,omitempty"`
	Embeds int  `json:"embeds,omitempty"`
	// Recrawl is the task's (FetchTask.Recrawl): the state the parser judges this fetch by.
	Recrawl *Recrawl `json:"recrawl,omitempty"`
	// Under is the task's (FetchTask.Under): where a sitemap's listed URLs may lie.
	Under string `json:"under,omitempty"`
	// BodyRef, when set, says the body is not the message payload (which is empty) but an
	// object in a JetStream object store: bodies above the inline threshold travel by
	// reference so that pages of many megabytes need no larger NATS max_payload.
	BodyRef *BodyRef `json:"body_ref,omitempty"`
	// Capture is the exchange as it crossed the wire, for archives (WARC).
	Capture *Capture `json:"capture,omitempty"`
	// Rendered marks a page rendered by a browser (render.go): its body is the rendered
	// DOM, and this holds the browser's exchanges. Such a page is never rendered again.
	Rendered *Rendered `json:"rendered,omitempty"`
}

// Capture is what an archive keeps of an exchange beside the decoded body. The heads are
// octets (a header value need not be UTF-8): in the payload of a version 2 page, whose
// metadata gives their lengths; in the metadata as JSON base64 in a version 1 page.
// DecodePage fills Request and Response either way.
type Capture struct {
	// Request is the request line and headers sent, ending in the blank line.
	Request []byte `json:"request,omitempty"`
	// Response is the status line and headers received, ending in the blank line.
	Response []byte `json:"response,omitempty"`
	// RequestSize and ResponseSize are the heads' lengths in a version 2 page's payload.
	// Written from Request and Response; only the wire form carries them.
	RequestSize  int64 `json:"request_size,omitempty"`
	ResponseSize int64 `json:"response_size,omitempty"`
	// Verbatim says Request and Response are the octets on the wire; false when they were
	// rebuilt in HTTP/1.1 form from parsed fields (HTTP/2, HTTPS through a proxy).
	Verbatim bool   `json:"verbatim,omitempty"`
	IP       string `json:"ip,omitempty"` // the address the connection went to
	// RawSize, when not 0, says the body as received (content coding intact, transfer
	// coding removed) differs from the page's body, which is decoded: it travels inline at
	// the end of the payload (a version 1 page: in the RawHeader header), or as the object
	// RawRef when the page is too large for both. 0 means the page's body is also the body
	// as received.
	RawSize int64    `json:"raw_size,omitempty"`
	RawRef  *BodyRef `json:"raw_ref,omitempty"`
}

// BodyRef names a page body stored as a JetStream object.
type BodyRef struct {
	Bucket string `json:"bucket"` // object store bucket (topology.BodiesBucket)
	Name   string `json:"name"`   // object name, "page:<lease>"
	Size   int64  `json:"size"`   // body octets
}

// IsHTML reports whether the page should be parsed for links.
func (m PageMeta) IsHTML() bool {
	return m.ContentType == "text/html" || m.ContentType == "application/xhtml+xml"
}

// Link is one outlink of a parsed document.
type Link struct {
	URL      string `json:"url"`
	Text     string `json:"text,omitempty"` // anchor text, whitespace-collapsed
	Rel      string `json:"rel,omitempty"`
	Tag      string `json:"tag,omitempty"` // element it came from: a, area, frame, iframe, link
	NoFollow bool   `json:"nofollow,omitempty"`
}

// Document is the payload on crawl.docs: a parsed page, complete enough for an indexer.
type Document struct {
	V           int    `json:"v"`
	URL         string `json:"url"`
	Host        string `json:"host"`
	Depth       int    `json:"depth"`
	Status      int    `json:"status"`
	FetchedAt   int64  `json:"fetched_at"`
	ContentType string `json:"content_type,omitempty"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Lang        string `json:"lang,omitempty"`
	Text        string `json:"text,omitempty"`
	Canonical   string `json:"canonical,omitempty"`
	Links       []Link `json:"links,omitempty"`
	NoIndex     bool   `json:"noindex,omitempty"`
	NoFollow    bool   `json:"nofollow,omitempty"`
	Digest      string `json:"digest"` // sha256 of the body, hex
	Truncated   bool   `json:"truncated,omitempty"`
	// Content dedup (parser). TextDigest is the sha256 (hex) of the visible text with white
	// space collapsed; SimHash is the 64-bit SimHash of its 3-word shingles, 16 hex digits.
	// DuplicateOf is the URL of the first page with the same TextDigest; NearDuplicateOf
	// that of an earlier original whose SimHash is Distance bits away (0..3).
	TextDigest      string `json:"text_digest,omitempty"`
	SimHash         string `json:"simhash,omitempty"`
	DuplicateOf     string `json:"duplicate_of,omitempty"`
	NearDuplicateOf string `json:"near_duplicate_of,omitempty"`
	Distance        int    `json:"distance,omitempty"`
	// Unchanged marks a recrawl that found the page as it was (a 304, or the same text):
	// the document then carries no text, links or title, only the URL, the fetch time and
	// the fingerprints, so an indexer refreshes its copy's timestamp and keeps its content.
	Unchanged bool `json:"unchanged,omitempty"`
	// Rendered marks a document made from a page rendered in a browser (PageMeta.Rendered):
	// its text and links are what the page's scripts wrote. RenderFailed, when set, says the
	// page was sent to a browser but could not be rendered (why); its document is then the
	// page as fetched.
	Rendered     bool   `json:"rendered,omitempty"`
	RenderFailed string `json:"render_failed,omitempty"`
}

// Marshal encodes a message, stamping the current Version.
func Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case *DiscoveredBatch:
		m.V = linksVersion(&m.Source, &m.URLs, &m.Groups)
	case *FrontierBatch:
		m.V = linksVersion(&m.Source, &m.URLs, &m.Groups)
	case *FetchTask:
		m.V = Version
	case *Outcome:
		m.V = Version
	case *OutcomeBatch:
		m.V = OutcomeBatchVersion
		for i := range m.Outcomes {
			m.Outcomes[i].V = 0
		}
	case *TaskBatch:
		m.V = TaskBatchVersion
		for i := range m.Tasks {
			m.Tasks[i].V = 0
		}
	case *Document:
		m.V = Version
	case *PageMeta:
		m.V = pageVersion(m)
		return appendPageMeta(nil, m), nil
	default:
		return nil, fmt.Errorf("crawlmsg: marshal %T: not a wire type", v)
	}
	return json.Marshal(v)
}

// Unmarshal decodes data into v (a pointer to a wire type) and checks its version.
// Errors wrap ErrMalformed or ErrVersion.
func Unmarshal(data []byte, v any) error {
	if err := decode(data, v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformed, v, err)
	}
	var got int
	switch m := v.(type) {
	case *DiscoveredBatch:
		return checkLinks(v, m.V, m.Source, m.URLs, m.Groups)
	case *FrontierBatch:
		return checkLinks(v, m.V, m.Source, m.URLs, m.Groups)
	case *TaskBatch:
		if m.V != TaskBatchVersion {
			return fmt.Errorf("%w: task batch has v=%d, want %d", ErrVersion, m.V, TaskBatchVersion)
		}
		return nil
	case *FetchTask:
		got = m.V
		if !m.valid() {
			return fmt.Errorf("%w: fetch task lacks url, host or lease", ErrMalformed)
		}
	case *Outcome:
		got = m.V
		if !m.valid() {
			return fmt.Errorf("%w: outcome lacks host, lease or kind", ErrMalformed)
		}
	case *Document:
		got = m.V
	case *PageMeta:
		got = m.V
		if m.URL == "" {
			return fmt.Errorf("%w: page lacks url", ErrMalformed)
		}
		if got == PageCaptureVersion {
			if m.Capture == nil {
				return fmt.Errorf("%w: page of v=%d lacks its capture", ErrMalformed, got)
			}
			return nil
		}
		if got == PageRenderedVersion {
			if m.Rendered == nil {
				return fmt.Errorf("%w: page of v=%d is not rendered", ErrMalformed, got)
			}
			return nil
		}
	default:
		return fmt.Errorf("crawlmsg: unmarshal %T: not a wire type", v)
	}
	if got != Version {
		return fmt.Errorf("%w: %T has v=%d, want %d", ErrVersion, v, got, Version)
	}
	return nil
}

// decode is json.Unmarshal that turns a decoder panic into an error: a message off the
// wire is untrusted input, and a bad one must be terminated, never crash the service.
func decode(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoder panic: %v", r)
		}
	}()
	return json.Unmarshal(data, v)
}
