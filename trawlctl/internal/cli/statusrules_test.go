package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/trawlctl/internal/progress"
)

// TestStatusRules: trawlctl status lists the rules in force with their counters summed
// over the shards, the most active first, at most -rules of them, and how many there are;
// counters of a removed rule are left out.
func TestStatusRules(t *testing.T) {
	s := startStack(t, 2)
	frontierFixture(t, s.rdb, "trawl")
	ctx := testwait.Context(t)
	var changes []policy.Change
	for i := range 30 {
		sc, err := policy.ParseScope(fmt.Sprintf("host:h%02d.test", i))
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, policy.Change{Rule: policy.Rule{Scope: sc, Connections: ptr(2)}})
	}
	if _, _, err := policy.NewStore(s.rdb, "trawl").Apply(ctx, changes, "ops", 0); err != nil {
		t.Fatal(err)
	}
	stat := func(scope, counter string) string { return scope + "\t" + counter }
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		s0, s1 := frontierkeys.ForShard("trawl", 0, 2).PolicyStats(), frontierkeys.ForShard("trawl", 1, 2).PolicyStats()
		// h07 parked URLs on both shards; h03 made the most requests; h12 excluded some.
		p.HSet(ctx, s0, stat("host:h07.test", frontierkeys.PolicyStatParked), 4, stat("host:h07.test", frontierkeys.PolicyStatBlocked), 4, stat("host:h07.test", frontierkeys.PolicyStatHosts), 1)
		p.HSet(ctx, s1, stat("host:h07.test", frontierkeys.PolicyStatParked), 6, stat("host:h07.test", frontierkeys.PolicyStatBlocked), 6)
		p.HSet(ctx, s0, stat("host:h03.test", frontierkeys.PolicyStatRequests), 5, stat("host:h03.test", frontierkeys.PolicyStatHosts), 1)
		p.HSet(ctx, s1, stat("host:h03.test", frontierkeys.PolicyStatRequests), 4)
		p.HSet(ctx, s1, stat("host:h12.test", frontierkeys.PolicyStatExcluded), 2)
		// A rule removed since: its counters stay in Redis but it is not in force.
		p.HSet(ctx, s0, stat("host:gone.test", frontierkeys.PolicyStatRequests), 1000)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := s.inv.run(t, "status", "-json", "-sample", "0", "-rules", "3")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var snap progress.Snapshot
	if err := json.Unmarshal([]byte(r.stdout), &snap); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	want := []frontierkeys.RuleStats{
		{Scope: "host:h07.test", Hosts: 1, Blocked: 10, Parked: 10},
		{Scope: "host:h03.test", Hosts: 1, Requests: 9},
		{Scope: "host:h12.test", Excluded: 2},
	}
	if ar := snap.Rules; ar == nil || ar.Total != 30 || ar.Version != 1 || fmt.Sprint(ar.Shown) != fmt.Sprint(want) {
		t.Fatalf("rules %+v, want 30 in force at version 1, shown %+v", ar, want)
	}
	r = s.inv.run(t, "status", "-sample", "0", "-rules", "2")
	for _, w := range []string{
		"rules      30 site-policy rules in force (version 1), the 2 most active; counters summed over shards:",
		"    host:h07.test hosts=1 requests=0 blocked=10 parked=10 excluded=0",
		"    host:h03.test hosts=1 requests=9 blocked=0 parked=0 excluded=0",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("text lacks %q:\n%s", w, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "h12.test") || strings.Contains(r.stdout, "gone.test") {
		t.Errorf("text lists more than the 2 most active rules in force:\n%s", r.stdout)
	}
}
