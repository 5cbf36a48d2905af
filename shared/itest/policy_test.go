package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

func policyRule(t *testing.T, scope string, f func(r *policy.Rule)) policy.Rule {
	t.Helper()
	sc, err := policy.ParseScope(scope)
	if err != nil {
		t.Fatal(err)
	}
	r := policy.Rule{Scope: sc}
	f(&r)
	return r
}

func pdur(t *testing.T, s string) *policy.Duration {
	d, err := policy.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return &d
}

func set(r policy.Rule, source string) policy.Change { return policy.Change{Rule: r, Source: source} }

// Apply changes the rules, the version and the audit log together; Plan shows the same
// diffs without changing anything; a change equal to the stored rule is no change; a
// bad rule is refused, naming its scope, and stores nothing.
func TestPolicyStoreApply(t *testing.T) {
	t.Parallel()
	srv := redisproc.StartT(t, redisproc.Options{FsyncAlways: true})
	rdb := redisClient(t, srv)
	ctx := testwait.Context(t)
	st := policy.NewStore(rdb, "trawl")

	if v, err := st.Version(ctx); err != nil || v != 0 {
		t.Fatalf("empty store: Version = %d, %v; want 0", v, err)
	}
	two := 2
	hostRule := policyRule(t, "host:www.example.com", func(r *policy.Rule) { r.Connections = &two })
	domRule := policyRule(t, "domain:example.com", func(r *policy.Rule) { r.MinDelay = pdur(t, "3s") })
	changes := []policy.Change{set(hostRule, "rules.yaml:3"), set(domRule, "rules.yaml:7")}

	diffs, err := st.Plan(ctx, changes)
	if err != nil || len(diffs) != 2 || diffs[0].Old != nil || diffs[0].New == nil {
		t.Fatalf("Plan = %+v, %v; want two new rules", diffs, err)
	}
	if v, _ := st.Version(ctx); v != 0 {
		t.Fatalf("Plan changed the version to %d", v)
	}

	v, diffs, err := st.Apply(ctx, changes, "ops", 0)
	if err != nil || v != 1 || len(diffs) != 2 {
		t.Fatalf("Apply = %d, %d diffs, %v; want version 1, 2 diffs", v, len(diffs), err)
	}
	s, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version() != 1 || len(s.Rules()) != 2 {
		t.Fatalf("Load: version %d, %d rules", s.Version(), len(s.Rules()))
	}
	res := s.URL("https://www.example.com/a")
	if res.Connections == nil || *res.Connections != 2 || res.MinDelay == nil || res.MinDelay.String() != "3s" {
		t.Fatalf("loaded policy %+v", res.Rule)
	}
	if o := res.From[policy.FConnections].Origin; o.Version != 1 || o.By != "ops" || o.Source != "rules.yaml:3" || o.At.IsZero() {
		t.Fatalf("origin %+v", o)
	}

	t.Run("an equal change is no change", func(t *testing.T) {
		v, diffs, err := st.Apply(ctx, []policy.Change{set(hostRule, "rules.yaml:3")}, "ops", 0)
		if err != nil || v != 1 || len(diffs) != 0 {
			t.Fatalf("Apply = %d, %v, %v; want version 1 and no diff", v, diffs, err)
		}
	})

	t.Run("a bad rule stores nothing and names its scope", func(t *testing.T) {
		zero := 0
		bad := policyRule(t, "host:bad.example.com", func(r *policy.Rule) { r.Connections = &zero })
		_, _, err := st.Apply(ctx, []policy.Change{set(bad, ""), {Remove: true, Rule: hostRule}}, "ops", 0)
		if err == nil || !strings.Contains(err.Error(), "host:bad.example.com") {
			t.Fatalf("Apply = %v; want an error naming host:bad.example.com", err)
		}
		if s, _ := st.Load(ctx); s.Version() != 1 || len(s.Rules()) != 2 {
			t.Fatalf("after a refused apply: version %d, %d rules", s.Version(), len(s.Rules()))
		}
	})

	t.Run("ifVersion: an apply planned before another change is refused", func(t *testing.T) {
		block := true
		b := policyRule(t, "host:www.example.com", func(r *policy.Rule) { r.Block = &block })
		_, _, err := st.Apply(ctx, []policy.Change{set(b, "")}, "ops", 7)
		if !errors.Is(err, policy.ErrVersionMoved) {
			t.Fatalf("Apply at version 7 of a store at 1 = %v; want ErrVersionMoved", err)
		}
		v, diffs, err := st.Apply(ctx, []policy.Change{set(b, "")}, "alice", 1)
		if err != nil || v != 2 || len(diffs) != 1 || diffs[0].Old == nil || diffs[0].Old.Connections == nil {
			t.Fatalf("Apply at version 1 = %d, %+v, %v", v, diffs, err)
		}
	})

	t.Run("remove", func(t *testing.T) {
		v, diffs, err := st.Apply(ctx, []policy.Change{{Remove: true, Rule: domRule}, {Remove: true, Rule: policy.Rule{Scope: policy.Scope{Kind: policy.KindHost, Value: "never.example"}}}}, "bob", 0)
		if err != nil || v != 3 || len(diffs) != 1 || diffs[0].New != nil {
			t.Fatalf("Apply remove = %d, %+v, %v; want one removal", v, diffs, err)
		}
		if s, _ := st.Load(ctx); len(s.Rules()) != 1 {
			t.Fatalf("after remove: %v", s.Rules())
		}
	})

	t.Run("audit", func(t *testing.T) {
		log, err := st.Audit(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range log {
			got = append(got, fmt.Sprintf("v%d %s by=%s old=%v new=%v", e.Version, e.Scope, e.By, e.Old != nil, e.New != nil))
		}
		want := []string{
			"v3 domain:example.com by=bob old=true new=false",
			"v2 host:www.example.com by=alice old=true new=true",
			"v1 domain:example.com by=ops old=false new=true",
			"v1 host:www.example.com by=ops old=false new=true",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("audit, newest first:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if e := log[1]; e.Old.Connections == nil || e.New.Block == nil || e.New.Origin.Version != 2 {
			t.Fatalf("audit entry old %+v new %+v", e.Old, e.New)
		}
		if last, _ := st.Audit(ctx, 1); len(last) != 1 || last[0].Version != 3 {
			t.Fatalf("Audit(1) = %+v", last)
		}
	})

	t.Run("a restart of Redis keeps the rules", func(t *testing.T) {
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		var s *policy.Set
		testwait.Eventually(t, 10*time.Second, "the rules read after Redis restarted", func() bool {
			var err error
			s, err = st.Load(ctx)
			return err == nil
		})
		if s.Version() != 3 || len(s.Rules()) != 1 || !s.Host("www.example.com").Blocked() {
			t.Fatalf("after restart: version %d, rules %v", s.Version(), s.Rules())
		}
	})
}

// Concurrent applies without ifVersion all land, each at its own version, each audited.
func TestPolicyStoreConcurrentApplies(t *testing.T) {
	t.Parallel()
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	ctx := testwait.Context(t)
	st := policy.NewStore(rdb, "trawl")
	const n = 16
	var wg sync.WaitGroup
	versions := make([]int64, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := i + 1
			r := policyRule(t, fmt.Sprintf("host:h%d.example.com", i), func(r *policy.Rule) { r.MaxDepth = &d })
			versions[i], _, errs[i] = st.Apply(ctx, []policy.Change{set(r, "")}, "race", 0)
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	for i := range versions {
		if errs[i] != nil {
			t.Fatalf("apply %d: %v", i, errs[i])
		}
		if seen[versions[i]] {
			t.Fatalf("two applies got version %d", versions[i])
		}
		seen[versions[i]] = true
	}
	s, err := st.Load(ctx)
	if err != nil || s.Version() != n || len(s.Rules()) != n {
		t.Fatalf("Load = version %d, %d rules, %v; want %d and %d", s.Version(), len(s.Rules()), err, n, n)
	}
	if log, _ := st.Audit(ctx, 0); len(log) != n {
		t.Fatalf("%d audit entries, want %d", len(log), n)
	}
}

// In a Redis Cluster the apply script's keys share the {policy} hash tag.
func TestPolicyStoreCluster(t *testing.T) {
	t.Parallel()
	_, ctx, rdb := connectCluster(t)
	st := policy.NewStore(rdb, "trawl")
	block := true
	r := policyRule(t, "domain:example.org", func(r *policy.Rule) { r.Block = &block })
	if _, _, err := st.Apply(ctx, []policy.Change{set(r, "")}, "ops", 0); err != nil {
		t.Fatalf("apply on a cluster: %v", err)
	}
	s, err := st.Load(ctx)
	if err != nil || !s.Host("a.example.org").Blocked() {
		t.Fatalf("Load on a cluster: %v", err)
	}
	k := policy.KeysFor("trawl")
	for _, key := range []string{k.Rules, k.Version, k.Audit} {
		if !strings.Contains(key, ":{policy}:") {
			t.Fatalf("key %s outside the {policy} hash tag", key)
		}
	}
}

// A watcher that keeps only some fields (policy.OnlyFields) holds only the rules that set
// one of them, and resolves each of those fields as the whole set does: a more specific
// rule that sets none of them is dropped without hiding a wider rule that sets one. It
// loads changes like any watcher.
func TestPolicyWatcherOnlyFields(t *testing.T) {
	srv := redisproc.StartT(t, redisproc.Options{})
	rdb := redisClient(t, srv)
	ctx := testwait.Context(t)
	st := policy.NewStore(rdb, "trawl")
	depth := func(n int) func(r *policy.Rule) { return func(r *policy.Rule) { r.MaxDepth = &n } }
	slow := func(r *policy.Rule) { r.MinDelay = pdur(t, "5s") }
	render := "always"
	changes := []policy.Change{
		set(policyRule(t, "domain:example.com", depth(2)), ""),
		set(policyRule(t, "host:www.example.com", slow), ""),
		set(policyRule(t, "host:docs.example.com", func(r *policy.Rule) { slow(r); r.Render = &render }), ""),
		set(policyRule(t, "host:other.example", slow), ""),
	}
	if _, _, err := st.Apply(ctx, changes, "ops", 0); err != nil {
		t.Fatal(err)
	}
	all, err := policy.NewWatcher(ctx, st, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	w, err := policy.NewWatcher(ctx, st, 50*time.Millisecond, policy.OnlyFields(policy.FMaxDepth, policy.FRender))
	if err != nil {
		t.Fatal(err)
	}
	scopes := func(s *policy.Set) string {
		var out []string
		for _, r := range s.Rules() {
			out = append(out, r.Scope.String())
		}
		return strings.Join(out, " ")
	}
	if got, want := scopes(w.Current()), "domain:example.com host:docs.example.com"; got != want {
		t.Errorf("rules held: %s, want %s", got, want)
	}
	if w.Current().Version() != all.Current().Version() {
		t.Errorf("version %d, want the store's %d", w.Current().Version(), all.Current().Version())
	}
	for _, u := range []string{"http://www.example.com/a", "http://docs.example.com/b", "http://other.example/", "http://example.com/"} {
		got, want := w.Current().URL(u), all.Current().URL(u)
		for _, f := range []policy.Field{policy.FMaxDepth, policy.FRender} {
			if got.DecidedBy(f) != want.DecidedBy(f) {
				t.Errorf("%s: %s decided by %q, by %q in the whole set", u, f, got.DecidedBy(f), want.DecidedBy(f))
			}
		}
		gotOK, _ := w.Current().Admit(u, 3)
		wantOK, _ := all.Current().Admit(u, 3)
		if gotOK != wantOK {
			t.Errorf("%s at depth 3: admitted %v, %v by the whole set", u, gotOK, wantOK)
		}
	}
	if ok, _ := w.Current().Admit("http://www.example.com/a", 3); ok {
		t.Error("www.example.com admitted at depth 3, past its domain's max depth 2")
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	if _, _, err := st.Apply(ctx, []policy.Change{set(policyRule(t, "host:other.example", func(r *policy.Rule) { slow(r); depth(5)(r) }), "")}, "ops", 0); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 2*time.Second, "the watcher to hold the rule that now sets a max depth", func() bool {
		return scopes(w.Current()) == "domain:example.com host:docs.example.com host:other.example"
	})
}

// The watcher loads a change within a poll, tells its callbacks in order, keeps the last
// rules while Redis does not answer (Stale says how long), and catches up after.
func TestPolicyWatcher(t *testing.T) {
	srv := redisproc.StartT(t, redisproc.Options{})
	rdb := redisClient(t, srv)
	ctx := testwait.Context(t)
	st := policy.NewStore(rdb, "trawl")
	w, err := policy.NewWatcher(ctx, st, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if w.Current().Version() != 0 {
		t.Fatalf("first load: version %d", w.Current().Version())
	}
	var (
		mu    sync.Mutex
		calls []string
	)
	for _, name := range []string{"first", "second"} {
		w.OnChange(func(old, new *policy.Set) {
			mu.Lock()
			calls = append(calls, fmt.Sprintf("%s %d→%d", name, old.Version(), new.Version()))
			mu.Unlock()
		})
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	block := true
	r := policyRule(t, "host:www.example.com", func(r *policy.Rule) { r.Block = &block })
	if _, _, err := st.Apply(ctx, []policy.Change{set(r, "")}, "ops", 0); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 2*time.Second, "the watcher to load version 1", func() bool {
		return w.Current().Host("www.example.com").Blocked()
	})
	testwait.Eventually(t, time.Second, "both callbacks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 2
	})
	mu.Lock()
	if got := strings.Join(calls, ", "); got != "first 0→1, second 0→1" {
		t.Fatalf("callbacks: %s", got)
	}
	mu.Unlock()

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "Stale to report the store silent", func() bool { return w.Stale() > 200*time.Millisecond })
	if !w.Current().Host("www.example.com").Blocked() {
		t.Fatal("the rules were dropped while the store did not answer")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "Stale back to 0 after Redis answered again", func() bool { return w.Stale() == 0 })
}
