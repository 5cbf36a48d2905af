package itest

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/redisx"
)

//go:embed testdata/politeness/*.lua
var politenessLua embed.FS

// The harness runs the module's next_fetch on the arguments of one table row.
var nextFetchScript = redisx.Script(
	redisx.Lua{FS: politenessLua, Name: "testdata/politeness/rules.lua"},
	politeness.Module,
	redisx.Lua{FS: politenessLua, Name: "testdata/politeness/next_fetch.lua"})

// TestPolitenessLuaMatchesGo checks the rule the frontier's scripts apply (politeness.lua)
// against politeness.Rules, row by row: the two must give the same next fetch time to the
// millisecond, and the same capped flag.
func TestPolitenessLuaMatchesGo(t *testing.T) {
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	defaults := politeness.Defaults
	fast := politeness.Rules{MinDelay: 0, DelayFactor: 0, MaxCrawlDelay: 30 * time.Second,
		RetryBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	odd := politeness.Rules{MinDelay: 250 * time.Millisecond, DelayFactor: 1.5, MaxCrawlDelay: 10 * time.Second,
		RetryBackoff: 30 * time.Second, MaxBackoff: 10 * time.Minute}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name string
		r    politeness.Rules
		h    politeness.Host
		o    politeness.Outcome
		want time.Duration // from now
	}{
		{"a request waits the minimum delay", defaults, politeness.Host{}, politeness.Outcome{Requested: true, Took: 100 * time.Millisecond}, time.Second},
		{"a slow response waits k times it", defaults, politeness.Host{}, politeness.Outcome{Requested: true, Took: 400 * time.Millisecond}, 2 * time.Second},
		{"Crawl-delay wins over the minimum", defaults, politeness.Host{CrawlDelay: 7 * time.Second}, politeness.Outcome{Requested: true, Took: 10 * time.Millisecond}, 7 * time.Second},
		{"Crawl-delay is capped", defaults, politeness.Host{CrawlDelay: time.Hour}, politeness.Outcome{Requested: true}, 30 * time.Second},
		{"a fractional k rounds half to even", odd, politeness.Host{}, politeness.Outcome{Requested: true, Took: 333 * time.Millisecond}, 500 * time.Millisecond},
		{"no request keeps the stored time", defaults, politeness.Host{Next: now.Add(3 * time.Second)}, politeness.Outcome{}, 3 * time.Second},
		{"no request, time passed: now", defaults, politeness.Host{Next: ago(time.Minute)}, politeness.Outcome{}, 0},
		{"a request ignores the stored time", defaults, politeness.Host{Next: now.Add(time.Hour)}, politeness.Outcome{Requested: true}, time.Second},
		{"late: a full gap with the last response", defaults, politeness.Host{Next: ago(time.Second), LastResponse: 600 * time.Millisecond}, politeness.Outcome{Late: true}, 3 * time.Second},
		{"late: the stored time if later", defaults, politeness.Host{Next: now.Add(9 * time.Second)}, politeness.Outcome{Late: true}, 9 * time.Second},
		{"first error backs off the base", defaults, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 1}, 30 * time.Second},
		{"third error doubles twice", defaults, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 3}, 2 * time.Minute},
		{"backoff is capped", defaults, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 60}, 10 * time.Minute},
		{"a gap above the backoff wins", fast, politeness.Host{CrawlDelay: 5 * time.Second}, politeness.Outcome{Requested: true, ErrStreak: 1}, 5 * time.Second},
		{"Retry-After is honoured", defaults, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 1, Wait: 90 * time.Second}, 90 * time.Second},
		{"Retry-After is capped", fast, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 1, Wait: time.Hour}, time.Second},
		{"a deferred task waits as asked", defaults, politeness.Host{Next: ago(time.Second)}, politeness.Outcome{Wait: 4 * time.Second}, 4 * time.Second},
		{"no politeness at all", fast, politeness.Host{}, politeness.Outcome{Requested: true, Took: time.Second}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, capped := tt.r.NextFetch(now, tt.h, tt.o)
			if got := next.Sub(now); got != tt.want {
				t.Errorf("Go: next in %s, want %s", got, tt.want)
			}
			args := append(tt.r.Args(), now.UnixMilli(), b01(tt.o.Requested), tt.o.Took.Milliseconds(),
				tt.h.CrawlDelay.Milliseconds(), tt.h.Next.UnixMilli(), b01(tt.o.Late), tt.h.LastResponse.Milliseconds(),
				tt.o.ErrStreak, tt.o.Wait.Milliseconds())
			v, err := nextFetchScript.Run(ctx, rdb, nil, args...).StringSlice()
			if err != nil {
				t.Fatal(err)
			}
			luaNext, err := strconv.ParseInt(v[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if luaNext != next.UnixMilli() || (v[1] == "1") != capped {
				t.Errorf("Lua: next %d capped %s; Go: next %d capped %v", luaNext, v[1], next.UnixMilli(), capped)
			}
		})
	}
}

func b01(b bool) string { return fmt.Sprint(map[bool]int{false: 0, true: 1}[b]) }
