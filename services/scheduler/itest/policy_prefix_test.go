package itest

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

func prefixBlock(t testing.TB, prefix string) policy.Rule {
	t.Helper()
	sc, err := policy.ParseScope(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return policy.Rule{Scope: sc, Block: pbool(true)}
}

// Two URL-prefix blocks on one host park their URLs (a fetcher answers parked; the
// policy table holds neither rule). Removing one, then narrowing the other, resumes
// exactly the URLs no longer blocked, in their order, while the URLs still under a block
// stay parked and are never dispatched; a later pass under the same rules moves nothing.
func TestPolicyPrefixUnblockResumesItsURLs(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	var set atomic.Pointer[policy.Set]
	set.Store(rules(t, 1, prefixBlock(t, "http://pfx.example/a/"), prefixBlock(t, "http://pfx.example/b/")))
	f.UsePolicy(set.Load)
	f.applyPolicy(set.Load())
	var us []crawlmsg.Discovered
	for i := range 3 {
		us = append(us, urls(0, fmt.Sprintf("http://pfx.example/a/%d", i), fmt.Sprintf("http://pfx.example/b/%d", i))...)
	}
	us = append(us, urls(0, "http://pfx.example/free")...)
	f.add("m1", us...)

	// fetch plays the fetchers, holding the rules in force: a blocked URL is parked
	// without a request, any other fetched. It returns the URLs fetched.
	step := 0
	fetch := func() []string {
		var got []string
		for range 20 {
			step++
			now := at(time.Duration(step) * time.Minute)
			for _, tk := range f.dispatch(now, 10) {
				o := ok200(tk)
				if set.Load().URL(tk.URL).Blocked() {
					o = outcome(tk, crawlmsg.OutcomeParked, 0)
					o.Requested = false
				} else {
					got = append(got, tk.URL)
				}
				f.complete(now.Add(time.Second), o)
			}
		}
		return got
	}
	if got := fetch(); !slices.Equal(got, []string{"http://pfx.example/free"}) {
		t.Fatalf("fetched %v under both blocks, want only /free", got)
	}
	if got := urlsOf(f.parkList("pfx.example")); len(got) != 6 {
		t.Fatalf("park list %v, want the 6 blocked URLs", got)
	}

	steps := []struct {
		name   string
		rules  []policy.Rule
		resume []string
		parked []string
	}{
		{"remove /a/", []policy.Rule{prefixBlock(t, "http://pfx.example/b/")},
			[]string{"http://pfx.example/a/0", "http://pfx.example/a/1", "http://pfx.example/a/2"},
			[]string{"http://pfx.example/b/0", "http://pfx.example/b/1", "http://pfx.example/b/2"}},
		{"narrow /b/ to /b/1", []policy.Rule{prefixBlock(t, "http://pfx.example/b/1")},
			[]string{"http://pfx.example/b/0", "http://pfx.example/b/2"},
			[]string{"http://pfx.example/b/1"}},
	}
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			set.Store(rules(t, int64(2+i), st.rules...))
			a := f.applyPolicy(set.Load())
			if a.Resumed != int64(len(st.resume)) {
				t.Fatalf("resumed %d, want %d (%v); park list %v", a.Resumed, len(st.resume), st.resume,
					urlsOf(f.parkList("pfx.example")))
			}
			if got := urlsOf(f.parkList("pfx.example")); !slices.Equal(got, st.parked) {
				t.Fatalf("park list %v, want %v", got, st.parked)
			}
			if a := f.applyPolicy(set.Load()); a.Resumed != 0 {
				t.Fatalf("a second pass under the same rules resumed %d", a.Resumed)
			}
			got := fetch()
			if !slices.Equal(got, st.resume) {
				t.Fatalf("fetched %v, want %v in order", got, st.resume)
			}
			if s := f.stats(); s.Parked != int64(len(st.parked)) || s.Queued != 0 {
				t.Fatalf("stats %+v, want %d parked and none queued", s, len(st.parked))
			}
		})
	}
}

// A park list longer than one sift call's chunk is sifted chunk by chunk from its end: the
// URLs resumed arrive in the list's order and the URLs kept stay parked in theirs.
func TestPolicyPrefixUnblockLongParkList(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	var us []crawlmsg.Discovered
	for i := range 2500 {
		us = append(us, urls(0, fmt.Sprintf("http://pfx.example/%c/%d", "ab"[i%3%2], i))...)
	}
	f.add("m1", us...)
	if tasks := f.dispatch(at(0), 10); len(tasks) != 1 {
		t.Fatalf("dispatched %v", tasks)
	}
	both := rules(t, 1, prefixBlock(t, "http://pfx.example/a/"), prefixBlock(t, "http://pfx.example/b/"))
	f.applyPolicy(both)
	if _, err := f.RecheckScope(testwait.Context(t), both, frontier.ScopeChanged(nil, both)); err != nil {
		t.Fatal(err)
	}
	parked := urlsOf(f.parkList("pfx.example"))
	var wantA, wantB []string
	for _, u := range parked {
		if strings.Contains(u, "/a/") {
			wantA = append(wantA, u)
		} else {
			wantB = append(wantB, u)
		}
	}
	if len(parked) != 2499 || len(wantA) < 1500 {
		t.Fatalf("parked %d URLs, %d of /a/", len(parked), len(wantA))
	}
	a := f.applyPolicy(rules(t, 2, prefixBlock(t, "http://pfx.example/b/")))
	if a.Resumed != int64(len(wantA)) {
		t.Fatalf("resumed %d, want %d", a.Resumed, len(wantA))
	}
	if got := urlsOf(f.parkList("pfx.example")); !slices.Equal(got, wantB) {
		t.Fatalf("park list of %d, want the %d /b/ URLs in order", len(got), len(wantB))
	}
	fq := urlsOf(rdb.LRange(testwait.Context(t), frontierkeys.ForShard("t", 0, 1).FrontQueue(0), 0, int64(len(wantA))-1).Val())
	if !slices.Equal(fq, wantA) {
		t.Fatalf("front queue 0 starts %v…, want the resumed URLs in order %v…", fq[:3], wantA[:3])
	}
}
