package robots

import (
	"fmt"
	"strings"

	"github.com/trawl/trawl/shared/envconfig"
)

// DefaultAgent is TRAWL_ROBOTS_AGENT when it is unset.
const DefaultAgent = "trawl"

// LoadAgent reads TRAWL_ROBOTS_AGENT: the product token the fetchers match robots.txt
// user-agent lines with, the parser matches <meta name=…> robots directives with, and
// trawlctl explains with. CheckAgent is its range check.
func LoadAgent(r *envconfig.Reader) string { return r.String("ROBOTS_AGENT", DefaultAgent) }

// CheckAgent accepts a bare product token as RFC 9309 §2.2.1 defines it, [a-zA-Z_-]+:
// a digit or a version ("trawl/1.0") would never match a user-agent line as written.
func CheckAgent(token string) error {
	if !IsProductToken(token) {
		return fmt.Errorf("TRAWL_ROBOTS_AGENT=%q: want a product token of letters, '-' and '_' (RFC 9309)", token)
	}
	return nil
}

// DefaultUserAgent is TRAWL_USER_AGENT when it is unset. RFC 9309 §2.2.1 asks a crawler
// to name its product token in the User-Agent header it sends.
const DefaultUserAgent = "Mozilla/5.0 (compatible; trawl/0.1; +https://github.com/trawl/trawl)"

// LoadUserAgent reads TRAWL_USER_AGENT: the User-Agent header of the fetchers' requests,
// and of trawlctl's when it fetches a robots.txt to check. CheckUserAgent is its check.
func LoadUserAgent(r *envconfig.Reader) string { return r.String("USER_AGENT", DefaultUserAgent) }

// CheckUserAgent accepts one non-empty line: a line break would split the header.
func CheckUserAgent(ua string) error {
	if ua == "" || strings.ContainsAny(ua, "\r\n") {
		return fmt.Errorf("TRAWL_USER_AGENT=%q: want one non-empty line", ua)
	}
	return nil
}
