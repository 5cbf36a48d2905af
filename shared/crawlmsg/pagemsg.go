package crawlmsg

// The raw page a fetcher stores (crawl.pages): body, metadata and, for archives, the
// exchange as it crossed the wire. page.go writes and reads it as a NATS message.

// MaxBody is the largest body a page can carry (the ceiling of the fetcher's body cap).
// Bodies that do not fit in a message travel by reference (BodyRef), so this bounds
// memory per page in the fetcher and the parser, not the message size.
const MaxBody = 64 << 20

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
