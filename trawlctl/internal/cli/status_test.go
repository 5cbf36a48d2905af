package cli

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/trawlctl/internal/progress"
)

// frontierFixture writes two shards' frontier keys (of TRAWL_SHARDS=2) as the scheduler's
// scripts would.
// fixtureNow is the clock of the frontier fixture, so that tests can name its times.
var fixtureNow = time.Now().UnixMilli()

func frontierFixture(t *testing.T, rdb *redis.Client, prefix string) {
	t.Helper()
	ctx := testwait.Context(t)
	now := fixtureNow
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		s0, s1 := frontierkeys.ForShard(prefix, 0, 2).Prefix(), frontierkeys.ForShard(prefix, 1, 2).Prefix()
		p.RPush(ctx, s0+"fq:0", "0 0 0 http://a.test/", "0 0 0 http://b.test/")
		p.RPush(ctx, s0+"fq:3", "3 0 0 http://c.test/x")
		p.RPush(ctx, s1+"fq:0", "0 0 0 http://d.test/")
		p.RPush(ctx, s1+"fq:9", "9 0 0 http://e.test/deep") // beyond the default eight
		p.HSet(ctx, s0+"hosts", "h1.test", 1, "h2.test", 1, "h3.test", 1)
		p.HSet(ctx, s1+"hosts", "h4.test", 1)
		p.ZAdd(ctx, s0+"heap", redis.Z{Score: float64(now - 1000), Member: "h1.test"}, redis.Z{Score: float64(now + 60000), Member: "h2.test"})
		p.ZAdd(ctx, s1+"heap", redis.Z{Score: float64(now + 60000), Member: "h4.test"})
		p.ZAdd(ctx, s0+"inflight", redis.Z{Score: float64(now + 120000), Member: "h3.test"})
		// h3.test's task fails to store its page: its fetcher recorded the error under the lease.
		p.HSet(ctx, s0+"lease", "h3.test", "0-5-9 0 0 1 http://h3.test/slow")
		p.HSet(ctx, s0+"lasterr", "h3.test", "0-5-9\t"+strconv.FormatInt(now-30000, 10)+"\t"+strconv.FormatInt(now-1000, 10)+
			"\t7\tpage: nats: API error: code=400 err_code=10097 description=header size exceeds maximum allowed of 64k")
		p.HSet(ctx, s0+"stats", "accepted", 20, "queued", 8, "dispatched", 12, "fetched", 7, "failed", 2, "disallowed", 1, "out_of_scope", 1, "over_budget", 0, "retired", 1)
		p.HSet(ctx, s1+"stats", "accepted", 5, "queued", 3, "dispatched", 2, "fetched", 1, "failed", 1)
		p.Set(ctx, s1+"paused", "1", 0)
		// h2.test backs off after a robots.txt 503; h4.test waits out its politeness delay.
		p.HSet(ctx, s0+"host:h2.test", "err", 1, "next", now+60000)
		p.LPush(ctx, s0+"errors", strconv.FormatInt(now, 10)+"\tretry\trobots-unavailable\t503\th2.test\thttp://h2.test/\t")
		p.HSet(ctx, prefix+":dispatch", "held", "parser", "holds", 2, "fetch_queued", 5, "fetch_busy", 3, "fetch_limit", 8)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStatus(t *testing.T) {
	s := startStack(t, 2)
	frontierFixture(t, s.rdb, "trawl")
	ctx := testwait.Context(t)
	// Backlog: two waiting discovered batches, one page the parser has not taken.
	for range 2 {
		if _, err := s.js.Publish(ctx, topology.SubjectDiscovered, []byte(`{"v":1,"urls":[]}`)); err != nil {
			t.Fatal(err)
		}
	}
	pm, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: crawlmsg.PageMeta{URL: "http://a.test/", Status: 200}, Body: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.PublishBatch(ctx, s.js, []*nats.Msg{pm}); err != nil {
		t.Fatal(err)
	}

	t.Run("json", func(t *testing.T) {
		r := s.inv.run(t, "status", "-json", "-sample", "0")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		var snap progress.Snapshot
		if err := json.Unmarshal([]byte(r.stdout), &snap); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		wantFront := []int64{3, 0, 0, 1, 0, 0, 0, 0, 0, 1}
		if len(snap.Front) != len(wantFront) {
			t.Fatalf("front queues %v, want %v (probed up to the last non-empty)", snap.Front, wantFront)
		}
		for i := range wantFront {
			if snap.Front[i] != wantFront[i] {
				t.Errorf("front queues %v, want %v", snap.Front, wantFront)
				break
			}
		}
		if snap.Queued != 5 {
			t.Errorf("front queued %d, want 5", snap.Queued)
		}
		wantHosts := progress.Hosts{Active: 4, InHeap: 3, Ready: 1, Waiting: 2, InFlight: 1}
		if snap.Hosts != wantHosts {
			t.Errorf("hosts %+v, want %+v", snap.Hosts, wantHosts)
		}
		wantC := progress.Counters{Accepted: 25, Queued: 11, Dispatched: 14, Fetched: 8, Failed: 3, Disallowed: 1, OutOfScope: 1, RetiredHosts: 1}
		if snap.Counters != wantC {
			t.Errorf("counters %+v, want %+v", snap.Counters, wantC)
		}
		if snap.Errors != 3 || !snap.Paused || snap.Shards[0].Paused || !snap.Shards[1].Paused {
			t.Errorf("errors %d, paused %v (%v, %v)", snap.Errors, snap.Paused, snap.Shards[0].Paused, snap.Shards[1].Paused)
		}
		if snap.Shards[1].Hosts.Active != 1 || snap.Shards[0].Counters.Fetched != 7 {
			t.Errorf("per-shard numbers wrong: %+v", snap.Shards)
		}
		if snap.Backlog["dedup"] != 2 || snap.Backlog["parser"] != 1 || snap.Backlog["fetch"] != 0 || snap.Backlog["outcomes"] != 0 {
			t.Errorf("backlog %v", snap.Backlog)
		}
		if d := snap.Dispatch; d == nil || *d != (progress.Dispatch{Held: "parser", Holds: 2, FetchQueued: 5, FetchBusy: 3, FetchQueuedLimit: 8}) {
			t.Errorf("dispatch %+v", d)
		}
		if w := snap.Waits; w.Due != 1 || w.Waiting != 2 || w.Backoff != 1 || w.Delay != 1 || w.Retired != 1 ||
			w.Latest() == nil || w.Hosts[0].Host != "h2.test" || w.Hosts[0].LastError != "robots-unavailable 503" {
			t.Errorf("waits %+v", w)
		}
		if len(snap.Stuck) != 1 || snap.Stuck[0].URL != "http://h3.test/slow" || snap.Stuck[0].Host != "h3.test" ||
			snap.Stuck[0].LastError == nil || snap.Stuck[0].LastError.Tries != 7 {
			t.Errorf("stuck %+v, want h3.test's task with its fetcher's last error", snap.Stuck)
		}
		if snap.Streams[topology.StreamPages].Msgs != 1 || snap.PagesPerSec != nil {
			t.Errorf("streams %v, rate %v", snap.Streams, snap.PagesPerSec)
		}
	})

	t.Run("explicit queue count", func(t *testing.T) {
		r := s.inv.run(t, "status", "-json", "-sample", "0", "-queues", "4")
		var snap progress.Snapshot
		if err := json.Unmarshal([]byte(r.stdout), &snap); err != nil || len(snap.Front) != 4 || snap.Queued != 4 {
			t.Fatalf("err %v, front %v queued %d", err, snap.Front, snap.Queued)
		}
	})

	t.Run("text", func(t *testing.T) {
		r := s.inv.run(t, "status", "-sample", "0")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		for _, want := range []string{
			"PAUSED (shards 1)",
			"5 URLs in front queues: p0=3 p1=0 p2=0 p3=1",
			"active=4  ready=1  waiting=2  in-flight=1  retired=1",
			"accepted=25 queued=11 dispatched=14 | fetched=8 failed=3 disallowed=1 out-of-scope=1 over-budget=0",
			"errors=3",
			"dedup=2 scheduler=0 fetch=0 outcomes=0 parser=1",
			"dispatch   backpressure=HELD by parser holds=2  fetch: waiting=5/8 being-fetched=3",
			"STUCK 1    http://h3.test/slow (host h3.test, attempt 2): out for ",
			"(7 tries), last error ", "ago: page: nats: API error: code=400 err_code=10097",
			"waits      hosts waiting: 1 backing off until " + time.UnixMilli(fixtureNow+60000).Format("15:04:05") +
				" (last error h2.test: robots-unavailable 503), 1 in politeness delay, 1 retired, slowest ",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("status lacks %q:\n%s", want, r.stdout)
			}
		}
	})

	t.Run("one-shot rate", func(t *testing.T) {
		r := s.inv.run(t, "status", "-json", "-sample", "50ms")
		var snap progress.Snapshot
		if err := json.Unmarshal([]byte(r.stdout), &snap); err != nil {
			t.Fatal(err)
		}
		if snap.PagesPerSec == nil || *snap.PagesPerSec != 0 {
			t.Errorf("pages/s %v, want 0 from two samples of an idle crawl", snap.PagesPerSec)
		}
	})

	t.Run("watch json until interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wait, stdout, _ := s.inv.start(ctx, "status", "-watch", "-json", "-interval", "50ms")
		testwait.Eventually(t, 10*time.Second, "a first snapshot", func() bool { return len(lines(stdout.String())) >= 1 })
		if err := s.rdb.HIncrBy(ctx, frontierkeys.ForShard("trawl", 0, 2).Stats(), "fetched", 40).Err(); err != nil {
			t.Fatal(err)
		}
		defer s.rdb.HIncrBy(context.Background(), frontierkeys.ForShard("trawl", 0, 2).Stats(), "fetched", -40)
		decode := func(l string) progress.Snapshot {
			var snap progress.Snapshot
			if err := json.Unmarshal([]byte(l), &snap); err != nil {
				t.Fatal(err)
			}
			return snap
		}
		testwait.Eventually(t, 10*time.Second, "a snapshot with the new pages", func() bool {
			ls := lines(stdout.String())
			return decode(ls[len(ls)-1]).Counters.Fetched == 48
		})
		cancel()
		r := wait()
		if r.code != 0 {
			t.Fatalf("exit %d after Ctrl-C: %s", r.code, r.stderr)
		}
		ls := lines(r.stdout)
		for i := 1; i < len(ls); i++ {
			prev, cur := decode(ls[i-1]), decode(ls[i])
			if cur.PagesPerSec == nil {
				t.Fatalf("snapshot %d has no rate", i)
			}
			want := float64(cur.Counters.Fetched-prev.Counters.Fetched) / cur.At.Sub(prev.At).Seconds()
			// The wall-clock stamps in JSON differ from the monotonic clock by nanoseconds.
			if diff := *cur.PagesPerSec - want; diff > 1e-4*want+1e-9 || diff < -1e-4*want-1e-9 {
				t.Errorf("snapshot %d: pages/s %v, want %v", i, *cur.PagesPerSec, want)
			}
			if cur.Counters.Fetched == 48 && prev.Counters.Fetched == 8 && *cur.PagesPerSec <= 0 {
				t.Errorf("snapshot %d: 40 new pages but pages/s %v", i, *cur.PagesPerSec)
			}
		}
	})

	t.Run("other prefix is empty", func(t *testing.T) {
		r := s.inv.run(t, "status", "-json", "-sample", "0", "-prefix", "other")
		var snap progress.Snapshot
		if err := json.Unmarshal([]byte(r.stdout), &snap); err != nil || snap.Counters.Accepted != 0 || snap.Paused {
			t.Fatalf("err %v, snapshot %+v", err, snap)
		}
	})
}

func TestRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name       string
		prev, cur  int64
		dt         time.Duration
		want       float64
		wantAbsent bool
	}{
		{"steady", 100, 150, 2 * time.Second, 25, false},
		{"counter reset", 100, 10, time.Second, 0, false},
		{"same instant", 1, 2, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := &progress.Snapshot{At: t0, Counters: progress.Counters{Fetched: tt.prev}}
			cur := &progress.Snapshot{At: t0.Add(tt.dt), Counters: progress.Counters{Fetched: tt.cur}}
			progress.Rate(prev, cur)
			if tt.wantAbsent {
				if cur.PagesPerSec != nil {
					t.Fatalf("rate %v, want none", *cur.PagesPerSec)
				}
				return
			}
			if cur.PagesPerSec == nil || *cur.PagesPerSec != tt.want {
				t.Fatalf("rate %v, want %v", cur.PagesPerSec, tt.want)
			}
		})
	}
}
