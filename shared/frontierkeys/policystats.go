package frontierkeys

import (
	"cmp"
	"slices"
)

// RuleStats are one rule's counters (Shard.PolicyStats, Reader.PolicyStats), summed over
// the shards, as the status page and trawlctl status list them.
type RuleStats struct {
	Scope    string `json:"scope"`
	Hosts    int64  `json:"hosts"`
	Requests int64  `json:"requests"`
	Blocked  int64  `json:"blocked"`
	Parked   int64  `json:"parked"`
	Excluded int64  `json:"excluded"`
}

// Activity is what a rule did: the URLs it held back (blocked, excluded) and the requests
// made under it.
func (r RuleStats) Activity() int64 { return r.Blocked + r.Excluded + r.Requests }

// ActiveRules is the rules in force with their counters, the most active first, at most
// top of them: a crawl of 10,000 rules shows its busiest, and says how many there are.
type ActiveRules struct {
	Version int64       `json:"version"`
	Total   int         `json:"total"` // rules in force
	Shown   []RuleStats `json:"shown"`
}

// TopRules orders the rules in force (scopes, each with its counters or none): those
// parking URLs now first, most parked first (what an operator most needs to see), then by
// Activity, hosts matched and scope; it keeps the first top. Counters of scopes no longer
// in force (a removed rule) are left out.
func TopRules(stats map[string]PolicyStat, scopes []string, version int64, top int) ActiveRules {
	rows := make([]RuleStats, 0, len(scopes))
	for _, s := range scopes {
		st := stats[s]
		rows = append(rows, RuleStats{Scope: s, Hosts: st.Hosts, Requests: st.Requests, Blocked: st.Blocked, Parked: st.Parked, Excluded: st.Excluded})
	}
	slices.SortFunc(rows, func(a, b RuleStats) int {
		return cmp.Or(cmp.Compare(b.Parked, a.Parked), cmp.Compare(b.Activity(), a.Activity()), cmp.Compare(b.Hosts, a.Hosts), cmp.Compare(a.Scope, b.Scope))
	})
	return ActiveRules{Version: version, Total: len(scopes), Shown: rows[:min(len(rows), max(top, 0))]}
}
