package robots

import "fmt"

// Class is what the outcome of fetching robots.txt means for the crawl (RFC 9309 §2.3.1).
type Class uint8

const (
	// Parsed: 2xx, the body's rules apply.
	Parsed Class = iota + 1
	// Unavailable: 4xx other than 429 (401 and 403 included), or a redirect chain longer
	// than the fetcher follows (§2.3.1.2 lets a crawler then assume the file unavailable).
	// Everything is allowed.
	Unavailable
	// Unreachable: 5xx, 429, or no response at all. Everything is disallowed until the file
	// can be fetched again (§2.3.1.3, §2.3.1.4).
	Unreachable
)

func (c Class) String() string {
	switch c {
	case Parsed:
		return "parsed"
	case Unavailable:
		return "unavailable"
	case Unreachable:
		return "unreachable"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// FromStatus classifies the final HTTP status of a robots.txt fetch. A 3xx reaching here
// is one the fetcher did not follow (too many hops, or no usable Location), so it counts as
// unavailable. A status outside 200..599 is no valid answer, so it counts as unreachable.
func FromStatus(code int) Class {
	switch {
	case code >= 200 && code < 300:
		return Parsed
	case code == 429:
		return Unreachable
	case code >= 300 && code < 500:
		return Unavailable
	default:
		return Unreachable
	}
}

// ForResponse turns a robots.txt response into rules: 2xx parses at most maxBytes octets
// of body, the other classes give their allow-all or disallow-all verdict.
func ForResponse(code int, body []byte, maxBytes int) *Rules {
	switch FromStatus(code) {
	case Parsed:
		return Parse(body, maxBytes)
	case Unavailable:
		return AllowAll()
	default:
		return DisallowAll()
	}
}
