// Package crawlscope holds the URL-only rule that decides which links the parser follows
// (Rule) and its settings — TRAWL_SCOPE, TRAWL_MAX_URL_LENGTH, TRAWL_INCLUDE, TRAWL_EXCLUDE
// — read and checked here once: the parser applies the rule and trawlctl explains a URL
// with it. (TRAWL_MAX_DEPTH is the frontier's, in frontierconf.)
package crawlscope

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/urlnorm"
)

// The values of TRAWL_SCOPE.
const (
	Any    = "any"    // follow links anywhere
	Host   = "host"   // only to the linking page's host
	Domain = "domain" // only to the linking page's registered domain (eTLD+1)
)

// MinURLLength bounds TRAWL_MAX_URL_LENGTH from below; urlnorm.MaxLength, the longest
// input urlnorm reads at all, from above.
const MinURLLength = 32

// Settings are the scope settings.
type Settings struct {
	Scope        string // TRAWL_SCOPE: any, host or domain (case and spaces ignored)
	MaxURLLength int    // TRAWL_MAX_URL_LENGTH: longest normalised URL followed
	Include      string // TRAWL_INCLUDE: regexp a followed URL must match ("" = all)
	Exclude      string // TRAWL_EXCLUDE: regexp of URLs never followed ("" = none)
}

// Defaults are the settings with every variable unset.
var Defaults = Settings{Scope: Any, MaxURLLength: 2048}

// Load reads the settings; range checks are Validate's.
func Load(r *envconfig.Reader) Settings {
	return Settings{
		Scope:        r.String("SCOPE", Defaults.Scope),
		MaxURLLength: r.Int("MAX_URL_LENGTH", Defaults.MaxURLLength),
		Include:      r.String("INCLUDE", Defaults.Include),
		Exclude:      r.String("EXCLUDE", Defaults.Exclude),
	}
}

// Mode is Scope in its canonical form ("" if it is none of the three).
func (s Settings) Mode() string {
	switch m := strings.ToLower(strings.TrimSpace(s.Scope)); m {
	case Any, Host, Domain:
		return m
	}
	return ""
}

// Validate reports every setting out of range.
func (s Settings) Validate() error {
	var errs []error
	if s.Mode() == "" {
		errs = append(errs, fmt.Errorf("TRAWL_SCOPE=%q: want any, host or domain", s.Scope))
	}
	if s.MaxURLLength < MinURLLength || s.MaxURLLength > urlnorm.MaxLength {
		errs = append(errs, fmt.Errorf("TRAWL_MAX_URL_LENGTH=%d: want %d..%d", s.MaxURLLength, MinURLLength, urlnorm.MaxLength))
	}
	if _, _, err := s.Regexps(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Regexps compiles TRAWL_INCLUDE and TRAWL_EXCLUDE; an empty one is nil ("not set", not
// "matches everything").
func (s Settings) Regexps() (include, exclude *regexp.Regexp, err error) {
	var errs []error
	compile := func(name, expr string) *regexp.Regexp {
		if expr == "" {
			return nil
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, expr, err))
		}
		return re
	}
	include = compile("TRAWL_INCLUDE", s.Include)
	exclude = compile("TRAWL_EXCLUDE", s.Exclude)
	return include, exclude, errors.Join(errs...)
}
