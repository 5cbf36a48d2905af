package progress

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/trawl/trawl/shared/topology"
)

// WriteText prints the snapshot for people.
func WriteText(w io.Writer, s *Snapshot) error {
	var b strings.Builder
	state := "running"
	if s.Paused {
		var ps []string
		for _, sh := range s.Shards {
			if sh.Paused {
				ps = append(ps, fmt.Sprint(sh.Shard))
			}
		}
		state = "PAUSED (shards " + strings.Join(ps, ",") + ")"
		if len(ps) == len(s.Shards) {
			state = "PAUSED"
		}
	}
	fmt.Fprintf(&b, "trawl status  %s  prefix=%s shards=%d  %s\n", s.At.Format(time.DateTime), s.Prefix, len(s.Shards), state)
	qs := make([]string, len(s.Front))
	for p, n := range s.Front {
		qs[p] = fmt.Sprintf("p%d=%d", p, n)
	}
	fmt.Fprintf(&b, "frontier   %d URLs in front queues: %s\n", s.Queued, strings.Join(qs, " "))
	fmt.Fprintf(&b, "hosts      active=%d  ready=%d  waiting=%d  in-flight=%d  retired=%d\n", s.Hosts.Active, s.Hosts.Ready, s.Hosts.Waiting, s.Hosts.InFlight, s.Counters.RetiredHosts)
	c := s.Counters
	if ws := s.Waits.String(); ws != "" {
		fmt.Fprintf(&b, "waits      %s\n", ws)
	}
	for i, l := range s.Stuck {
		label := ""
		if i == 0 {
			label = fmt.Sprintf("STUCK %d", len(s.Stuck))
		}
		fmt.Fprintf(&b, "%-10s %s\n", label, l.Describe(s.StuckNow))
	}
	fmt.Fprintf(&b, "urls       accepted=%d queued=%d dispatched=%d | fetched=%d failed=%d disallowed=%d out-of-scope=%d over-budget=%d\n",
		c.Accepted, c.Queued, c.Dispatched, c.Fetched, c.Failed, c.Disallowed, c.OutOfScope, c.OverBudget)
	rate := "n/a (one sample)"
	if s.PagesPerSec != nil {
		rate = fmt.Sprintf("%.1f pages/s", *s.PagesPerSec)
	}
	fmt.Fprintf(&b, "rate       %s  errors=%d\n", rate, s.Errors)
	if d := s.Dispatch; d != nil {
		held := "no"
		if d.Held != "" {
			held = "HELD by " + d.Held
		}
		fmt.Fprintf(&b, "dispatch   backpressure=%s holds=%d  fetch: waiting=%d/%d being-fetched=%d\n",
			held, d.Holds, d.FetchQueued, d.FetchQueuedLimit, d.FetchBusy)
	}
	if len(s.Streams) > 0 {
		var bl []string
		for _, k := range []string{"dedup", "scheduler", "fetch", "outcomes", "parser"} {
			if n, ok := s.Backlog[k]; ok {
				bl = append(bl, fmt.Sprintf("%s=%d", k, n))
			}
		}
		fmt.Fprintf(&b, "backlog    %s\n", strings.Join(bl, " "))
		var st []string
		for _, name := range []string{topology.StreamPages, topology.StreamDocs, topology.StreamFetched} {
			if x, ok := s.Streams[name]; ok {
				st = append(st, fmt.Sprintf("%s=%d msgs/%s", name, x.Msgs, bytesString(x.Bytes)))
			}
		}
		fmt.Fprintf(&b, "streams    %s\n", strings.Join(st, " "))
	}
	if r := s.Recrawl; r != nil {
		fmt.Fprintf(&b, "recrawl    scheduled=%d due=%d (oldest waiting %s)  median interval %s  304=%.0f%% changed=%.0f%% of fetches (%d schedules sampled)\n",
			r.Scheduled, r.Due, r.OldestDue.Round(time.Second), r.MedianInterval.Round(time.Second), 100*r.NotModifiedShare, 100*r.ChangedShare, r.Sampled)
	}
	if ar := s.Rules; ar != nil && ar.Total > 0 {
		head := fmt.Sprintf("rules      %d site-policy rules in force (version %d)", ar.Total, ar.Version)
		if len(ar.Shown) < ar.Total {
			head += fmt.Sprintf(", the %d most active", len(ar.Shown))
		}
		fmt.Fprintf(&b, "%s; counters summed over shards:\n", head)
		w := 0
		for _, x := range ar.Shown {
			w = max(w, len(x.Scope))
		}
		for _, x := range ar.Shown {
			fmt.Fprintf(&b, "    %-*s hosts=%d requests=%d blocked=%d parked=%d excluded=%d\n", w, x.Scope, x.Hosts, x.Requests, x.Blocked, x.Parked, x.Excluded)
		}
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(&b, "warning    %s\n", w)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func bytesString(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
