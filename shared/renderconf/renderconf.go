// Package renderconf holds the settings that decide which pages are rendered in a browser
// — TRAWL_RENDER, TRAWL_RENDER_HOSTS, TRAWL_RENDER_URLS — read and checked here once: the
// parser decides with them, the renderer and trawlctl read the same values, and a site
// policy's `render` field (policy.Rule.Render) overrides them per scope. It also names the
// decisions (Reason) and where the parser keeps the last one of a URL for trawlctl explain
// (WhyKeys).
package renderconf

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/trawl/trawl/shared/envconfig"
)

// The values of TRAWL_RENDER and of a policy rule's render field.
const (
	// Off renders nothing, whatever the rules say: no renderer needs to run.
	Off = "off"
	// Auto renders the pages the parser detects as application shells, and the hosts and
	// URLs the settings or rules name.
	Auto = "auto"
	// Always renders every 2xx HTML page.
	Always = "always"
	// Never is a rule's value only: the scope's pages are never rendered.
	Never = "never"
)

// Settings are the render settings.
type Settings struct {
	Mode  string // TRAWL_RENDER: off, auto or always (case and spaces ignored)
	Hosts string // TRAWL_RENDER_HOSTS: hosts whose HTML pages are always rendered (unless off), comma- or space-separated
	URLs  string // TRAWL_RENDER_URLS: regexp of URLs always rendered (unless off)
}

// Defaults are the settings with every variable unset: nothing is rendered.
var Defaults = Settings{Mode: Off}

// Load reads the settings; range checks are Validate's.
func Load(r *envconfig.Reader) Settings {
	return Settings{
		Mode:  r.String("RENDER", Defaults.Mode),
		Hosts: r.String("RENDER_HOSTS", ""),
		URLs:  r.String("RENDER_URLS", ""),
	}
}

// HostList is TRAWL_RENDER_HOSTS's hosts, lowercased, without a trailing dot.
func (s Settings) HostList() []string {
	hosts := envconfig.SplitList(s.Hosts)
	for i, h := range hosts {
		hosts[i] = strings.ToLower(strings.TrimSuffix(h, "."))
	}
	return hosts
}

// Canonical is Mode in its canonical form ("" if it is none of the three).
func (s Settings) Canonical() string { return ModeOf(s.Mode, false) }

// ModeOf reads a render mode; rule says whether Never is allowed (a policy rule's value).
// It returns "" for anything else.
func ModeOf(v string, rule bool) string {
	switch m := strings.ToLower(strings.TrimSpace(v)); m {
	case Off, Auto, Always:
		if rule && m == Off {
			return ""
		}
		return m
	case Never:
		if rule {
			return m
		}
	}
	return ""
}

// On says pages may be rendered at all: a renderer must run.
func (s Settings) On() bool { return s.Canonical() != Off }

// Validate reports every setting out of range.
func (s Settings) Validate() error {
	var errs []error
	if s.Canonical() == "" {
		errs = append(errs, fmt.Errorf("TRAWL_RENDER=%q: want off, auto or always", s.Mode))
	}
	for _, h := range s.HostList() {
		if h == "" || strings.ContainsAny(h, "/:@ ") {
			errs = append(errs, fmt.Errorf("TRAWL_RENDER_HOSTS: %q is not a host name", h))
		}
	}
	if _, err := s.Regexp(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Regexp compiles TRAWL_RENDER_URLS; empty is nil (no URL named).
func (s Settings) Regexp() (*regexp.Regexp, error) {
	if s.URLs == "" {
		return nil, nil
	}
	re, err := regexp.Compile(s.URLs)
	if err != nil {
		return nil, fmt.Errorf("TRAWL_RENDER_URLS=%q: %w", s.URLs, err)
	}
	return re, nil
}

// Reason is why a page was or was not rendered: the label of the parser's
// trawl_parser_render_decisions_total and what trawlctl explain prints.
type Reason string

const (
	// Rendered.
	ReasonAlways Reason = "always"       // TRAWL_RENDER=always
	ReasonRule   Reason = "rule-always"  // a policy rule says always
	ReasonHost   Reason = "setting-host" // the host is in TRAWL_RENDER_HOSTS
	ReasonURL    Reason = "setting-url"  // the URL matches TRAWL_RENDER_URLS
	ReasonShell  Reason = "shell"        // detected as an application shell
	// Not rendered.
	ReasonOff      Reason = "off"        // TRAWL_RENDER=off
	ReasonNever    Reason = "rule-never" // a policy rule says never
	ReasonRendered Reason = "rendered"   // the page is a rendering already: never rendered twice
	ReasonNoShell  Reason = "not-shell"  // auto, and the page has what a shell lacks
)

// Reasons are every reason, for metrics to start at zero.
var Reasons = []Reason{ReasonAlways, ReasonRule, ReasonHost, ReasonURL, ReasonShell,
	ReasonOff, ReasonNever, ReasonRendered, ReasonNoShell}

// Renders says the reason is one of rendering.
func (r Reason) Renders() bool {
	switch r {
	case ReasonAlways, ReasonRule, ReasonHost, ReasonURL, ReasonShell:
		return true
	}
	return false
}
