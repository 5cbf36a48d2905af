package robots

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Entry is one origin's robots.txt verdict as the fetchers share it: the outcome of the
// fetch and the rules reduced to the crawler's own agent.
type Entry struct {
	Class     Class
	Status    int       // final HTTP status; 0 when no response came
	FetchedAt time.Time // when the fetch started
	Agent     string    // product token the rules were reduced for
	Error     string    // why there was no response, for an unreachable entry
	Rules     *Rules
}

// NewEntry builds the entry for a robots.txt response with the given final status and
// body (2xx: at most maxBytes octets parsed). status is the final status after redirects
// were followed; a 3xx means the chain was not resolved (unavailable, allow all).
func NewEntry(agent string, status int, body []byte, maxBytes int, fetchedAt time.Time) *Entry {
	agent = AgentKey(agent)
	return &Entry{
		Class:     FromStatus(status),
		Status:    status,
		FetchedAt: fetchedAt,
		Agent:     agent,
		Rules:     ForResponse(status, body, maxBytes).ForAgent(agent),
	}
}

// UnreachableEntry is the entry for a robots.txt fetch that got no response.
func UnreachableEntry(agent string, cause error, fetchedAt time.Time) *Entry {
	msg := ""
	if cause != nil {
		msg = cause.Error()
	}
	return &Entry{Class: Unreachable, FetchedAt: fetchedAt, Agent: AgentKey(agent), Error: msg, Rules: DisallowAll()}
}

// Allowed reports whether the entry's agent may fetch pathAndQuery.
func (e *Entry) Allowed(pathAndQuery string) bool { return e.Rules.Allowed(e.Agent, pathAndQuery) }

// CrawlDelay is the entry's agent's Crawl-delay, or 0.
func (e *Entry) CrawlDelay() time.Duration { return e.Rules.CrawlDelay(e.Agent) }

// encodingVersion heads every encoded entry; a reader treats any other header as a miss,
// so changing the format only costs one refetch per origin.
const encodingVersion = "trawl-robots/1"

var errEncoding = errors.New("robots: bad cache encoding")

// MarshalBinary encodes the entry as short text lines ("key value"), readable with
// redis-cli. Patterns are stored normalised, so they hold no white space.
func (e *Entry) MarshalBinary() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nagent %s\nclass %d\nstatus %d\nfetched %d\n", encodingVersion, e.Agent, e.Class, e.Status, e.FetchedAt.UnixMilli())
	if e.Error != "" {
		fmt.Fprintf(&b, "error %s\n", oneLine(e.Error))
	}
	if e.Rules == nil {
		return b.Bytes(), nil
	}
	for _, s := range e.Rules.sitemaps {
		fmt.Fprintf(&b, "sitemap %s\n", oneLine(s))
	}
	if g := e.Rules.selected(e.Agent); g != nil && e.Rules.mode == modeRules {
		if g.hasDelay {
			fmt.Fprintf(&b, "delay %d\n", g.delay.Nanoseconds())
		}
		for _, r := range g.rules {
			if r.allow {
				fmt.Fprintf(&b, "allow %s\n", r.pattern)
			} else {
				fmt.Fprintf(&b, "disallow %s\n", r.pattern)
			}
		}
	}
	return b.Bytes(), nil
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

// UnmarshalEntry decodes what MarshalBinary wrote. Errors wrap errEncoding.
func UnmarshalEntry(data []byte) (*Entry, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), len(data)+1)
	if !sc.Scan() || sc.Text() != encodingVersion {
		return nil, fmt.Errorf("%w: missing %s header", errEncoding, encodingVersion)
	}
	e := &Entry{}
	g := &group{}
	var sitemaps []string
	var seen struct{ agent, class bool }
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), " ")
		var err error
		switch key {
		case "agent":
			e.Agent, seen.agent = val, true
		case "class":
			var n uint64
			n, err = strconv.ParseUint(val, 10, 8)
			e.Class, seen.class = Class(n), true
		case "status":
			e.Status, err = strconv.Atoi(val)
		case "fetched":
			var ms int64
			ms, err = strconv.ParseInt(val, 10, 64)
			e.FetchedAt = time.UnixMilli(ms)
		case "error":
			e.Error = val
		case "sitemap":
			sitemaps = append(sitemaps, val)
		case "delay":
			var ns int64
			ns, err = strconv.ParseInt(val, 10, 64)
			g.delay, g.hasDelay = time.Duration(ns), true
		case "allow", "disallow":
			if val == "" {
				err = errors.New("empty pattern")
				break
			}
			g.rules = append(g.rules, newRule(val, key == "allow"))
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errEncoding, key, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", errEncoding, err)
	}
	if !seen.agent || !seen.class {
		return nil, fmt.Errorf("%w: agent or class missing", errEncoding)
	}
	switch e.Class {
	case Parsed:
		sortRules(g.rules)
		e.Rules = &Rules{groups: map[string]*group{e.Agent: g}, sitemaps: sitemaps}
	case Unavailable:
		e.Rules = &Rules{mode: modeAllowAll, sitemaps: sitemaps}
	case Unreachable:
		e.Rules = &Rules{mode: modeDisallowAll}
	default:
		return nil, fmt.Errorf("%w: class %d", errEncoding, e.Class)
	}
	return e, nil
}
