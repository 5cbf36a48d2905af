package render

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/trawl/trawl/shared/renderconf"
)

// Page is what a decision reads of a parsed page.
type Page struct {
	URL  string
	Host string
	// Rendered says the page is a renderer's output: it is never rendered again.
	Rendered bool
	// Text is the visible text the parser extracted; Body the markup, read only when the
	// text is short enough for the page to be a shell.
	Text string
	Body []byte
}

// Rule is the live site policy's say on a URL: its render value ("always", "never",
// "auto"; "" when no rule sets it) and the scope of the rule that set it.
type Rule func(url string) (value, scope string)

// Decision is whether a page is rendered and why.
type Decision struct {
	Render bool
	Reason renderconf.Reason
	// Detail names the rule or setting, or the detector's figures.
	Detail string
	// Examined says the detector read the page's markup (a short page in auto mode).
	Examined bool
}

// Decider decides for every 2xx HTML page. Safe for concurrent use.
type Decider struct {
	mode  string
	hosts map[string]bool
	urls  *regexp.Regexp
	rule  Rule
}

// New builds a decider from checked settings; rule may be nil (no live policy).
func New(s renderconf.Settings, rule Rule) (*Decider, error) {
	re, err := s.Regexp()
	if err != nil {
		return nil, err
	}
	d := &Decider{mode: s.Canonical(), urls: re, rule: rule, hosts: map[string]bool{}}
	for _, h := range s.HostList() {
		d.hosts[h] = true
	}
	return d, nil
}

// On says pages may be rendered at all.
func (d *Decider) On() bool { return d != nil && d.mode != renderconf.Off }

// Decide says whether the page is rendered. Precedence, first that applies: a rendering is
// never rendered again; TRAWL_RENDER=off renders nothing (no renderer runs, whatever a rule
// says); a policy rule's render field (most specific scope wins, shared/policy); a URL
// matching TRAWL_RENDER_URLS, then a host in TRAWL_RENDER_HOSTS, render; TRAWL_RENDER=always
// renders; auto renders the pages the detector finds to be application shells.
func (d *Decider) Decide(p Page) Decision {
	switch {
	case p.Rendered:
		return Decision{Reason: renderconf.ReasonRendered}
	case !d.On():
		return Decision{Reason: renderconf.ReasonOff}
	}
	mode := d.mode
	if d.rule != nil {
		if v, scope := d.rule(p.URL); v != "" {
			switch renderconf.ModeOf(v, true) {
			case renderconf.Always:
				return Decision{Render: true, Reason: renderconf.ReasonRule, Detail: scope}
			case renderconf.Never:
				return Decision{Reason: renderconf.ReasonNever, Detail: scope}
			case renderconf.Auto:
				return d.detect(p, "rule "+scope)
			}
		}
	}
	if d.urls != nil && d.urls.MatchString(p.URL) {
		return Decision{Render: true, Reason: renderconf.ReasonURL, Detail: d.urls.String()}
	}
	if d.hosts[strings.ToLower(p.Host)] {
		return Decision{Render: true, Reason: renderconf.ReasonHost, Detail: p.Host}
	}
	if mode == renderconf.Always {
		return Decision{Render: true, Reason: renderconf.ReasonAlways}
	}
	return d.detect(p, "")
}

func (d *Decider) detect(p Page, by string) Decision {
	if !FewWords(p.Text) {
		return Decision{Reason: renderconf.ReasonNoShell, Detail: join(by, manyWords)}
	}
	s := Detect(p.Body)
	if s.Shell() {
		return Decision{Render: true, Reason: renderconf.ReasonShell, Detail: join(by, s.String()), Examined: true}
	}
	return Decision{Reason: renderconf.ReasonNoShell, Detail: join(by, s.String()), Examined: true}
}

// manyWords is the detail of a page the detector did not read, made once: this is the
// decision of nearly every page of a plain crawl.
var manyWords = fmt.Sprintf("more than %d words of text", MaxWords)

func join(by, s string) string {
	if by == "" {
		return s
	}
	return by + ": " + s
}
