package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

// times and versions vary: the tests compare output with them blanked.
var stamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

func blank(s string) string { return stamp.ReplaceAllString(s, "T") }

func expectRun(t *testing.T, inv invocation, want string, args ...string) {
	t.Helper()
	r := inv.run(t, args...)
	if r.code != 0 {
		t.Fatalf("trawlctl %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	if got := blank(r.stdout); got != want {
		t.Fatalf("trawlctl %s printed:\n%s\nwant:\n%s", strings.Join(args, " "), got, want)
	}
}

func TestPolicySetGetLsRmLog(t *testing.T) {
	s := startStack(t, 1)
	inv := s.inv
	inv.env["USER"] = "alice"

	expectRun(t, inv, "+ host:www.example.com: min_delay=2s connections=2\nversion 1\n",
		"policy", "set", "host:WWW.example.com", "min_delay=2s", "connections=2")
	// Flags after the fields; the fields given change, the others stay.
	expectRun(t, inv, "~ host:www.example.com: connections 2 → 4, block (unset) → true, note \"\" → \"owner asked\"\nversion 2\n",
		"policy", "set", "host:www.example.com", "connections=4", "block=true", "-note", "owner asked", "-by", "bob")
	expectRun(t, inv, "no change (version 2)\n", "policy", "set", "host:www.example.com", "connections=4")
	expectRun(t, inv, "+ surt:http://(com,example,www,)/private/: block=true\nversion 3\n",
		"policy", "set", "https://www.example.com/private/", "block=true")
	expectRun(t, inv, "scope: host:www.example.com\nmin_delay: 2s\nconnections: 4\nblock: true\nnote: owner asked\norigin: version 2, T, by bob, set by hand\n",
		"policy", "get", "host:www.example.com")
	expectRun(t, inv, "host:www.example.com  min_delay=2s connections=4 block=true note=\"owner asked\"  (version 2, T, by bob, set by hand)\n"+
		"surt:http://(com,example,www,)/private/  block=true  (version 3, T, by alice, set by hand)\n2 rules, version 3\n",
		"policy", "ls")
	expectRun(t, inv, "- host:www.example.com: min_delay=2s connections=4 block=true note=\"owner asked\"\nversion 4\n",
		"policy", "rm", "host:www.example.com")
	expectRun(t, inv, "4 T by alice, set by hand: - host:www.example.com: min_delay=2s connections=4 block=true note=\"owner asked\"\n"+
		"3 T by alice, set by hand: + surt:http://(com,example,www,)/private/: block=true\n",
		"policy", "log", "-n", "2")

	t.Run("refusals are one line naming the scope, and change nothing", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"policy", "set", "https://www.example.com/private/", "min_delay=2s"}, ExitFailure, "surt:http://(com,example,www,)/private/: min_delay: a URL prefix rule may not set it"},
			{[]string{"policy", "set", "domain:co.uk", "block=true"}, ExitUsage, "public suffix"},
			{[]string{"policy", "set", "host:a.example", "speed=3"}, ExitUsage, "speed: no such field"},
			{[]string{"policy", "set", "host:a.example"}, ExitUsage, "want SCOPE and at least one field=value"},
			{[]string{"policy", "get", "host:none.example"}, ExitFailure, "no rule for host:none.example"},
		} {
			expectOneLine(t, inv.run(t, tt.args...), tt.code, tt.want)
		}
		if v, _ := policy.NewStore(s.rdb, "trawl").Version(testwait.Context(t)); v != 4 {
			t.Fatalf("version %d after refusals, want 4", v)
		}
	})
}

func TestPolicyApplyFile(t *testing.T) {
	s := startStack(t, 2)
	inv := s.inv
	inv.env["USER"] = "ops"
	ctx := testwait.Context(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	write := func(body string) {
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Queued URLs: www.example.com on shard 0 (3 queued, 1 parked), shop.example.com on
	// shard 1 (2 queued), other.org on shard 1.
	s0, s1 := frontierkeys.ForShard("trawl", 0, 2), frontierkeys.ForShard("trawl", 1, 2)
	for _, c := range [][]any{
		{"HSET", s0.Hosts(), "www.example.com", "1"},
		// private/b carries data after its URL, as an entry of a URL with extras does.
		{"RPUSH", s0.BackQueue("www.example.com"), "0 0 0 https://www.example.com/private/a", "0 0 0 https://www.example.com/private/b eyJyIjoiaHR0cHM6Ly9yZWYuZXhhbXBsZS8ifQ", "0 0 0 https://www.example.com/pub"},
		{"HSET", s0.Parked(), "www.example.com", "blocked 1"},
		{"RPUSH", s0.Park("www.example.com"), "0 0 0 https://www.example.com/private/c"},
		{"HSET", s1.Hosts(), "shop.example.com", "1", "other.org", "1"},
		{"RPUSH", s1.BackQueue("shop.example.com"), "0 0 0 https://shop.example.com/1", "0 0 0 https://shop.example.com/2"},
		{"RPUSH", s1.BackQueue("other.org"), "0 0 0 https://other.org/1"},
	} {
		if err := s.rdb.Do(ctx, c...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	expectRun(t, inv, "+ host:hand.example.org: block=true\nversion 1\n", "policy", "set", "host:hand.example.org", "block=true")

	write(`- scope: domain:example.com
  min_delay: 2s
- scope: https://www.example.com/private/
  block: true
`)
	expectRun(t, inv, "+ domain:example.com: min_delay=2s\n    queued URLs touched: 6 on 2 hosts\n"+
		"+ surt:http://(com,example,www,)/private/: block=true\n    queued URLs touched: 3 on 1 hosts\n"+
		"dry run: 2 changes at version 1, nothing applied\n",
		"policy", "apply", "-f", file, "-dry-run")
	expectRun(t, inv, "+ domain:example.com: min_delay=2s\n+ surt:http://(com,example,www,)/private/: block=true\nversion 2\n",
		"policy", "apply", "-f", file)
	expectRun(t, inv, "no change (version 2)\n", "policy", "apply", "-f", file)
	expectRun(t, inv, "domain:example.com  min_delay=2s  (version 2, T, by ops, rules.yaml:1)\n"+
		"host:hand.example.org  block=true  (version 1, T, by ops, set by hand)\n"+
		"surt:http://(com,example,www,)/private/  block=true  (version 2, T, by ops, rules.yaml:3)\n3 rules, version 2\n",
		"policy", "ls")

	// The prefix rule leaves the file: removed; the rule set by hand stays.
	write(`- scope: domain:example.com
  min_delay: 3s
`)
	expectRun(t, inv, "~ domain:example.com: min_delay 2s → 3s\n- surt:http://(com,example,www,)/private/: block=true\nversion 3\n",
		"policy", "apply", "-f", file, "-by", "carol")
	expectRun(t, inv, "- host:hand.example.org: block=true\n    queued URLs touched: 0 on 0 hosts\ndry run: 1 changes at version 3, nothing applied\n",
		"policy", "apply", "-f", file, "-prune", "-dry-run")
	expectRun(t, inv, "- host:hand.example.org: block=true\nversion 4\n", "policy", "apply", "-f", file, "-prune")

	t.Run("a bad file names its line and changes nothing", func(t *testing.T) {
		write("- scope: domain:example.com\n  min_delay: 3s\n- scope: host:x.example.com\n  conections: 2\n")
		expectOneLine(t, inv.run(t, "policy", "apply", "-f", file), ExitUsage, `rules.yaml:3: host:x.example.com: unknown field "conections"`)
		if v, _ := policy.NewStore(s.rdb, "trawl").Version(ctx); v != 4 {
			t.Fatalf("version %d, want 4", v)
		}
	})
}
