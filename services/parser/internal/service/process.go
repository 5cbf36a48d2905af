package service

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/trawl/trawl/services/parser/internal/extract"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/urlnorm"
)

// processor turns one raw page into its document and discovered batch. It holds no
// connection, so it is tested without NATS.
type processor struct {
	extract extract.Options
	filter  *scope.Filter
	maxDoc  int // largest encoded document
	log     *slog.Logger
}

// outcome is what one page produced, plus the counts metrics need once it is settled.
type outcome struct {
	skipped  bool
	doc      []byte // encoded Document; nil when skipped
	disc     []byte // encoded DiscoveredBatch; nil when nothing is to be followed
	parseErr error
	duration time.Duration
	links    int
	emitted  int
	rejected scope.Rejected
	dropped  extract.Dropped
	limits   []string
	trimmed  bool
}

// process never fails on page content: a page that cannot be parsed still yields a
// document with what was extracted (and parseErr set), so it is never redelivered forever.
func (p *processor) process(page *crawlmsg.Page) (*outcome, error) {
	m := &page.Meta
	if !m.IsHTML() || m.Status < 200 || m.Status > 299 {
		return &outcome{skipped: true}, nil
	}
	o := &outcome{}
	start := time.Now()
	res, err := p.safeExtract(page)
	o.duration = time.Since(start)
	o.parseErr = err
	if err != nil {
		p.log.Warn("page parsed with errors", "url", m.URL, "err", err)
	}
	o.links = len(res.Links)
	o.dropped = res.Dropped
	if res.StoppedAt != "" {
		o.limits = append(o.limits, res.StoppedAt)
	}
	if res.LinksCapped {
		o.limits = append(o.limits, "links")
	}
	if res.TextCapped {
		o.limits = append(o.limits, "text")
	}

	host := m.Host
	if host == "" {
		host, _ = urlnorm.Host(m.URL)
	}
	sum := sha256.Sum256(page.Body)
	doc := &crawlmsg.Document{
		URL:         m.URL,
		Host:        host,
		Depth:       m.Depth,
		Status:      m.Status,
		FetchedAt:   m.FetchedAt,
		ContentType: m.ContentType,
		Title:       res.Title,
		Description: res.Description,
		Lang:        res.Lang,
		Text:        res.Text,
		Canonical:   res.Canonical,
		Links:       res.Links,
		NoIndex:     res.NoIndex,
		NoFollow:    res.NoFollow,
		Digest:      hex.EncodeToString(sum[:]),
		// The document is partial when the fetcher cut the body or the parser stopped
		// before its end; the text and link caps are reported by metrics only.
		Truncated: m.Truncated || res.StoppedAt != "",
	}
	if o.doc, o.trimmed, err = encodeDocument(doc, p.maxDoc); err != nil {
		return nil, err
	}

	found, rej := p.filter.Select(scope.Page{URL: m.URL, Depth: m.Depth, NoFollow: res.NoFollow}, res.Links)
	o.rejected = rej
	o.emitted = len(found)
	if len(found) > 0 {
		if o.disc, err = crawlmsg.Marshal(&crawlmsg.DiscoveredBatch{Source: m.URL, URLs: found}); err != nil {
			return nil, fmt.Errorf("parser: encode discovered: %w", err)
		}
	}
	return o, nil
}

// safeExtract keeps a tokenizer bug triggered by one hostile page from taking the whole
// service down: the page gets an empty extraction and a parse error instead.
func (p *processor) safeExtract(page *crawlmsg.Page) (res *extract.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = &extract.Result{}, fmt.Errorf("parser: extract panicked: %v", r)
		}
	}()
	return extract.Extract(extract.Input{
		URL:         page.Meta.URL,
		Body:        page.Body,
		ContentType: contentType(&page.Meta),
		Header:      page.Meta.Header,
	}, p.extract)
}

// contentType rebuilds the Content-Type the charset detection reads: the fetcher stores
// the media type and charset apart.
func contentType(m *crawlmsg.PageMeta) string {
	if m.Charset != "" {
		return m.ContentType + "; charset=" + m.Charset
	}
	for k, v := range m.Header {
		if len(v) > 0 && strings.EqualFold(k, "Content-Type") {
			return v[0]
		}
	}
	return m.ContentType
}

// encodeDocument marshals doc, shedding links and then text until it fits in max bytes:
// a document over the stream's message size would fail to publish on every redelivery.
func encodeDocument(doc *crawlmsg.Document, max int) ([]byte, bool, error) {
	trimmed := false
	for {
		b, err := crawlmsg.Marshal(doc)
		if err != nil {
			return nil, false, fmt.Errorf("parser: encode document: %w", err)
		}
		if max <= 0 || len(b) <= max {
			return b, trimmed, nil
		}
		trimmed = true
		switch {
		case len(doc.Links) > 0:
			doc.Links = doc.Links[:len(doc.Links)/2]
		case len(doc.Text) > 0:
			doc.Text = cutUTF8(doc.Text, len(doc.Text)/2)
		default:
			// Only the fixed fields are left; they are bounded by the extraction limits,
			// so this means max is set absurdly low.
			return nil, false, fmt.Errorf("parser: document of %d bytes cannot fit %d", len(b), max)
		}
	}
}

// cutUTF8 shortens s to at most n bytes without splitting a rune.
func cutUTF8(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
