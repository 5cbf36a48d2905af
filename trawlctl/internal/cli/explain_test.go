package cli

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/trawlctl/internal/inspect"
)

func TestExplain(t *testing.T) {
	s := startStack(t, 2)
	ctx := testwait.Context(t)
	now := time.Now()
	ms := func(d time.Duration) float64 { return float64(now.Add(d).UnixMilli()) }
	ks := func(host string) string { return frontierkeys.ForShard("trawl", topology.ShardOf(host, 2), 2).Prefix() }

	// The dedup filter of capacity 100000, p 0.01, in 2^16-bit keys, with exactly the bits
	// of https://example.com/ set, at the positions services/dedup/internal/bloom's golden
	// test pins (TestPositionsGolden): this checks trawlctl's copy against dedup's values,
	// not against itself.
	golden := [][2]int64{{10, 55793}, {6, 35460}, {2, 15127}, {12, 35796}, {8, 15463}, {3, 60666}, {14, 15799}}
	entry, err := robots.NewEntry("trawl", 200, []byte("User-agent: *\nDisallow: /private\nCrawl-delay: 2\n"), robots.DefaultMaxBytes, now.Add(-time.Hour)).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		// One layer of m = 958506, k = 7 (the golden vectors' filter), as dedup records it.
		p.HSet(ctx, "trawl:{dedup}:bloom:meta", "n", "100000", "p", "0.01", "growth", "2", "tighten", "0.5", "key_bits", "65536",
			"hash", "xxh64-km-v1", "layers", "1", "layer:0", "100000 958506 7 15")
		for _, g := range golden {
			p.SetBit(ctx, fmt.Sprintf("trawl:{dedup}:bloom:0:%d", g[0]), g[1], 1)
		}
		p.Set(ctx, "trawl:robots:https://example.com", entry, time.Hour)

		e := ks("example.com")
		p.HSet(ctx, e+"hosts", "example.com", 1)
		p.ZAdd(ctx, e+"heap", redis.Z{Score: ms(30 * time.Second), Member: "example.com"})
		p.HSet(ctx, e+"host:example.com", "next", int64(ms(30*time.Second)), "cd", 2000, "err", 1, "fails", 2, "shiny", "new")
		p.PExpire(ctx, e+"host:example.com", time.Hour)

		r := ks("retired.test")
		p.HSet(ctx, r+"host:retired.test", "retired", int64(ms(-time.Minute)), "fails", 5, "next", int64(ms(0)))
		p.RPush(ctx, e+"bq:example.com", "1 0 0 https://example.com/other", "2 0 1 https://example.com/")

		b := ks("busy.test")
		p.HSet(ctx, b+"hosts", "busy.test", 1)
		p.ZAdd(ctx, b+"inflight", redis.Z{Score: ms(2 * time.Minute), Member: "busy.test"})
		p.HSet(ctx, b+"lease", "busy.test", "1-42 3 0 0 http://busy.test/x")

		w := ks("waiting.test")
		p.RPush(ctx, w+"fq:2", "2 0 0 http://other.test/", "2 0 0 http://waiting.test/a-long-enough-path/p")
		var long []any
		for i := range 30 {
			long = append(long, fmt.Sprintf("7 0 0 http://deep.test/%d", i))
		}
		p.RPush(ctx, ks("deep.test")+"fq:7", long...)
		// Two hosts last requested at one server address, which has a request in flight.
		v := ks("vhost.test")
		p.HSet(ctx, v+"host:vhost.test", "next", int64(ms(0)), "addr", "192.0.2.9")
		p.HSet(ctx, politeness.ServerKey("", netip.MustParseAddr("192.0.2.9")),
			"until", int64(ms(20*time.Second)), "tok", "t", "next", int64(ms(-time.Second)), "rt", 120, "host", "other-vhost.test")
		p.HSet(ctx, ks("quiet.test")+"host:quiet.test", "next", int64(ms(0)), "addr", "192.0.2.10")
		// A scheduler with more front queues than the default eight.
		p.RPush(ctx, ks("far.test")+"fq:12", "12 0 0 http://far.test/")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		check func(t *testing.T, r *inspect.Report)
	}{
		{"seen, robots, back queue, politeness", nil, []string{"HTTPS://Example.com:443/"}, func(t *testing.T, r *inspect.Report) {
			if r.URL != "https://example.com/" || r.Host != "example.com" || r.Shard != topology.ShardOf("example.com", 2) {
				t.Errorf("identity %s %s %d", r.URL, r.Host, r.Shard)
			}
			if r.Seen.State != "seen" || len(r.Seen.Bits) != 1 || len(r.Seen.Bits[0]) != 7 {
				t.Errorf("seen %+v", r.Seen)
			}
			if !r.Robots.Cached || r.Robots.Allowed == nil || !*r.Robots.Allowed || r.Robots.CrawlDelay != 2*time.Second || r.Robots.Class != "parsed" || r.Robots.ExpiresIn <= 0 {
				t.Errorf("robots %+v", r.Robots)
			}
			f := r.Frontier
			if !f.HostActive || f.HeapNext == nil || f.Ready || f.InFlight {
				t.Errorf("frontier %+v", f)
			}
			if bq := f.BackQueue; !bq.Found || bq.Index != 1 || bq.Depth != 2 || bq.Attempt != 1 || bq.Len != 2 {
				t.Errorf("back queue %+v", bq)
			}
			if !strings.Contains(f.Summary, "back queue at position 1") {
				t.Errorf("summary %q", f.Summary)
			}
			if r.Scope.Depth == nil || *r.Scope.Depth != 2 || r.Scope.TooDeep {
				t.Errorf("scope %+v", r.Scope)
			}
			h := r.HostState
			if !h.Known || h.CrawlDelay != 2*time.Second || h.ErrStreak != 1 || h.Next == nil || h.Fails != 2 || h.Retired != nil || h.Other["shiny"] != "new" || h.ExpiresIn <= 0 {
				t.Errorf("host %+v", h)
			}
			if !strings.HasPrefix(r.LastFetch, "unknown") {
				t.Errorf("last fetch %q", r.LastFetch)
			}
		}},
		{"the host's server address, busy", nil, []string{"http://vhost.test/"}, func(t *testing.T, r *inspect.Report) {
			sv := r.HostState.Server
			if sv == nil || sv.Addr != "192.0.2.9" || !sv.Known || !sv.Busy || sv.InFlightUntil == nil ||
				sv.Next == nil || sv.LastHost != "other-vhost.test" || sv.LastResponse != 120*time.Millisecond {
				t.Errorf("server %+v", sv)
			}
			if r.HostState.Other["addr"] != "" {
				t.Errorf("addr reported as an unknown field: %+v", r.HostState.Other)
			}
		}},
		{"the host's server address, without state", nil, []string{"http://quiet.test/"}, func(t *testing.T, r *inspect.Report) {
			if sv := r.HostState.Server; sv == nil || sv.Addr != "192.0.2.10" || sv.Known || sv.Busy {
				t.Errorf("server %+v", sv)
			}
		}},
		{"no address known", nil, []string{"https://example.com/"}, func(t *testing.T, r *inspect.Report) {
			if r.HostState.Server != nil {
				t.Errorf("server %+v, want none", r.HostState.Server)
			}
		}},
		{"disallowed by the cached robots.txt", nil, []string{"https://example.com/private/x"}, func(t *testing.T, r *inspect.Report) {
			if r.Seen.State != "not seen" {
				t.Errorf("seen %+v", r.Seen)
			}
			if r.Robots.Allowed == nil || *r.Robots.Allowed || r.Robots.Rule != "disallow /private" {
				t.Errorf("robots %+v", r.Robots)
			}
			if r.Frontier.BackQueue.Found || !r.Frontier.BackQueue.Complete() {
				t.Errorf("back queue %+v", r.Frontier.BackQueue)
			}
		}},
		{"retired host", nil, []string{"http://retired.test/a"}, func(t *testing.T, r *inspect.Report) {
			h := r.HostState
			if h.Retired == nil || h.Retired.UnixMilli() != int64(ms(-time.Minute)) || h.Fails != 5 || h.ExpiresIn != 0 {
				t.Errorf("host %+v", h)
			}
		}},
		{"in flight", nil, []string{"http://busy.test/x"}, func(t *testing.T, r *inspect.Report) {
			f := r.Frontier
			if !f.InFlight || f.LeaseToken != "1-42" || f.LeaseDeadline == nil || f.LeaseDeadline.Before(now) {
				t.Errorf("frontier %+v", f)
			}
			if r.Robots.Cached || !strings.HasPrefix(r.Robots.Note, "not cached") {
				t.Errorf("robots %+v", r.Robots)
			}
			if r.Scope.Depth == nil || *r.Scope.Depth != 3 {
				t.Errorf("depth %v", r.Scope.Depth)
			}
		}},
		{"front queue", nil, []string{"http://waiting.test/a-long-enough-path/p"}, func(t *testing.T, r *inspect.Report) {
			fq := r.Frontier.FrontQueues[2]
			if !fq.Found || fq.Index != 1 || fq.Queue != "fq:2" || r.Frontier.HostActive {
				t.Errorf("front queue %+v", fq)
			}
			if r.HostState.Known {
				t.Errorf("host state %+v", r.HostState)
			}
		}},
		{"bounded scan says so", nil, []string{"-scan", "10", "http://deep.test/25"}, func(t *testing.T, r *inspect.Report) {
			fq := r.Frontier.FrontQueues[7]
			if fq.Found || fq.Scanned != 10 || fq.Len != 30 || fq.Complete() {
				t.Errorf("front queue %+v", fq)
			}
			if !strings.Contains(r.Frontier.Summary, "not found in the first 10 entries") {
				t.Errorf("summary %q", r.Frontier.Summary)
			}
		}},
		{"found with a larger scan", nil, []string{"http://deep.test/25"}, func(t *testing.T, r *inspect.Report) {
			if fq := r.Frontier.FrontQueues[7]; !fq.Found || fq.Index != 25 || fq.Depth != 7 {
				t.Errorf("front queue %+v", fq)
			}
		}},
		{"front queues beyond the default eight are probed", nil, []string{"http://far.test/"}, func(t *testing.T, r *inspect.Report) {
			if len(r.Frontier.FrontQueues) != 13 || !r.Frontier.FrontQueues[12].Found || *r.Scope.Depth != 12 {
				t.Errorf("front queues %+v", r.Frontier.FrontQueues)
			}
		}},
		{"an explicit F bounds the search", map[string]string{"TRAWL_FRONT_QUEUES": "8"}, []string{"http://far.test/"}, func(t *testing.T, r *inspect.Report) {
			if len(r.Frontier.FrontQueues) != 8 || r.Scope.Depth != nil {
				t.Errorf("front queues %+v", r.Frontier.FrontQueues)
			}
		}},
		{"trap", nil, []string{"http://h.test/cal/x/cal/x/cal"}, func(t *testing.T, r *inspect.Report) {
			if !r.Scope.Trap || !strings.HasPrefix(r.Scope.Verdict, "out of scope") {
				t.Errorf("scope %+v", r.Scope)
			}
			if !strings.Contains(r.Frontier.Summary, "not queued") {
				t.Errorf("summary %q", r.Frontier.Summary)
			}
		}},
		{"length, exclude and depth limits", map[string]string{"TRAWL_MAX_URL_LENGTH": "32", "TRAWL_EXCLUDE": `/p$`, "TRAWL_MAX_DEPTH": "1"},
			[]string{"http://waiting.test/a-long-enough-path/p"}, func(t *testing.T, r *inspect.Report) {
				sc := r.Scope
				if !sc.TooLong || !sc.Excluded || sc.NotIncluded || !sc.TooDeep || sc.Trap {
					t.Errorf("scope %+v", sc)
				}
				for _, w := range []string{"TRAWL_MAX_URL_LENGTH (40 > 32)", "TRAWL_EXCLUDE", "depth 2 > TRAWL_MAX_DEPTH 1"} {
					if !strings.Contains(sc.Verdict, w) {
						t.Errorf("verdict %q lacks %q", sc.Verdict, w)
					}
				}
			}},
		{"in scope, depth unknown", nil, []string{"http://fresh.test/a"}, func(t *testing.T, r *inspect.Report) {
			if !strings.Contains(r.Scope.Verdict, "scope depends on depth") || r.Scope.Depth != nil {
				t.Errorf("scope %+v", r.Scope)
			}
		}},
		{"no filter under another prefix", nil, []string{"-prefix", "other", "https://example.com/"}, func(t *testing.T, r *inspect.Report) {
			if r.Seen.State != "unknown" || !strings.Contains(r.Seen.Detail, "other:{dedup}:bloom:meta") {
				t.Errorf("seen %+v", r.Seen)
			}
			if r.Frontier.BackQueue.Found || r.Robots.Cached {
				t.Errorf("read the default prefix: %+v", r.Frontier)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := s.inv
			if tt.env != nil {
				inv.env = map[string]string{}
				for k, v := range s.inv.env {
					inv.env[k] = v
				}
				for k, v := range tt.env {
					inv.env[k] = v
				}
			}
			r := inv.run(t, append([]string{"explain", "-json"}, tt.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			var rep inspect.Report
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("%v: %s", err, r.stdout)
			}
			tt.check(t, &rep)
		})
	}

	t.Run("text", func(t *testing.T) {
		r := s.inv.run(t, "explain", "https://example.com/")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		for _, w := range []string{
			"url        https://example.com/",
			"seen       seen: all 7 bits set",
			"robots     allowed for agent trawl: no matching rule",
			"frontier   waiting in its host's back queue at position 1",
			"bq:example.com len 2: found at 1 (depth 2, attempt 1)",
			"politeness next request not before",
			"crawl-delay 2s; error streak 1; failures 2; shiny=new; state expires in ",
			"last fetch unknown",
		} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("text lacks %q:\n%s", w, r.stdout)
			}
		}
		// The state was given an hour; the seconds since depend on the machine's load.
		if m := regexp.MustCompile(`state expires in (\S+)`).FindStringSubmatch(r.stdout); m != nil {
			if d, err := time.ParseDuration(m[1]); err != nil || d > time.Hour || d < 50*time.Minute {
				t.Errorf("state expires in %s, want within the hour it was given", m[1])
			}
		}
		r = s.inv.run(t, "explain", "http://vhost.test/")
		if w := "server last requested at 192.0.2.9; BUSY: a request is in flight"; !strings.Contains(r.stdout, w) {
			t.Errorf("text lacks %q:\n%s", w, r.stdout)
		}
	})
}
