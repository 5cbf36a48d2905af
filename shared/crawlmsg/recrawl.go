package crawlmsg

import (
	"fmt"

	json "github.com/goccy/go-json"
)

// Recrawl is what Trawl remembers of a URL between its fetches in adaptive recrawl mode
// (TRAWL_RECRAWL=adaptive): the validators for a conditional GET, the content fingerprint
// a new fetch is compared with, and the interval the schedule has learnt. It is kept on
// disk in the URL's schedule message (RecrawlEntry, stream CRAWL_RECRAWL) and, while the
// URL is queued again, in its frontier entry (Extra.Recrawl); the task and the page carry
// it to the parser, which judges the new fetch against it. Nil on a URL's first fetch.
type Recrawl struct {
	ETag         string `json:"etag,omitempty"` // validators of the last 2xx response
	LastModified string `json:"lm,omitempty"`
	// Digest is the sha256 (hex) of the page's visible text (Document.TextDigest), or of
	// its body when it has no text (not HTML); SimHash the text's SimHash, 16 hex digits.
	Digest  string `json:"d,omitempty"`
	SimHash string `json:"sh,omitempty"`
	// Interval is the wait from one fetch to the next, milliseconds.
	Interval int64 `json:"iv"`
	// Gone counts the fetches in a row that answered 404 or 410.
	Gone int `json:"g,omitempty"`
	// Fetches and Changes count the fetches judged so far and those that found a change.
	Fetches int `json:"n,omitempty"`
	Changes int `json:"c,omitempty"`
	// NotModified counts the fetches answered 304.
	NotModified int `json:"nm,omitempty"`
	// LastFetch is when the last fetch started, Due when the next one is due (unix ms).
	LastFetch int64 `json:"lf,omitempty"`
	Due       int64 `json:"due,omitempty"`
}

// RecrawlEntry is the body of a schedule message on crawl.recrawl.sched.<shard>.<key>
// and of the due message the server makes of it: the URL as the frontier will queue it
// again, and its state.
type RecrawlEntry struct {
	V      int     `json:"v"`
	URL    string  `json:"url"`
	Depth  int     `json:"depth"`
	Kind   Kind    `json:"kind,omitempty"`
	Embeds int     `json:"embeds,omitempty"`
	State  Recrawl `json:"state"`
}

// Discovered is the entry as the frontier queues it: not deduplicated (the URL is known),
// carrying its state.
func (e *RecrawlEntry) Discovered() Discovered {
	st := e.State
	return Discovered{URL: e.URL, Depth: e.Depth, Via: ViaRecrawl, Kind: e.Kind, Embeds: e.Embeds, Recrawl: &st}
}

// ViaRecrawl marks a URL queued again because its recrawl is due.
const ViaRecrawl Via = "recrawl"

// EncodeRecrawl marshals e, stamping the current Version.
func EncodeRecrawl(e *RecrawlEntry) ([]byte, error) {
	e.V = Version
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("crawlmsg: encode recrawl entry: %w", err)
	}
	return b, nil
}

// DecodeRecrawl reads a schedule or due message. Errors wrap ErrMalformed or ErrVersion.
func DecodeRecrawl(data []byte) (RecrawlEntry, error) {
	var e RecrawlEntry
	if err := decode(data, &e); err != nil {
		return e, fmt.Errorf("%w: recrawl entry: %v", ErrMalformed, err)
	}
	if e.V != Version {
		return e, fmt.Errorf("%w: recrawl entry has v=%d, want %d", ErrVersion, e.V, Version)
	}
	if e.URL == "" || !e.Kind.Valid() || e.Depth < 0 || e.Embeds < 0 || e.State.Interval <= 0 {
		return e, fmt.Errorf("%w: recrawl entry lacks url or interval, or has a bad kind", ErrMalformed)
	}
	return e, nil
}
