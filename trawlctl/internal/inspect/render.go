package inspect

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteText prints the report for people, one section per line group.
func WriteText(w io.Writer, r *Report, now time.Time) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	when := func(t time.Time) string {
		d := t.Sub(now).Round(time.Millisecond)
		switch {
		case d > 0:
			return fmt.Sprintf("%s (in %s)", t.Format(time.DateTime), d)
		case d < 0:
			return fmt.Sprintf("%s (%s ago)", t.Format(time.DateTime), -d)
		}
		return t.Format(time.DateTime) + " (now)"
	}

	p("url        %s", r.URL)
	if r.Input != r.URL {
		p("           (normalised from %s)", r.Input)
	}
	p("host       %s  shard %d  origin %s", r.Host, r.Shard, r.Origin)

	p("seen       %s: %s", r.Seen.State, r.Seen.Detail)

	p("scope      %s", r.Scope.Verdict)

	rr := r.Robots
	if !rr.Cached {
		p("robots     %s (%s)", rr.Note, rr.Key)
	} else {
		verdict := "?"
		if rr.Allowed != nil {
			verdict = map[bool]string{true: "allowed", false: "disallowed"}[*rr.Allowed]
		}
		line := fmt.Sprintf("robots     %s for agent %s: %s", verdict, rr.Agent, rr.Reason)
		if rr.Rule != "" {
			line += " (" + rr.Rule + ")"
		}
		p("%s", line)
		extra := fmt.Sprintf("           robots.txt %s, status %d", rr.Class, rr.Status)
		if rr.FetchedAt != nil {
			extra += ", fetched " + when(*rr.FetchedAt)
		}
		if rr.ExpiresIn > 0 {
			extra += fmt.Sprintf(", cached %s more", rr.ExpiresIn.Round(time.Second))
		}
		if rr.CrawlDelay > 0 {
			extra += fmt.Sprintf(", Crawl-delay %s", rr.CrawlDelay)
		}
		if rr.Error != "" {
			extra += ", error: " + rr.Error
		}
		p("%s", extra)
		if rr.Note != "" {
			p("           note: %s", rr.Note)
		}
	}

	f := r.Frontier
	p("frontier   %s", f.Summary)
	var hs []string
	if f.Paused {
		hs = append(hs, "shard PAUSED")
	}
	if f.HostActive {
		hs = append(hs, "host holds a back queue")
	} else {
		hs = append(hs, "host holds no back queue")
	}
	switch {
	case f.HeapNext != nil && f.Ready:
		hs = append(hs, "due now (in the heap since "+when(*f.HeapNext)+")")
	case f.HeapNext != nil:
		hs = append(hs, "next fetch "+when(*f.HeapNext))
	}
	if f.LeaseToken != "" {
		l := "task out, lease " + f.LeaseToken
		if f.LeaseDeadline != nil {
			l += " until " + when(*f.LeaseDeadline)
		}
		if f.LeaseURL != "" && !f.InFlight {
			l += " for " + f.LeaseURL
		}
		hs = append(hs, l)
	}
	p("           %s", strings.Join(hs, "; "))
	qs := []string{queueLine(f.BackQueue)}
	for _, q := range f.FrontQueues {
		if q.Len > 0 {
			qs = append(qs, queueLine(q))
		}
	}
	p("           queues: %s", strings.Join(qs, ", "))

	h := r.HostState
	if !h.Known {
		p("politeness no host:%s state (host never dispatched on this shard)", r.Host)
	} else {
		var parts []string
		if h.Next != nil {
			parts = append(parts, "next request not before "+when(*h.Next))
		}
		if h.Retired != nil {
			parts = append(parts, "RETIRED "+when(*h.Retired)+" (its URLs end as failed)")
		}
		parts = append(parts, fmt.Sprintf("crawl-delay %s", h.CrawlDelay), fmt.Sprintf("error streak %d", h.ErrStreak), fmt.Sprintf("failures %d", h.Fails))
		if h.Pages != nil {
			parts = append(parts, fmt.Sprintf("pages %d", *h.Pages))
		}
		for _, k := range sortedKeys(h.Other) {
			parts = append(parts, k+"="+h.Other[k])
		}
		if h.ExpiresIn > 0 {
			parts = append(parts, fmt.Sprintf("state expires in %s", h.ExpiresIn.Round(time.Second)))
		}
		p("politeness %s", strings.Join(parts, "; "))
		if sv := h.Server; sv != nil {
			p("    server %s", serverLine(sv, when))
		}
	}
	if e := r.TaskError; e != nil {
		p("task error %s (%d tries since %s) from the fetcher holding the task: %s", when(e.Last), e.Tries, when(e.First), e.Error)
	}
	if o := r.Outcome; o != nil {
		p("outcome    %s %s: %s (%s, status %d)", strings.ToUpper(o.Result), when(o.At), o.Error, o.Kind, o.Status)
	} else if r.OutcomeNote != "" {
		p("outcome    %s", r.OutcomeNote)
	}
	writePolicy(p, r.Policy)
	p("last fetch %s", r.LastFetch)
	switch h := r.Recrawl; {
	case h != nil && h.Where != "":
		st := h.State
		at := map[string]string{"scheduled": "next fetch due", "due": "DUE since"}[h.Where]
		p("recrawl    %s %s; interval %s; last fetch %s; %d fetches, %d changed, %d answered 304, %d 404/410 in a row",
			at, when(time.UnixMilli(st.Due)), time.Duration(st.Interval)*time.Millisecond, when(time.UnixMilli(st.LastFetch)),
			st.Fetches, st.Changes, st.NotModified, st.Gone)
		p("    validators ETag %q Last-Modified %q; digest %.16s… simhash %s", st.ETag, st.LastModified, st.Digest, st.SimHash)
	case r.RecrawlNote != "":
		p("recrawl    %s", r.RecrawlNote)
	}
	if rr := r.Render; rr != nil {
		verb := map[bool]string{true: "RENDERED", false: "not rendered"}
		if k := rr.Kept; k != nil {
			p("render     %s (%s) %s: %s", verb[k.Render], k.Reason, when(time.UnixMilli(k.At)), k.Detail)
		} else {
			p("render     %s (%s): %s", verb[rr.Render], rr.Reason, rr.Note)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func queueLine(q QueueHit) string {
	switch {
	case q.Found:
		return fmt.Sprintf("%s len %d: found at %d (depth %d, attempt %d)", q.Queue, q.Len, q.Index, q.Depth, q.Attempt)
	case q.Complete():
		return fmt.Sprintf("%s len %d: not in it", q.Queue, q.Len)
	}
	return fmt.Sprintf("%s len %d: not in the first %d", q.Queue, q.Len, q.Scanned)
}

// serverLine is the state of the address a host was last requested at.
func serverLine(sv *ServerReport, when func(time.Time) string) string {
	parts := []string{"last requested at " + sv.Addr}
	switch {
	case !sv.Known:
		parts = append(parts, "no address state (per-server politeness off, or idle): free")
	case sv.Busy:
		parts = append(parts, "BUSY: a request is in flight, its claim ends "+when(*sv.InFlightUntil))
	default:
		parts = append(parts, "idle")
	}
	if sv.Known && sv.Next != nil {
		parts = append(parts, "next request to it not before "+when(*sv.Next))
	}
	if sv.LastHost != "" {
		parts = append(parts, fmt.Sprintf("last host %s (%s)", sv.LastHost, sv.LastResponse))
	}
	return strings.Join(parts, "; ")
}

// writePolicy prints the URL's site policy: one line per limit, its value and what
// decided it.
func writePolicy(p func(string, ...any), pr PolicyReport) {
	head := fmt.Sprintf("rules at version %d (%d rules)", pr.Version, pr.Rules)
	if pr.Note != "" {
		head = "rules unknown: " + pr.Note + "; the process-wide settings are shown"
	}
	if pr.Blocked != "" {
		head += "; BLOCKED by " + pr.Blocked
	}
	p("policy     %s", head)
	if pk := pr.Parked; pk != nil {
		by := ""
		if pk.Rule != "" {
			by = " by " + pk.Rule
		}
		p("    PARKED %d URLs of this host (reason %s%s; %d in %s now): they resume when the block is lifted", pk.Entries, orUnknown(pk.Reason), by, pk.Queued, pk.Key)
	}
	if !pr.Admitted && pr.Why != "" {
		p("    scope  refused: %s", pr.Why)
	}
	w := 0
	for _, l := range pr.Limits {
		w = max(w, len(l.Field))
	}
	for _, l := range pr.Limits {
		p("    %-*s %s  ← %s", w, l.Field, l.Value, l.DecidedBy())
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
