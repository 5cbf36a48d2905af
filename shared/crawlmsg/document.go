package crawlmsg

// The parsed document a parser publishes for indexers (crawl.docs).

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
