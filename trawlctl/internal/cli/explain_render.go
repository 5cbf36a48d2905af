package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/trawlctl/internal/inspect"
)

// explainRender says whether the URL's page was or would be rendered, and why: the
// parser's last decision when it kept one (rendered pages, pages the detector read, rules
// that say never), else what the settings decide. A page with plenty of text in auto mode
// keeps no decision: a crawl of ordinary pages writes nothing for explain.
func explainRender(ctx context.Context, e *env, rdb redis.UniversalClient, r *inspect.Report) {
	s := e.cfg.Render
	rr := &inspect.RenderReport{Mode: s.Canonical()}
	r.Render = rr
	if s.On() {
		w, ok, err := renderconf.Lookup(ctx, rdb, e.cfg.RedisPrefix, r.URL)
		switch {
		case err != nil:
			rr.Note = "unknown: " + err.Error()
			return
		case ok:
			rr.Kept, rr.Render, rr.Reason = &w, w.Render, w.Reason
			return
		}
	}
	urls, _ := s.Regexp() // Validate compiled it already
	switch {
	case !s.On():
		rr.Reason, rr.Note = renderconf.ReasonOff, "TRAWL_RENDER=off: no page is rendered, whatever the site policies say"
	case urls != nil && urls.MatchString(r.URL):
		rr.Reason, rr.Render, rr.Note = renderconf.ReasonURL, true, fmt.Sprintf("matches TRAWL_RENDER_URLS %q: rendered when fetched (2xx HTML), unless a site policy says never", s.URLs)
	case hostIn(s.HostList(), r.Host):
		rr.Reason, rr.Render, rr.Note = renderconf.ReasonHost, true, "host in TRAWL_RENDER_HOSTS: rendered when fetched (2xx HTML), unless a site policy says never"
	case s.Canonical() == renderconf.Always:
		rr.Reason, rr.Render, rr.Note = renderconf.ReasonAlways, true, "TRAWL_RENDER=always: rendered when fetched (2xx HTML), unless a site policy says never"
	default:
		rr.Reason = renderconf.ReasonNoShell
		rr.Note = "TRAWL_RENDER=auto and no decision kept: the page had more than 50 words of text when parsed (not an application shell), or it is not parsed yet, or its slot was since taken by another URL's decision"
	}
}

func hostIn(hosts []string, h string) bool {
	for _, x := range hosts {
		if strings.EqualFold(x, h) {
			return true
		}
	}
	return false
}
