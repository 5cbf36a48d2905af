// Package report builds the reports an archivist reads after a crawl, in the form and
// under the names Heritrix writes them: seeds-report.txt, hosts-report.txt,
// mimetype-report.txt, responsecode-report.txt, and crawl-report.txt, plus
// skipped-report.txt (URLs not archived, with their reason). What was archived comes from
// the CDXJ indexes beside the WARC files (one line per capture); what was not, from the
// frontier's counters, its error log and the schedulers' skip log (CRAWL_SKIPPED); the bytes deduplication saved from the archiver's
// counters. It reads; it changes nothing.
package report

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/trawl/trawl/shared/cdxj"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/urlnorm"
)

// Crawl is what the crawl's Redis says: nil parts were not read.
type Crawl struct {
	Prefix   string
	Counters *frontierkeys.Counters // summed over the shards
	Errors   []frontierkeys.ErrorRecord
	// Skipped is the skip log, oldest first: every URL a scheduler ended unarchived with
	// its reason (nil: not read, the report lists only the error log's failures).
	Skipped []crawlmsg.SkippedURL
	// Revisits and SavedBytes are the archiver's dedup counters (digestindex.Stats).
	Revisits, SavedBytes int64
}

type tally struct{ urls, bytes int64 }

type host struct {
	all, novel, dupHash, notModified tally
	errors                           int64
}

type capture struct {
	status int
	date   time.Time
}

// Builder accumulates captures; Files renders the reports.
type Builder struct {
	Crawl    Crawl
	Seeds    []string // as given to trawlctl seed; nil: no seeds report
	Indexes  int      // CDXJ files read
	captures tally
	hosts    map[string]*host
	mimes    map[string]*tally
	codes    map[int]int64
	byURL    map[string]capture // the last capture of each URL (for the seeds report)
	first    time.Time
	last     time.Time
}

// New is an empty Builder.
func New(c Crawl) *Builder {
	return &Builder{Crawl: c, hosts: map[string]*host{}, mimes: map[string]*tally{}, codes: map[int]int64{}, byURL: map[string]capture{}}
}

// Add counts one capture of an index.
func (b *Builder) Add(l cdxj.Line) {
	if strings.HasPrefix(l.URL, "urn:") {
		return // a rendered page's DOM or other resource record: not a fetch
	}
	h := b.hosts[urlnorm.HostOf(l.URL)]
	if h == nil {
		h = &host{}
		b.hosts[urlnorm.HostOf(l.URL)] = h
	}
	add := func(t *tally) { t.urls++; t.bytes += l.Length }
	add(&b.captures)
	add(&h.all)
	switch {
	case l.Mime == "warc/revisit" && l.Status == 304:
		add(&h.notModified)
	case l.Mime == "warc/revisit":
		add(&h.dupHash)
	default:
		add(&h.novel)
	}
	if l.Status >= 400 || l.Status == 0 {
		h.errors++
	}
	m := l.Mime
	if m == "" {
		m = "unk"
	}
	if b.mimes[m] == nil {
		b.mimes[m] = &tally{}
	}
	add(b.mimes[m])
	b.codes[l.Status]++
	if c, ok := b.byURL[l.URL]; !ok || !l.Date.Before(c.date) {
		b.byURL[l.URL] = capture{l.Status, l.Date}
	}
	if b.first.IsZero() || l.Date.Before(b.first) {
		b.first = l.Date
	}
	if l.Date.After(b.last) {
		b.last = l.Date
	}
}

// ReadDir adds every sealed CDXJ index of dir (the archiver writes one beside each WARC
// file).
func (b *Builder) ReadDir(ctx context.Context, dir string, bad func(file string, line int, err error)) error {
	names, err := filepath.Glob(filepath.Join(dir, "*.cdxj"))
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			return err
		}
		err = cdxj.Each(ctx, f, func(l cdxj.Line) error { b.Add(l); return nil },
			func(line int, err error) { bad(n, line, err) })
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		b.Indexes++
	}
	return nil
}

// File is one report.
type File struct {
	Name string
	Body string
}

// Files renders every report; the seeds report only when seeds were given.
func (b *Builder) Files() []File {
	out := []File{{"crawl-report.txt", b.crawlReport()}}
	if b.Seeds != nil {
		out = append(out, File{"seeds-report.txt", b.seedsReport()})
	}
	return append(out,
		File{"hosts-report.txt", b.hostsReport()},
		File{"mimetype-report.txt", b.mimeReport()},
		File{"responsecode-report.txt", b.codeReport()},
		File{"skipped-report.txt", b.skippedReport()},
	)
}

// Write writes every report into dir, made if missing (each to a temporary name, then
// renamed, so a reader never sees half a report).
func (b *Builder) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	for _, f := range b.Files() {
		tmp := filepath.Join(dir, "."+f.Name+".tmp")
		if err := os.WriteFile(tmp, []byte(f.Body), 0o644); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.Name)); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	return nil
}

func (b *Builder) crawlReport() string {
	var w strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&w, "%s: %v\n", k, v) }
	line("Crawl Name", b.Crawl.Prefix)
	if !b.first.IsZero() {
		line("First Capture", b.first.Format(time.RFC3339))
		line("Last Capture", b.last.Format(time.RFC3339))
	}
	if b.Seeds != nil {
		crawled := 0
		for _, s := range b.Seeds {
			if _, ok := b.byURL[s]; ok {
				crawled++
			}
		}
		line("Total Seeds Crawled", crawled)
		line("Total Seeds not Crawled", len(b.Seeds)-crawled)
	}
	line("Total Hosts Crawled", len(b.hosts))
	line("WARC Indexes Read", b.Indexes)
	line("Captures Archived", b.captures.urls)
	line("Captures Archived Bytes", b.captures.bytes)
	var dup, nm tally
	for _, h := range b.hosts {
		dup.urls, dup.bytes = dup.urls+h.dupHash.urls, dup.bytes+h.dupHash.bytes
		nm.urls += h.notModified.urls
	}
	line("Duplicate-by-hash Captures", dup.urls)
	line("Not-modified Captures", nm.urls)
	line("Duplicate-by-hash Revisits Written", b.Crawl.Revisits)
	line("Duplicate-by-hash Payload Bytes Saved", b.Crawl.SavedBytes)
	if c := b.Crawl.Counters; c != nil {
		line("URIs Accepted", c.Accepted)
		line("URIs Fetched", c.Fetched)
		line("URIs Failed", c.Failed)
		line("URIs Disallowed by robots.txt", c.Disallowed)
		line("URIs Out of Scope", c.OutOfScope)
		line("URIs Over Budget", c.OverBudget)
		line("URIs Queued", c.Queued)
		line("URIs Parked", c.Parked)
		line("Hosts Retired", c.Retired)
	}
	return w.String()
}

// seedsReport: "[code] [status] [seed] [redirect]" as Heritrix writes it; code is the
// last capture's status (0 when none), status CRAWLED, FAILED (with the failure's kind,
// from the error log) or NOTCRAWLED. Redirects are not kept in the indexes: "-".
func (b *Builder) seedsReport() string {
	failed := map[string]frontierkeys.ErrorRecord{}
	for _, e := range b.Crawl.Errors {
		if e.Result != "retry" {
			if _, ok := failed[e.URL]; !ok {
				failed[e.URL] = e // newest first
			}
		}
	}
	var w strings.Builder
	w.WriteString("[code] [status] [seed] [redirect]\n")
	for _, s := range b.Seeds {
		switch c, ok := b.byURL[s]; {
		case ok:
			fmt.Fprintf(&w, "%d CRAWLED %s -\n", c.status, s)
		case failed[s].URL != "":
			fmt.Fprintf(&w, "%d FAILED(%s) %s -\n", failed[s].Status, failed[s].Kind, s)
		default:
			fmt.Fprintf(&w, "0 NOTCRAWLED %s -\n", s)
		}
	}
	return w.String()
}

// hostsReport: Heritrix's columns Trawl has, most URLs first; bytes are the octets of
// the records in the WARC files (compressed).
func (b *Builder) hostsReport() string {
	names := make([]string, 0, len(b.hosts))
	for n := range b.hosts {
		names = append(names, n)
	}
	failed := map[string]int64{}
	for _, e := range b.Crawl.Errors {
		if e.Result != "retry" {
			failed[e.Host]++
		}
	}
	sort.Slice(names, func(i, j int) bool {
		a, c := b.hosts[names[i]], b.hosts[names[j]]
		if a.all.urls != c.all.urls {
			return a.all.urls > c.all.urls
		}
		return names[i] < names[j]
	})
	var w strings.Builder
	w.WriteString("[#urls] [#bytes] [host] [#novel-urls] [#novel-bytes] [#dup-by-hash-urls] [#dup-by-hash-bytes] [#not-modified-urls] [#not-modified-bytes] [#errors]\n")
	for _, n := range names {
		h := b.hosts[n]
		fmt.Fprintf(&w, "%d %d %s %d %d %d %d %d %d %d\n", h.all.urls, h.all.bytes, n, h.novel.urls, h.novel.bytes,
			h.dupHash.urls, h.dupHash.bytes, h.notModified.urls, h.notModified.bytes, h.errors+failed[n])
	}
	return w.String()
}

func (b *Builder) mimeReport() string {
	names := make([]string, 0, len(b.mimes))
	for n := range b.mimes {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if b.mimes[names[i]].urls != b.mimes[names[j]].urls {
			return b.mimes[names[i]].urls > b.mimes[names[j]].urls
		}
		return names[i] < names[j]
	})
	var w strings.Builder
	w.WriteString("[#urls] [#bytes] [mime-types]\n")
	for _, n := range names {
		fmt.Fprintf(&w, "%d %d %s\n", b.mimes[n].urls, b.mimes[n].bytes, n)
	}
	return w.String()
}

func (b *Builder) codeReport() string {
	codes := make([]int, 0, len(b.codes))
	for c := range b.codes {
		codes = append(codes, c)
	}
	sort.Slice(codes, func(i, j int) bool {
		if b.codes[codes[i]] != b.codes[codes[j]] {
			return b.codes[codes[i]] > b.codes[codes[j]]
		}
		return codes[i] < codes[j]
	})
	var w strings.Builder
	w.WriteString("[#urls] [rescode]\n")
	for _, c := range codes {
		fmt.Fprintf(&w, "%d %d\n", b.codes[c], c)
	}
	return w.String()
}

// skippedReport: the URLs not archived, by reason, then one line per URL with its reason
// and code, as Heritrix's crawl.log gives each URI's disposition: the HTTP status of a
// failure that had one, else Heritrix's status code for the reason (HeritrixCode). The
// skip log lists every URL a scheduler ended so, once each; the error log adds the
// failures it does not hold (those of a reaped lease, the queued URLs of a retired host's
// last failure) and its detail where the skip log has none; over-budget URLs dropped from
// a queue when their budget ran out are on the skip log too (the scheduler's skip spool).
func (b *Builder) skippedReport() string {
	var w strings.Builder
	w.WriteString("[#urls] [reason]\n")
	if c := b.Crawl.Counters; c != nil {
		fmt.Fprintf(&w, "%d failed\n%d robots-disallowed\n%d out-of-scope\n%d over-budget\n", c.Failed, c.Disallowed, c.OutOfScope, c.OverBudget)
	}
	w.WriteString("\n[reason] [code] [url] [detail]\n")
	logged := make(map[string]bool, len(b.Crawl.Skipped))
	detail := map[string]frontierkeys.ErrorRecord{}
	for _, e := range b.Crawl.Errors {
		if e.Result == "retry" {
			continue
		}
		if _, ok := detail[e.URL]; !ok {
			detail[e.URL] = e // newest first
		}
	}
	for _, s := range b.Crawl.Skipped {
		if logged[s.URL] {
			continue
		}
		logged[s.URL] = true
		status, msg := s.Status, s.Error
		if e, ok := detail[s.URL]; ok && strings.HasPrefix(s.Reason, "failed") {
			if msg == "" {
				msg = e.Error
			}
			if status == 0 {
				status = e.Status
			}
		}
		if status == 0 {
			status = HeritrixCode(s.Reason)
		}
		fmt.Fprintf(&w, "%s %d %s %s\n", s.Reason, status, s.URL, orDash(oneLine(msg)))
	}
	for _, e := range b.Crawl.Errors {
		if e.Result == "retry" || logged[e.URL] {
			continue
		}
		logged[e.URL] = true
		fmt.Fprintf(&w, "%s %d %s %s\n", crawlmsg.FailedReason(crawlmsg.OutcomeKind(e.Kind)), e.Status, e.URL, orDash(oneLine(e.Error)))
	}
	return w.String()
}

// HeritrixCode is the status Heritrix's crawl.log gives a URI that ended for reason without
// an HTTP status (org.archive.modules.fetcher.FetchStatusCodes), 0 (S_UNATTEMPTED) for a
// reason it has no code of, such as a failure without a response.
func HeritrixCode(reason string) int {
	switch reason {
	case crawlmsg.ReasonDisallowed:
		return -9998 // S_ROBOTS_PRECLUDED
	case crawlmsg.ReasonOutOfScope:
		return -5000 // S_OUT_OF_SCOPE
	case crawlmsg.ReasonTooDeep:
		return -4001 // S_TOO_MANY_LINK_HOPS
	case crawlmsg.ReasonOverBudget:
		return -5003 // S_BLOCKED_BY_QUOTA
	}
	return 0
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// WriteCrawlReport writes the crawl report alone, for the terminal.
func (b *Builder) WriteCrawlReport(w io.Writer) error {
	_, err := io.WriteString(w, b.crawlReport())
	return err
}
