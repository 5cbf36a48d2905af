package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

// recrawlPolicy is the parser's part of adaptive recrawling: it sees every response of the
// crawl, so it judges each against the URL's last fetch and writes the URL's next schedule.
type recrawlPolicy struct {
	recrawl.Settings
	shards int
}

func recrawlOf(cfg config.Config) *recrawlPolicy {
	if cfg.Common.Recrawl != envconfig.RecrawlAdaptive {
		return nil
	}
	return &recrawlPolicy{Settings: cfg.Recrawl, shards: cfg.Common.Shards}
}

// judgeRecrawl sets o's verdict and next schedule. A 304 gets a document of its own, the
// unchanged event: no body was sent, so there is nothing else to publish for it, and an
// indexer still learns the page was seen as it was.
func (p *processor) judgeRecrawl(page *crawlmsg.Page, o *outcome) {
	if p.recrawl == nil {
		return
	}
	m := &page.Meta
	f := recrawl.Fetch{Status: m.Status, Header: http.Header(m.Header), FetchedAt: time.UnixMilli(m.FetchedAt),
		Took: time.Duration(m.DurationMs) * time.Millisecond}
	switch {
	case o.document != nil && o.fp.Tokens > 0:
		f.Digest, f.SimHash = o.document.TextDigest, o.document.SimHash
	case len(page.Body) > 0 || m.Status/100 == 2:
		// No text to compare (not HTML, a sitemap, an empty page): the body decides.
		sum := sha256.Sum256(page.Body)
		f.Digest = hex.EncodeToString(sum[:])
	}
	o.at = f.FetchedAt
	if m.Kind == crawlmsg.KindSitemap && m.Recrawl != nil {
		o.changed = changedSince(o, m.Recrawl.LastFetch)
	}
	if m.Recrawl != nil {
		o.prevDigest = m.Recrawl.Digest
	}
	o.verdict = p.recrawl.Judge(m.Recrawl, f)
	st, keep := p.recrawlFor(m.URL).Next(m.Recrawl, o.verdict, f)
	if keep {
		o.schedule = &crawlmsg.RecrawlEntry{URL: m.URL, Depth: m.Depth, Kind: m.Kind, Embeds: m.Embeds, State: st}
	}
	switch o.verdict {
	case recrawl.Unchanged:
		if o.document != nil {
			o.document.Unchanged = true
		}
	case recrawl.NotModified:
		host := m.Host
		if host == "" {
			host, _ = urlnorm.Host(m.URL)
		}
		o.document = &crawlmsg.Document{URL: m.URL, Host: host, Depth: m.Depth, Status: m.Status,
			FetchedAt: m.FetchedAt, Unchanged: true}
		if prev := m.Recrawl; prev != nil {
			o.document.TextDigest, o.document.SimHash = prev.Digest, prev.SimHash
		}
	}
}

// recrawlFor is the interval policy of one URL: TRAWL_RECRAWL_MIN/MAX, or the bounds of
// the live rule that matches it (recrawl_min, recrawl_max).
func (p *processor) recrawlFor(rawURL string) recrawl.Settings {
	rules := p.currentRules()
	if rules == nil {
		return p.recrawl.Settings
	}
	return p.recrawl.For(rules.URL(rawURL))
}

// scheduleMsg is o's schedule message, or nil when there is none.
func (p *processor) scheduleMsg(o *outcome, msgID string) (*nats.Msg, error) {
	if p.recrawl == nil || o.schedule == nil {
		return nil, nil
	}
	host, err := urlnorm.Host(o.schedule.URL)
	if err != nil {
		return nil, err
	}
	return recrawl.Schedule(topology.ShardOf(host, p.recrawl.shards), o.schedule, msgID)
}

// changedSince are the URLs of a sitemap's outcome whose lastmod is after since (unix ms,
// when the sitemap was last read): only they can have changed since their last fetch.
func changedSince(o *outcome, since int64) []crawlmsg.Discovered {
	groups := o.follows
	if len(groups) == 0 && o.follow != nil {
		groups = []*crawlmsg.LinkGroup{o.follow}
	}
	var out []crawlmsg.Discovered
	for _, g := range groups {
		for _, d := range g.URLs {
			if d.Kind == crawlmsg.KindPage && d.Lastmod*1000 > since {
				out = append(out, d)
			}
		}
	}
	return out
}

// bringForward makes due at once, or as soon as TRAWL_RECRAWL_MIN allows, every known URL
// a recrawled sitemap says changed after its last fetch (lastmod): the site says so, so
// the schedule need not wait out its interval. A URL with no schedule (new, queued, due)
// is left alone: a new one is crawled anyway, a queued or due one soon. Each republished
// schedule keeps the URL's state; its id derives from the sitemap page's, so a redelivery
// changes nothing.
func (s *Service) bringForward(ctx context.Context, o *outcome, id string) ([]*nats.Msg, error) {
	if s.js == nil {
		return nil, fmt.Errorf("parser: a sitemap says %d URLs changed, and there is no NATS to read their schedules from (an Offline parser without NATS)", len(o.changed))
	}
	p := s.proc.recrawl
	var out []*nats.Msg
	for _, d := range o.changed {
		host, err := urlnorm.Host(d.URL)
		if err != nil {
			continue
		}
		shard := topology.ShardOf(host, p.shards)
		h, err := recrawl.Lookup(ctx, s.js, shard, d.URL)
		if err != nil {
			return nil, fmt.Errorf("parser: recrawl schedule of %s: %w", d.URL, err)
		}
		due, ok := s.proc.recrawlFor(d.URL).BringForward(h, d.Lastmod, o.at)
		if !ok {
			continue
		}
		e := h.RecrawlEntry
		e.State.Due = due.UnixMilli()
		m, err := recrawl.Schedule(shard, &e, "lastmod:"+id+":"+topology.RecrawlKey(d.URL))
		if err != nil {
			return nil, natsx.Permanent(err)
		}
		out = append(out, m)
	}
	return out, nil
}
