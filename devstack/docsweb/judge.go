package docsweb

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/devstack/warccheck"
)

// RobotsPath is where every site serves its robots.txt.
const RobotsPath = "/robots.txt"

// Rules are what the crawl promised.
type Rules struct {
	MinDelay time.Duration // TRAWL_MIN_DELAY: the least gap between two requests to a host
	// Tolerance is taken off MinDelay in the gap check: nginx logs in milliseconds, from a
	// clock it reads once per event-loop turn, so a gap it logs may be a few ms short of
	// the one the crawler kept.
	Tolerance time.Duration
}

// Judge checks a crawl of the sites from nginx's access log and returns one line per
// problem, sorted; none means the crawl was right:
//   - only the sites' hosts were asked, each robots.txt once;
//   - no URL was requested twice;
//   - every page of Expected was fetched, and answered 200;
//   - nothing a robots.txt disallows was requested;
//   - per host, no two requests overlapped and none started less than MinDelay (less
//     Tolerance) after the one before ended.
func Judge(entries []Entry, sites []Site, r Rules) ([]string, error) {
	var problems []string
	bySite := map[string]Site{}
	for _, s := range sites {
		bySite[s.Host()] = s
	}
	count := map[string][]Entry{}
	robots := map[string]int{}
	for _, e := range entries {
		s, ok := bySite[e.Host]
		if !ok {
			problems = append(problems, fmt.Sprintf("request for a host not served: %s %s (status %d)", e.Host, e.URI, e.Status))
			continue
		}
		if e.URI == RobotsPath {
			robots[s.Name]++
			continue
		}
		count[e.Key()] = append(count[e.Key()], e)
	}
	for _, s := range sites {
		if n := robots[s.Name]; n != 1 {
			problems = append(problems, fmt.Sprintf("robots.txt of %s requested %d times, want once", s.Host(), n))
		}
	}
	for k, es := range count {
		if len(es) > 1 {
			var when []string
			for _, e := range es {
				when = append(when, fmt.Sprintf("%s %d", e.End.Format(stamp), e.Status))
			}
			problems = append(problems, fmt.Sprintf("fetched %d times, want once: %s (%s)", len(es), k, strings.Join(when, ", ")))
		}
	}
	for _, s := range sites {
		deny, err := s.Disallowed()
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Host == s.Host() && disallowed(deny, e.URI) {
				problems = append(problems, fmt.Sprintf("robots.txt disallows it, yet requested: %s%s", e.Host, e.URI))
			}
		}
		pages, err := Expected(s)
		if err != nil {
			return nil, err
		}
		for _, p := range pages {
			es := count[s.Host()+p.Path]
			switch {
			case len(es) == 0 && p.From == "":
				problems = append(problems, fmt.Sprintf("never fetched: %s%s, the seed", s.Host(), p.Path))
			case len(es) == 0:
				problems = append(problems, fmt.Sprintf("never fetched: %s%s, linked from %s", s.Host(), p.Path, p.From))
			case es[0].Status != http.StatusOK:
				problems = append(problems, fmt.Sprintf("answered %d, want 200: %s%s", es[0].Status, s.Host(), p.Path))
			}
		}
	}
	reqs := Requests(entries)
	for _, v := range synthweb.Overlaps(reqs) {
		problems = append(problems, "politeness: overlapping requests: "+v.String())
	}
	for _, v := range synthweb.Gaps(reqs, func(string) time.Duration { return r.MinDelay - r.Tolerance }) {
		problems = append(problems, "politeness: requests too close: "+v.String())
	}
	sort.Strings(problems)
	return slices.Compact(problems), nil
}

const stamp = "15:04:05.000"

// JudgeArchive checks the archive against nginx's log: every response nginx gave, but
// robots.txt (the fetcher's own), is one capture with the status nginx logged; every 200
// for a file holds the file's octets once its content coding is undone; and nothing else
// is archived. a is what warccheck read, so every record already parsed and verified.
func JudgeArchive(entries []Entry, sites []Site, a *warccheck.Archive) []string {
	var problems []string
	roots := map[string]string{}
	for _, s := range sites {
		roots[s.Host()] = s.Root
	}
	captures := map[string][]*warccheck.Record{}
	for _, c := range a.Captures() {
		k, err := captureKey(c.Get("WARC-Target-URI"))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s@%d: WARC-Target-URI %q: %v", c.File, c.Offset, c.Get("WARC-Target-URI"), err))
			continue
		}
		captures[k] = append(captures[k], c)
	}
	served := map[string][]Entry{}
	for _, e := range entries {
		if e.URI == RobotsPath || roots[e.Host] == "" {
			continue
		}
		served[e.Key()] = append(served[e.Key()], e)
	}
	for _, k := range slices.Sorted(maps.Keys(served)) {
		es, cs := served[k], captures[k]
		if len(cs) != len(es) {
			problems = append(problems, fmt.Sprintf("%s: %d capture(s) of %d response(s) nginx gave, want one each", k, len(cs), len(es)))
			continue
		}
		if len(cs) != 1 {
			continue // told apart by date only; the log check reports the second fetch
		}
		c, e := cs[0], es[0]
		resp, err := c.Response()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		if resp.StatusCode != e.Status {
			problems = append(problems, fmt.Sprintf("%s: archived status %d, nginx logged %d", k, resp.StatusCode, e.Status))
			continue
		}
		if e.Status != http.StatusOK || c.Get("WARC-Type") != "response" {
			continue
		}
		file := filepath.Join(roots[e.Host], filepath.FromSlash(e.Path()))
		if st, err := os.Stat(file); err != nil || !st.Mode().IsRegular() {
			continue // a directory's index page: nginx's name for it is not the URL's
		}
		want, err := os.ReadFile(file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		_, payload, err := c.HTTP()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		if enc := resp.Header.Get("Content-Encoding"); !strings.EqualFold(enc, e.Encoding) {
			problems = append(problems, fmt.Sprintf("%s: archived Content-Encoding %q, nginx sent %q", k, enc, e.Encoding))
			continue
		}
		got, err := decode(resp.Header.Get("Content-Encoding"), payload)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: archived payload (%d octets, %s): %v", k, len(payload), cmp.Or(e.Encoding, "identity"), err))
			continue
		}
		if !bytes.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("%s: archived payload decodes to %d octets, the file %s has %d", k, len(got), file, len(want)))
		}
	}
	for k, cs := range captures {
		if _, ok := served[k]; !ok {
			problems = append(problems, fmt.Sprintf("%s: %d capture(s), nginx never served it", k, len(cs)))
		}
	}
	sort.Strings(problems)
	return problems
}

// captureKey is Entry.Key for a captured URL.
func captureKey(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	k := u.Hostname() + u.Path
	if k == u.Hostname() {
		k += "/"
	}
	if u.RawQuery != "" {
		k += "?" + u.RawQuery
	}
	return k, nil
}

func decode(encoding string, b []byte) ([]byte, error) {
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
		return b, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		r = zr
	case "deflate":
		zr, err := zlib.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		r = zr
	default:
		return nil, fmt.Errorf("content coding %q not decoded by the judge", encoding)
	}
	return io.ReadAll(r)
}
