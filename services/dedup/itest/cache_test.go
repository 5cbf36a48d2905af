package itest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/cache"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

// redisCalls counts the successful calls of the named commands (lower case, as in INFO
// commandstats) since the last CONFIG RESETSTAT.
func redisCalls(t *testing.T, c *redis.Client, names ...string) int {
	t.Helper()
	info, err := c.Info(testwait.Context(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !slices.Contains(names, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		var calls, failed int
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.Atoi(v)
			switch k {
			case "calls":
				calls = n
			case "failed_calls":
				failed = n
			}
		}
		total += calls - failed
	}
	return total
}

func resetStats(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.ConfigResetStat(testwait.Context(t)).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestCachedCheck: cached URLs are answered without Redis, the others still go through the
// memoised test-and-set with their indexes, and a redelivered message gets its memo back
// although all its URLs are cached by then.
func TestCachedCheck(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", smallParams)
	ch := &seen.Cached{Store: seen.New(c, f, "trawl"), Cache: cache.New(1000)}
	u := urls("cached", 0, 4)

	res, err := ch.Check(ctx, []seen.Message{msg("C:1", u[0], u[1], u[2])})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.New[0], []int{0, 1, 2}) || !res.Asked[0] || res.Lookups != 3 || res.Hits != 0 {
		t.Fatalf("first message: %+v", res)
	}

	// All cached: no script, nothing to forget.
	resetStats(t, c)
	res, err = ch.Check(ctx, []seen.Message{msg("C:2", u[1], u[0])})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.New[0]) != 0 || res.Asked[0] || res.Hits != 2 {
		t.Fatalf("all-cached message: %+v", res)
	}
	if n := redisCalls(t, c, "eval", "evalsha"); n != 0 {
		t.Fatalf("%d scripts for an all-cached message, want 0", n)
	}

	// Mixed: only the miss is asked, and its index in the message comes back.
	res, err = ch.Check(ctx, []seen.Message{msg("C:3", u[2], u[3])})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.New[0], []int{1}) || !res.Asked[0] || res.Hits != 1 {
		t.Fatalf("mixed message: %+v", res)
	}
	if n := redisCalls(t, c, "eval", "evalsha"); n != 1 {
		t.Fatalf("%d scripts for one mixed message, want 1", n)
	}

	// Within one batch, a URL an earlier message asks about is seen for the later ones,
	// redelivered asker or not, without a second test in Redis.
	v := urls("cached", 10, 2)
	first1, second1 := msg("C:4", v[0]), msg("C:5", v[0], v[1])
	redo := msg("C:6", v[1])
	redo.Redelivered = true
	res, err = ch.Check(ctx, []seen.Message{first1, redo, second1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.New[0], []int{0}) || !slices.Equal(res.New[1], []int{0}) || len(res.New[2]) != 0 || res.Asked[2] {
		t.Fatalf("batch with repeats: %+v; want C:4 and C:6 new, C:5 answered without Redis", res)
	}
	if res.Lookups != 3 || res.Hits != 2 {
		t.Fatalf("batch with repeats: %d lookups, %d hits; want 3 and 2", res.Lookups, res.Hits)
	}

	// C:1 again, its publish having failed: as a first delivery it would be all cached
	// and all "seen", losing three URLs; redelivered, its memo answers.
	first := msg("C:1", u[0], u[1], u[2])
	res, err = ch.Check(ctx, []seen.Message{first})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.New[0]) != 0 {
		t.Fatalf("the hazard this guards against did not occur: %+v", res)
	}
	first.Redelivered = true
	res, err = ch.Check(ctx, []seen.Message{first})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.New[0], []int{0, 1, 2}) || !res.Asked[0] || res.Lookups != 0 {
		t.Fatalf("redelivery: %+v, want the memo [0 1 2] from Redis, no cache lookup", res)
	}
}

func TestServiceCacheSkipsRedis(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		size    string
		scripts int // scripts for the repeated message
	}{
		{"cache on", "50000", 0},
		{"cache off", "0", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// At always a published message's memo is forgotten at once (at 1s it is left to
			// the trim), which is what the HDEL count below tells apart.
			s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_DEDUP_CACHE_SIZE": tt.size, "TRAWL_FSYNC": "always"})
			c := redisClient(t, s.redis)
			var first, again []crawlmsg.Discovered
			for i := range 40 {
				first = append(first, link(fmt.Sprintf("http://h%d.test/p/%d", i%5, i), 1))
				// The same URLs spelled differently: the cache keys normal forms.
				again = append(again, link(fmt.Sprintf("HTTP://H%d.TEST:80/p/./%d#x", i%5, i), 2))
			}
			s.publishDiscovered(t, first...)
			got, ids := map[int][]string{}, map[string]int{}
			testwait.Eventually(t, 20*time.Second, "first message on the frontier", func() bool {
				s.frontier(t, got, ids)
				return len(got[0])+len(got[1]) == 40
			})
			testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })

			resetStats(t, c)
			s.publishDiscovered(t, again...)
			testwait.Eventually(t, 20*time.Second, "repeat handled", func() bool {
				return s.metric(t, `trawl_dedup_urls_total{result="seen"}`) == 40
			})
			testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
			if n := redisCalls(t, c, "eval", "evalsha"); n != tt.scripts {
				t.Errorf("%d test-and-set scripts for the repeated URLs, want %d", n, tt.scripts)
			}
			if n := redisCalls(t, c, "hdel"); n != tt.scripts {
				t.Errorf("%d HDEL (memo Forget) calls, want %d: a message the cache answers has no memo", n, tt.scripts)
			}
			wantHits := map[string]float64{"cache on": 40, "cache off": 0}[tt.name]
			if h := s.metric(t, "trawl_dedup_cache_hits_total"); h != wantHits {
				t.Errorf("cache hits %v, want %v", h, wantHits)
			}
			if tt.size != "0" {
				if l := s.metric(t, "trawl_dedup_cache_lookups_total"); l != 80 {
					t.Errorf("cache lookups %v, want 80", l)
				}
				if r := s.metric(t, "trawl_dedup_cache_hit_ratio"); r < 0.49 || r > 0.51 {
					t.Errorf("hit ratio %v, want 0.5", r)
				}
				if e := s.metric(t, "trawl_dedup_cache_entries"); e != 40 {
					t.Errorf("cache entries %v, want 40", e)
				}
			}
			s.frontier(t, got, ids)
			if len(got[0])+len(got[1]) != 40 {
				t.Errorf("%d URLs on the frontier, want the 40 of the first message only", len(got[0])+len(got[1]))
			}
		})
	}
}

// TestServiceRedeliveryBypassesCache: the seen test of a message succeeds (its URLs are
// new, memoised and now cached) but its publish fails. Its redelivery must still publish
// them, although every one is in the cache; a first-delivery message with the same URLs
// meanwhile is answered "seen" by the cache.
func TestServiceRedeliveryBypassesCache(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, nil)
	ctx := testwait.Context(t)
	// Without the frontier stream, publishing fails.
	if err := s.js.DeleteStream(ctx, topology.StreamFrontier); err != nil {
		t.Fatal(err)
	}
	lost := []crawlmsg.Discovered{link("http://a.test/lost/1", 1), link("http://b.test/lost/2", 1), link("http://a.test/lost/3", 1)}
	s.publishDiscovered(t, lost...)
	testwait.Eventually(t, 20*time.Second, "the publish to fail", func() bool {
		return s.metric(t, `trawl_dedup_failures_total{stage="publish"}`) >= 1
	})
	if e := s.metric(t, "trawl_dedup_cache_entries"); e != 3 {
		t.Fatalf("cache entries %v after the seen test, want 3", e)
	}
	// Another page linking to the same URLs: the cache says seen.
	s.publishDiscovered(t, lost[2], lost[0])
	testwait.Eventually(t, 20*time.Second, "the second message answered by the cache", func() bool {
		return s.metric(t, "trawl_dedup_cache_hits_total") == 2
	})

	if err := natsx.Ensure(ctx, s.js, s.cfg.Common.Topology(), s.cfg.Common.Timings(), quietLog()); err != nil {
		t.Fatal(err)
	}
	got, ids := map[int][]string{}, map[string]int{}
	testwait.Eventually(t, 30*time.Second, "the redelivered message's URLs on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) >= 3
	})
	testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
	s.frontier(t, got, ids)
	all := append(slices.Clone(got[0]), got[1]...)
	slices.Sort(all)
	if want := []string{"http://a.test/lost/1", "http://a.test/lost/3", "http://b.test/lost/2"}; !slices.Equal(all, want) {
		t.Errorf("frontier %v, want %v each once", all, want)
	}
	for id := range ids {
		if !strings.HasPrefix(id, "front:"+topology.StreamDiscovered+":1:") {
			t.Errorf("frontier message %s, want only outputs of the first message", id)
		}
	}
	// Only first deliveries are looked up: 3 for the first message, 2 for the second.
	if l := s.metric(t, "trawl_dedup_cache_lookups_total"); l != 5 {
		t.Errorf("cache lookups %v, want 5 (the redelivery bypasses the cache)", l)
	}
}

func TestServiceStripsSessionIDs(t *testing.T) {
	t.Parallel()
	in := []string{
		"http://a.test/cart;jsessionid=0A1B2C3D4E5F60718293A4B5C6D7E8F9?item=1",
		"http://a.test/cart;jsessionid=FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF?item=1",
		"http://a.test/list?PHPSESSID=r2t5uvjq435r4q7ib3vtdjq120&page=2",
		"http://a.test/list?page=2&PHPSESSID=aaaaaaaaaaaaaaaaaaaaaaaaaa",
		"http://a.test/list?sid=7",
	}
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"default strips", nil, []string{"http://a.test/cart?item=1", "http://a.test/list?page=2", "http://a.test/list?sid=7"}},
		{"kept when disabled", map[string]string{"TRAWL_STRIP_SESSION_IDS": "false"}, in},
		{"stripped and sorted", map[string]string{"TRAWL_SORT_QUERY": "true"}, []string{"http://a.test/cart?item=1", "http://a.test/list?page=2", "http://a.test/list?sid=7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startStack(t, redisproc.Options{}, tt.env)
			var ds []crawlmsg.Discovered
			for _, u := range in {
				ds = append(ds, link(u, 1))
			}
			s.publishDiscovered(t, ds...)
			got, ids := map[int][]string{}, map[string]int{}
			testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
			testwait.Eventually(t, 20*time.Second, "URLs on the frontier", func() bool {
				s.frontier(t, got, ids)
				return len(got[0])+len(got[1]) >= len(tt.want)
			})
			all := append(slices.Clone(got[0]), got[1]...)
			slices.Sort(all)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(all, want) {
				t.Errorf("frontier %q, want %q", all, want)
			}
		})
	}
}

// TestServiceBloomSpansManyKeys: a filter whose bits need hundreds of Redis strings
// (TRAWL_BLOOM_KEY_BITS far below the 2^32 a string holds) is pre-sized at start-up and
// works through the service like a single key.
func TestServiceBloomSpansManyKeys(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{
		"TRAWL_BLOOM_CAPACITY":   "1000000",
		"TRAWL_BLOOM_KEY_BITS":   "16384",
		"TRAWL_DEDUP_CACHE_SIZE": "0", // every repeat must be answered by the filter
	})
	c := redisClient(t, s.redis)
	ctx := testwait.Context(t)
	f, err := bloom.New(s.cfg.Common.RedisPrefix, s.cfg.Bloom)
	if err != nil {
		t.Fatal(err)
	}
	// The first layer: m = 11,027,754 bits (p/2) in keys of 16,384 bits.
	if f.Keys != 674 {
		t.Fatalf("Keys = %d, want 674", f.Keys)
	}
	if layer, _ := c.HGet(ctx, f.MetaKey(), "layer:0").Result(); layer != "1000000 11027754 8 674" {
		t.Errorf("meta layer:0 = %q, want n m k keys = 1000000 11027754 8 674", layer)
	}
	for j, key := range f.KeyNames() {
		want := int64(2048)
		if j == f.Keys-1 {
			want = int64((f.M - uint64(j)*16384 + 7) / 8)
		}
		if n, err := c.StrLen(ctx, key).Result(); err != nil || n != want {
			t.Fatalf("%s: %d bytes (%v), want %d: not pre-sized", key, n, err, want)
		}
	}

	const msgs, per = 20, 100
	for i := range msgs {
		var ds []crawlmsg.Discovered
		for j := range per {
			ds = append(ds, link(fmt.Sprintf("http://k%d.test/page/%d", j%13, i*per+j), 1))
		}
		s.publishDiscovered(t, ds...)
	}
	got, ids := map[int][]string{}, map[string]int{}
	testwait.Eventually(t, 30*time.Second, "every URL on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) >= msgs*per
	})
	empty := 0
	// The last key holds only the 419 bits left over; it may well be empty.
	for _, key := range f.KeyNames()[:f.Keys-1] {
		if n, _ := c.BitCount(ctx, key, nil).Result(); n == 0 {
			empty++
		}
	}
	// 14,000 bits over 585 full keys: each is missed with probability e^(−24).
	if empty != 0 {
		t.Errorf("%d of 585 full keys have no bit set after %d URLs", empty, msgs*per)
	}
	// The same URLs again, in other messages: all seen, nothing new.
	for i := range msgs {
		var ds []crawlmsg.Discovered
		for j := range per {
			ds = append(ds, link(fmt.Sprintf("http://k%d.test/page/%d", j%13, i*per+j), 2))
		}
		s.publishDiscovered(t, ds...)
	}
	testwait.Eventually(t, 30*time.Second, "repeats handled", func() bool {
		return s.metric(t, `trawl_dedup_urls_total{result="seen"}`) == msgs*per
	})
	s.frontier(t, got, ids)
	if n := len(got[0]) + len(got[1]); n != msgs*per {
		t.Errorf("%d URLs on the frontier, want %d", n, msgs*per)
	}
}

// TestCacheHitRateSyntheticWeb feeds the links a crawl of the synthetic web discovers, in
// breadth-first order, one message per page, through the cached seen test against a real
// Redis, and reports the cache's hit rate at several sizes. Whatever the size, every URL
// must come out new exactly once.
func TestCacheHitRateSyntheticWeb(t *testing.T) {
	t.Parallel()
	web, err := synthweb.Start(context.Background(), synthweb.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { web.Close() })
	const depth = 20
	walk := web.Walk(depth)
	norm := urlnorm.Options{StripSessionIDs: true}
	var pages [][]string
	distinct := map[string]bool{}
	total := 0
	for _, d := range walk {
		var us []string
		for _, l := range d.Links {
			u, err := urlnorm.NormalizeWith(l, norm)
			if err != nil {
				t.Fatal(err)
			}
			us = append(us, u)
			distinct[u] = true
		}
		total += len(us)
		pages = append(pages, us)
	}
	for _, s := range web.Seeds() {
		distinct[s] = true
	}
	_, c := startRedis(t)
	for _, size := range []int{50_000, 1000, 100} {
		t.Run(fmt.Sprintf("cache %d", size), func(t *testing.T) {
			ctx := testwait.Context(t)
			prefix := fmt.Sprintf("web%d", size)
			f := newFilter(t, c, prefix, smallParams)
			ch := &seen.Cached{Store: seen.New(c, f, prefix), Cache: cache.New(size)}
			// Seeds first, as the crawl starts.
			seeds := seen.Message{ID: "seeds"}
			for i, s := range web.Seeds() {
				seeds.URLs = append(seeds.URLs, seen.URL{Index: i, URL: s})
			}
			if _, err := ch.Check(ctx, []seen.Message{seeds}); err != nil {
				t.Fatal(err)
			}
			newOnce := map[string]int{}
			for _, s := range web.Seeds() {
				newOnce[s]++
			}
			var lookups, hits int
			// Batches of 32 pages, as TRAWL_PARSE_BATCH groups them upstream.
			for start := 0; start < len(pages); start += 32 {
				var msgs []seen.Message
				for p := start; p < min(start+32, len(pages)); p++ {
					m := seen.Message{ID: "page:" + strconv.Itoa(p)}
					for i, u := range pages[p] {
						m.URLs = append(m.URLs, seen.URL{Index: i, URL: u})
					}
					msgs = append(msgs, m)
				}
				res, err := ch.Check(ctx, msgs)
				if err != nil {
					t.Fatal(err)
				}
				lookups, hits = lookups+res.Lookups, hits+res.Hits
				for i, m := range msgs {
					for _, idx := range res.New[i] {
						newOnce[m.URLs[idx].URL]++
					}
				}
			}
			for u := range distinct {
				if newOnce[u] != 1 {
					t.Errorf("%s new %d times, want once", u, newOnce[u])
				}
			}
			if len(newOnce) != len(distinct) {
				t.Errorf("%d URLs new, %d distinct", len(newOnce), len(distinct))
			}
			ratio := float64(hits) / float64(lookups)
			t.Logf("synthetic web (DefaultConfig, depth %d): %d pages, %d links, %d distinct URLs; cache of %d: %d of %d lookups hit (%.1f %%)",
				depth, len(pages), total, len(distinct), size, hits, lookups, 100*ratio)
			if size >= len(distinct) {
				// Nothing is ever evicted: every repeat of a URL is a hit.
				if want := total - (len(distinct) - len(web.Seeds())); hits != want {
					t.Errorf("%d hits, want %d (every link but the first to each URL)", hits, want)
				}
			}
		})
	}
}

// At TRAWL_FSYNC=1s a published message's memo stays until the trim, which goes by the
// ack floor, and so by acks settled a window after the outputs were stored: an OS crash
// that kept a Forget in Redis but lost the outputs and the ack in NATS would otherwise
// have the message come back to find its URLs seen and publish nothing. At always the
// memo is forgotten once the outputs are stored.
func TestServiceKeepsMemosUntilTheTrim(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"always", "1s"} {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_FSYNC": level, "TRAWL_DEDUP_MEMO_TRIM_INTERVAL": "1s",
				"TRAWL_DEDUP_CACHE_SIZE": "0"})
			c := redisClient(t, s.redis)
			s.publishDiscovered(t, link("http://a.test/p/1", 1), link("http://a.test/p/2", 1))
			got, ids := map[int][]string{}, map[string]int{}
			testwait.Eventually(t, 20*time.Second, "the message's URLs on the frontier", func() bool {
				s.frontier(t, got, ids)
				return len(got[0]) == 2
			})
			memos := func() int64 {
				n, err := c.HLen(context.Background(), "trawl:{dedup}:memo").Result()
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			if level == "always" {
				testwait.Eventually(t, 10*time.Second, "the memo forgotten once the outputs are stored", func() bool { return memos() == 0 })
				return
			}
			if n := memos(); n != 1 {
				t.Fatalf("%d memos right after the outputs were stored, want the message's, kept for the trim", n)
			}
			testwait.Eventually(t, 20*time.Second, "the memo trimmed once the settled ack moved the floor", func() bool { return memos() == 0 })
		})
	}
}
