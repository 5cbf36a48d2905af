package polite

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/safedial"
)

// RequestSettings are how a process that requests pages for the crawl dials and which
// bodies it stores inline in a page. The fetchers and the renderers both request pages
// and store them, so both read these from the same variables, with the same defaults and
// ranges.
type RequestSettings struct {
	DialTimeout   time.Duration  // TRAWL_DIAL_TIMEOUT: each connection attempt
	BodyInlineMax int64          // TRAWL_BODY_INLINE_MAX: larger bodies go by reference (object store)
	AllowCIDRs    []netip.Prefix // TRAWL_ALLOW_CIDRS: ranges the address policy lets through
	// Resolve is TRAWL_RESOLVE: names answered from this map instead of DNS (tests and
	// demos: many host names on one loopback address). Every address must be one the
	// address policy allows.
	Resolve map[string][]netip.Addr

	allowRaw   []string
	cidrErr    error
	resolveErr error
}

// MaxInlineLimit is the ceiling of TRAWL_BODY_INLINE_MAX: an inline body, the page's
// metadata and its other headers must fit in one message (topology's MaxMsgSize is 8 MiB;
// a server's max_payload may be lower, which the publishers also respect).
const MaxInlineLimit = 4 << 20

// LoadRequestSettings reads the request settings; Validate holds their ranges and reports
// the lists that could not be parsed.
func LoadRequestSettings(r *envconfig.Reader) RequestSettings {
	s := RequestSettings{
		DialTimeout:   r.Duration("DIAL_TIMEOUT", 10*time.Second),
		BodyInlineMax: r.Bytes("BODY_INLINE_MAX", 1<<20),
		allowRaw:      r.List("ALLOW_CIDRS", nil),
	}
	s.AllowCIDRs, s.cidrErr = safedial.ParseCIDRs(s.allowRaw)
	s.Resolve, s.resolveErr = safedial.ParseStatic(r.List("RESOLVE", nil))
	return s
}

// Validate accepts a dial timeout above 0, an inline threshold of 0 (every body by
// reference) to MaxInlineLimit, address ranges that parse, and static names that parse
// and resolve to addresses the address policy (with the allowed ranges) lets through.
func (s RequestSettings) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.DialTimeout <= 0 {
		bad("TRAWL_DIAL_TIMEOUT=%s: want more than 0", s.DialTimeout)
	}
	if s.BodyInlineMax < 0 || s.BodyInlineMax > MaxInlineLimit {
		bad("TRAWL_BODY_INLINE_MAX=%d: want 0 (every body by reference)..%d", s.BodyInlineMax, MaxInlineLimit)
	}
	if s.cidrErr != nil {
		bad("TRAWL_ALLOW_CIDRS=%q: %w", strings.Join(s.allowRaw, ","), s.cidrErr)
	}
	if s.resolveErr != nil {
		bad("TRAWL_RESOLVE: %v", s.resolveErr)
	}
	policy := safedial.NewPolicy(s.AllowCIDRs...)
	for name, addrs := range s.Resolve {
		for _, a := range addrs {
			if err := policy.Check(a); err != nil {
				bad("TRAWL_RESOLVE: %s=%s: the address policy refuses it (%v); allow it with TRAWL_ALLOW_CIDRS", name, a, err)
			}
		}
	}
	return errors.Join(errs...)
}
