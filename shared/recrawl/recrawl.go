// Package recrawl is adaptive recrawling's one rule, used by the parser (which judges each
// fetch and writes the URL's next schedule) and the scheduler (which queues due URLs
// again): the settings (TRAWL_RECRAWL_*), the change verdict, the interval policy, and the
// schedule message kept per URL in CRAWL_RECRAWL. shared/recrawl/README.md ("Recrawl") states
// the design.
package recrawl

import (
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/topology"
)

// Settings are the interval policy and the due intake. The mode itself is
// envconfig.Common.Recrawl, since every service declares the stream it needs.
type Settings struct {
	Min     time.Duration // TRAWL_RECRAWL_MIN: shortest wait between two fetches of a URL
	Max     time.Duration // TRAWL_RECRAWL_MAX: longest
	Default time.Duration // TRAWL_RECRAWL_DEFAULT: the wait after a URL's first fetch
	// NearDistance is TRAWL_RECRAWL_SIMHASH_DISTANCE: a text whose SimHash is at most this
	// many bits from the last one is unchanged (a rotating ad, a date stamp).
	NearDistance int
	// Backlog is TRAWL_RECRAWL_BACKLOG: the most due URLs a scheduler shard holds queued in
	// its frontier; beyond it due URLs wait on disk in CRAWL_RECRAWL.
	Backlog int
	// Share is TRAWL_RECRAWL_SHARE: while the frontier holds Backlog URLs or more, due URLs
	// enter it at most at this fraction of its dispatch rate, so new URLs keep the rest.
	Share float64
}

// Defaults are the documented defaults.
var Defaults = Settings{Min: time.Hour, Max: 30 * 24 * time.Hour, Default: 24 * time.Hour, NearDistance: 3, Backlog: 10000, Share: 0.3}

// Load reads the settings.
func Load(r *envconfig.Reader) Settings {
	d := Defaults
	return Settings{
		Min:          r.Duration("RECRAWL_MIN", d.Min),
		Max:          r.Duration("RECRAWL_MAX", d.Max),
		Default:      r.Duration("RECRAWL_DEFAULT", d.Default),
		NearDistance: r.Int("RECRAWL_SIMHASH_DISTANCE", d.NearDistance),
		Backlog:      r.Int("RECRAWL_BACKLOG", d.Backlog),
		Share:        r.Float("RECRAWL_SHARE", d.Share),
	}
}

// Validate reports every invalid setting. Any positive interval is accepted, so tests and
// small sites can use seconds.
func (s Settings) Validate() error {
	var errs []error
	if s.Min < time.Second {
		errs = append(errs, fmt.Errorf("TRAWL_RECRAWL_MIN=%s: want at least 1s", s.Min))
	}
	if s.Max < s.Min {
		errs = append(errs, fmt.Errorf("TRAWL_RECRAWL_MAX=%s: want at least TRAWL_RECRAWL_MIN (%s)", s.Max, s.Min))
	}
	if s.Default < s.Min || s.Default > s.Max {
		errs = append(errs, fmt.Errorf("TRAWL_RECRAWL_DEFAULT=%s: want between TRAWL_RECRAWL_MIN and TRAWL_RECRAWL_MAX", s.Default))
	}
	if s.NearDistance < 0 || s.NearDistance > 64 {
		errs = append(errs, fmt.Errorf("TRAWL_RECRAWL_SIMHASH_DISTANCE=%d: want 0..64", s.NearDistance))
	}
	if s.Backlog < 1 {
		errs = append(errs, fmt.Errorf("TRAWL_RECRAWL_BACKLOG=%d: want at least 1", s.Backlog))
	}
	if !(s.Share > 0 && s.Share < 1) {
		errs = append(errs, fmt.Errorf("TRAWL_RECRAWL_SHARE=%g: want more than 0 and less than 1", s.Share))
	}
	return errors.Join(errs...)
}

// For is the settings for one URL under its site policy: a rule's recrawl_min and
// recrawl_max replace TRAWL_RECRAWL_MIN and TRAWL_RECRAWL_MAX for the URLs it matches.
// When a rule sets one bound past the other's process-wide value (recrawl_min of a week
// under TRAWL_RECRAWL_MAX of a day), the bound the rule set wins and the other moves to
// it: the operator's word for that site is the more specific. The first interval
// (Default) is kept within the bounds. Without a recrawl rule it is s itself.
func (s Settings) For(r policy.Resolved) Settings {
	if r.RecrawlMin == nil && r.RecrawlMax == nil {
		return s
	}
	if r.RecrawlMin != nil {
		s.Min = time.Duration(*r.RecrawlMin)
		if r.RecrawlMax == nil {
			s.Max = max(s.Max, s.Min)
		}
	}
	if r.RecrawlMax != nil {
		s.Max = time.Duration(*r.RecrawlMax)
		if r.RecrawlMin == nil {
			s.Min = min(s.Min, s.Max)
		}
	}
	// Compile refuses a rule whose min exceeds its max; should one reach here, the max wins
	// rather than an interval that can satisfy neither.
	s.Min = min(s.Min, s.Max)
	s.Default = min(max(s.Default, s.Min), s.Max)
	return s
}

// Verdict is what a fetch found compared with the URL's last one.
type Verdict string

const (
	First       Verdict = "first"        // no earlier fetch to compare with
	Changed     Verdict = "changed"      // the content differs
	Unchanged   Verdict = "unchanged"    // the same text, or a SimHash within NearDistance
	NotModified Verdict = "not-modified" // 304: the server says unchanged, nothing was sent
	Gone        Verdict = "gone"         // 404 or 410
	Other       Verdict = "other"        // any other answer (3xx, 4xx, 5xx): no news of the content
)

// Fetch is what the parser knows of one fetch of a URL.
type Fetch struct {
	Status    int
	Header    http.Header   // response header (validators)
	Digest    string        // text digest, or body digest when there is no text
	SimHash   string        // 16 hex digits; "" when there is no text
	FetchedAt time.Time     // the request's start
	Took      time.Duration // from the request's start to its last body byte
}

// Judge compares f with the URL's last state (nil on a first fetch).
func (s Settings) Judge(prev *crawlmsg.Recrawl, f Fetch) Verdict {
	switch {
	case f.Status == http.StatusNotModified:
		return NotModified
	case f.Status == http.StatusNotFound || f.Status == http.StatusGone:
		return Gone
	case f.Status < 200 || f.Status > 299:
		return Other
	case prev == nil || prev.Digest == "":
		return First
	case prev.Digest == f.Digest:
		return Unchanged
	}
	if d, ok := distance(prev.SimHash, f.SimHash); ok && d <= s.NearDistance {
		return Unchanged
	}
	return Changed
}

func distance(a, b string) (int, bool) {
	x, err1 := strconv.ParseUint(a, 16, 64)
	y, err2 := strconv.ParseUint(b, 16, 64)
	if a == "" || b == "" || err1 != nil || err2 != nil {
		return 0, false
	}
	return bits.OnesCount64(x ^ y), true
}

// GoneLimit is how many 404/410 answers in a row make a URL forgotten.
const GoneLimit = 2

// Next is the URL's state after a fetch judged v: the interval shrinks on a change (÷2)
// and grows while nothing changes (×1.5), within Min and Max; the validators and the
// fingerprint are the last 2xx's. keep is false when the URL is to be forgotten (GoneLimit
// 404/410 answers in a row): no schedule is written.
func (s Settings) Next(prev *crawlmsg.Recrawl, v Verdict, f Fetch) (st crawlmsg.Recrawl, keep bool) {
	if prev != nil {
		st = *prev
	}
	iv := time.Duration(st.Interval) * time.Millisecond
	if prev == nil || iv <= 0 {
		iv = s.Default
	}
	switch v {
	case Changed:
		iv /= 2
	case Unchanged, NotModified:
		iv = iv * 3 / 2
	}
	iv = min(max(iv, s.Min), s.Max)

	st.Fetches++
	switch v {
	case Changed:
		st.Changes++
	case NotModified:
		st.NotModified++
	}
	if v == Gone {
		st.Gone++
	} else {
		st.Gone = 0
	}
	switch v {
	case First, Changed, Unchanged:
		st.Digest, st.SimHash = f.Digest, f.SimHash
		st.ETag, st.LastModified = f.Header.Get("ETag"), f.Header.Get("Last-Modified")
	case NotModified:
		// A 304 may send fresher validators (RFC 9110 15.4.5); the content is the last one.
		if e := f.Header.Get("ETag"); e != "" {
			st.ETag = e
		}
		if lm := f.Header.Get("Last-Modified"); lm != "" {
			st.LastModified = lm
		}
	}
	st.Interval = iv.Milliseconds()
	st.LastFetch = f.FetchedAt.UnixMilli()
	// From the fetch's end: the request reached the server between its start and then
	// (connecting and sending took what the machine's load made them), so the next one,
	// no sooner than an interval after the end, reaches it at least that much later.
	st.Due = f.FetchedAt.Add(f.Took + iv).UnixMilli()
	return st, st.Gone < GoneLimit
}

// Postpone is the state of a URL that failed without a request (its host retired, its
// lease expired past the retries): nothing was learnt of it, so its counters, validators
// and last fetch stay, and it is due again one interval (within Min and Max) after at.
func (s Settings) Postpone(prev crawlmsg.Recrawl, at time.Time) crawlmsg.Recrawl {
	iv := time.Duration(prev.Interval) * time.Millisecond
	if iv <= 0 {
		iv = s.Default
	}
	iv = min(max(iv, s.Min), s.Max)
	prev.Interval = iv.Milliseconds()
	prev.Due = at.Add(iv).UnixMilli()
	return prev
}

// BringForward is when a URL a sitemap says changed at lastmod (unix seconds), seen at
// now, is due: at once, but never before TRAWL_RECRAWL_MIN after its last fetch. ok is
// false when its schedule is to be left alone: it has none waiting (h.Where is not
// "scheduled"), its last fetch is later than the change, or it is due sooner anyway.
func (s Settings) BringForward(h History, lastmod int64, now time.Time) (due time.Time, ok bool) {
	if h.Where != "scheduled" || h.State.LastFetch >= lastmod*1000 {
		return time.Time{}, false
	}
	due = now
	if floor := time.UnixMilli(h.State.LastFetch).Add(s.Min); due.Before(floor) {
		due = floor
	}
	if !due.Before(time.UnixMilli(h.State.Due)) {
		return time.Time{}, false
	}
	return due, true
}

// Schedule is the message that keeps e until e.State.Due: published on the URL's schedule
// subject, it replaces the URL's earlier schedule, and when due the server moves it to the
// URL's due subject, where the shard's scheduler takes it. msgID makes a republish of the
// same schedule (a redelivered page) harmless.
func Schedule(shard int, e *crawlmsg.RecrawlEntry, msgID string) (*nats.Msg, error) {
	data, err := crawlmsg.EncodeRecrawl(e)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(topology.ScheduleSubject(shard, e.URL))
	m.Data = data
	// The server fires a schedule at or after its time, to the nanosecond it is given.
	m.Header.Set(jetstream.ScheduleHeader, "@at "+time.UnixMilli(e.State.Due).UTC().Format(time.RFC3339Nano))
	m.Header.Set(jetstream.ScheduleTargetHeader, topology.DueSubject(shard, e.URL))
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	return m, nil
}
