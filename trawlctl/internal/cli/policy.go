package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/policy/rulesfile"
	"github.com/trawl/trawl/trawlctl/internal/conn"
)

const policyDetail = `
A scope is host:NAME, domain:NAME (a registrable domain or a name under it, never a public
suffix), a URL prefix (https://example.com/private/, kept in SURT form), surt:PREFIX or
cidr:PREFIX (server addresses, under TRAWL_POLITENESS=ip). Fields: min_delay, delay_factor,
crawl_delay (exact or a cap), connections, host_budget, domain_budget, max_depth, include,
exclude, recrawl_min, recrawl_max, user_agent, headers.NAME, header_secrets.NAME, cookies,
credentials (secret names: the values are files in TRAWL_SECRETS_DIR), render, block, note.
Every change is versioned and audited (trawlctl policy log); every service applies it within
2 s.`

var policySetCmd = &command{
	name:    "policy set",
	args:    "SCOPE field=value... [-by NAME] [-note TEXT]",
	summary: "set fields of a scope's rule (field= unsets one)",
	detail: policyDetail + `

The fields given change; the rule's other fields stay. include=/exclude= given once replace
the list, given again add to it.`,
}

var policyGetCmd = &command{
	name:    "policy get",
	args:    "SCOPE",
	summary: "print a scope's rule and where it came from",
	detail:  policyDetail,
}

var policyLsCmd = &command{
	name:    "policy ls",
	summary: "list the rules, each with its origin (version, time, by, file line)",
}

var policyRmCmd = &command{
	name:    "policy rm",
	args:    "SCOPE... [-by NAME]",
	summary: "remove scopes' rules (blocked URLs resume)",
}

var policyApplyCmd = &command{
	name:    "policy apply",
	args:    "-f FILE [-dry-run] [-prune] [-by NAME]",
	summary: "make the rules agree with a rules file (-dry-run: show the changes and the queued URLs each touches)",
	detail: policyDetail + `

The file (YAML, a list of rules each with scope: and its fields; see the operations guide)
is the whole desired set of its own rules: each rule of the file is set, with the file's
name and the rule's line as its source, and a rule that came from a file of the same name
and is no longer in it is removed. Rules set by hand (policy set) or from other files stay,
unless -prune, which removes every rule the file does not hold. The apply is one change,
refused when another change landed since the file was compared with the store.`,
}

var policyLogCmd = &command{
	name:    "policy log",
	args:    "[-n N]",
	summary: "the audit log of rule changes, newest first",
}

func init() {
	policySetCmd.run = runPolicySet
	policyGetCmd.run = runPolicyGet
	policyLsCmd.run = runPolicyLs
	policyRmCmd.run = runPolicyRm
	policyApplyCmd.run = runPolicyApply
	policyLogCmd.run = runPolicyLog
}

// parseInterspersed parses flags anywhere among the arguments ("policy set SCOPE a=1 -by
// ops"), returning the other arguments in order.
func (e *env) parseInterspersed(c *command, fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := e.parse(c, fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func (e *env) byFlag(fs *flag.FlagSet) *string {
	def, _ := e.Lookup("USER")
	return fs.String("by", def, "who makes the change, for the audit log (default $USER)")
}

func (e *env) policyStore(ctx context.Context) (*policy.Store, func(), error) {
	rdb, err := conn.Redis(ctx, e.cfg.Conn)
	if err != nil {
		return nil, nil, err
	}
	return policy.NewStore(rdb, e.cfg.RedisPrefix), func() { rdb.Close() }, nil
}

// policyRules opens the store and reads the rules in force; done closes the connection.
func (e *env) policyRules(ctx context.Context) (*policy.Store, *policy.Set, func(), error) {
	st, done, err := e.policyStore(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	set, err := st.Load(ctx)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return st, set, done, nil
}

func parseScopeArg(s string) (policy.Scope, error) {
	sc, err := policy.ParseScope(s)
	if err != nil {
		return policy.Scope{}, usagef("%v", err)
	}
	return sc, nil
}

func runPolicySet(ctx context.Context, e *env, args []string) error {
	c := policySetCmd
	fs := e.flags(c)
	by := e.byFlag(fs)
	note := fs.String("note", "", "why the rule exists (kept with it)")
	e.connFlags(fs, false, true)
	rest, err := e.parseInterspersed(c, fs, args)
	if err != nil {
		return err
	}
	if len(rest) < 2 {
		return usagef("want SCOPE and at least one field=value (see trawlctl %s -h)", c.name)
	}
	sc, err := parseScopeArg(rest[0])
	if err != nil {
		return err
	}
	st, set, done, err := e.policyRules(ctx)
	if err != nil {
		return err
	}
	defer done()
	r := policy.Rule{Scope: sc}
	if old, ok := set.Rule(sc); ok {
		r = old.Rule
	}
	if err := r.Assign(rest[1:]); err != nil {
		return usagef("%v", err)
	}
	if *note != "" {
		r.Note = *note
	}
	change := policy.Change{Rule: r}
	if len(r.Fields()) == 0 {
		// Every field unset: the rule is gone.
		change = policy.Change{Remove: true, Rule: policy.Rule{Scope: sc}}
	}
	return e.applyAndReport(ctx, st, []policy.Change{change}, *by, set.Version())
}

func runPolicyRm(ctx context.Context, e *env, args []string) error {
	c := policyRmCmd
	fs := e.flags(c)
	by := e.byFlag(fs)
	e.connFlags(fs, false, true)
	rest, err := e.parseInterspersed(c, fs, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usagef("want the SCOPE of the rule to remove")
	}
	var changes []policy.Change
	for _, a := range rest {
		sc, err := parseScopeArg(a)
		if err != nil {
			return err
		}
		changes = append(changes, policy.Change{Remove: true, Rule: policy.Rule{Scope: sc}})
	}
	st, done, err := e.policyStore(ctx)
	if err != nil {
		return err
	}
	defer done()
	return e.applyAndReport(ctx, st, changes, *by, 0)
}

// applyAndReport applies changes and prints each diff and the new version.
func (e *env) applyAndReport(ctx context.Context, st *policy.Store, changes []policy.Change, by string, ifVersion int64) error {
	v, diffs, err := st.Apply(ctx, changes, by, ifVersion)
	if errors.Is(err, policy.ErrVersionMoved) {
		return fmt.Errorf("%w: run the command again", err)
	}
	if err != nil {
		return err
	}
	if len(diffs) == 0 {
		fmt.Fprintf(e.Stdout, "no change (version %d)\n", v)
		return nil
	}
	for _, d := range diffs {
		writeDiff(e.Stdout, d)
	}
	fmt.Fprintf(e.Stdout, "version %d\n", v)
	return nil
}

// writeDiff prints one scope's change: "+ scope: fields" for a new rule, "- scope" for a
// removed one, "~ scope: field old → new, ..." for a changed one.
func writeDiff(w io.Writer, d policy.Diff) {
	var old *policy.Rule
	if d.Old != nil {
		old = &d.Old.Rule
	}
	switch {
	case old == nil && d.New != nil:
		fmt.Fprintf(w, "+ %s: %s\n", d.Scope, d.New.Summary())
	case d.New == nil:
		fmt.Fprintf(w, "- %s: %s\n", d.Scope, old.Summary())
	default:
		ch := fieldChanges(*old, *d.New)
		if len(ch) == 0 {
			ch = []string{"same fields (source " + sourceOr(d.Old.Origin.Source) + " moved)"}
		}
		fmt.Fprintf(w, "~ %s: %s\n", d.Scope, strings.Join(ch, ", "))
	}
}

func sourceOr(s string) string {
	if s == "" {
		return "set by hand"
	}
	return s
}

// fieldChanges are "field old → new" for each field that differs.
func fieldChanges(a, b policy.Rule) []string {
	show := func(s string) string {
		if s == "" {
			return "(unset)"
		}
		return s
	}
	var out []string
	for _, f := range policy.Fields() {
		if va, vb := a.Value(f), b.Value(f); va != vb {
			out = append(out, fmt.Sprintf("%s %s → %s", f, show(va), show(vb)))
		}
	}
	if a.Note != b.Note {
		out = append(out, fmt.Sprintf("note %q → %q", a.Note, b.Note))
	}
	return out
}

func originString(o policy.Origin) string {
	parts := []string{fmt.Sprintf("version %d", o.Version), o.At.UTC().Format(time.RFC3339)}
	if o.By != "" {
		parts = append(parts, "by "+o.By)
	}
	parts = append(parts, sourceOr(o.Source))
	return strings.Join(parts, ", ")
}

func runPolicyGet(ctx context.Context, e *env, args []string) error {
	c := policyGetCmd
	fs := e.flags(c)
	e.connFlags(fs, false, true)
	rest, err := e.parseInterspersed(c, fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("want one SCOPE")
	}
	sc, err := parseScopeArg(rest[0])
	if err != nil {
		return err
	}
	_, set, done, err := e.policyRules(ctx)
	if err != nil {
		return err
	}
	defer done()
	r, ok := set.Rule(sc)
	if !ok {
		return fmt.Errorf("no rule for %s (version %d)", sc, set.Version())
	}
	fmt.Fprintf(e.Stdout, "scope: %s\n", r.Scope)
	for _, f := range r.Fields() {
		fmt.Fprintf(e.Stdout, "%s: %s\n", f, r.Value(f))
	}
	if r.Note != "" {
		fmt.Fprintf(e.Stdout, "note: %s\n", r.Note)
	}
	fmt.Fprintf(e.Stdout, "origin: %s\n", originString(r.Origin))
	return nil
}

func runPolicyLs(ctx context.Context, e *env, args []string) error {
	c := policyLsCmd
	fs := e.flags(c)
	e.connFlags(fs, false, true)
	if err := e.parse(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	_, set, done, err := e.policyRules(ctx)
	if err != nil {
		return err
	}
	defer done()
	for _, r := range set.Rules() {
		fmt.Fprintf(e.Stdout, "%s  %s  (%s)\n", r.Scope, r.Summary(), originString(r.Origin))
	}
	fmt.Fprintf(e.Stdout, "%d rules, version %d\n", len(set.Rules()), set.Version())
	return nil
}

func runPolicyLog(ctx context.Context, e *env, args []string) error {
	c := policyLogCmd
	fs := e.flags(c)
	n := fs.Int("n", 20, "entries to print, newest first (0: all)")
	e.connFlags(fs, false, true)
	if err := e.parse(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	st, done, err := e.policyStore(ctx)
	if err != nil {
		return err
	}
	defer done()
	log, err := st.Audit(ctx, *n)
	if err != nil {
		return err
	}
	for _, a := range log {
		d := policy.Diff{Scope: a.Scope, Old: a.Old}
		if a.New != nil {
			d.New = &a.New.Rule
		}
		var b strings.Builder
		writeDiff(&b, d)
		by := a.By
		if by == "" {
			by = "-"
		}
		fmt.Fprintf(e.Stdout, "%d %s by %s, %s: %s", a.Version, a.At.UTC().Format(time.RFC3339), by, sourceOr(a.Source), b.String())
	}
	return nil
}

func runPolicyApply(ctx context.Context, e *env, args []string) error {
	c := policyApplyCmd
	fs := e.flags(c)
	file := fs.String("f", "", "the rules `FILE` (YAML)")
	dry := fs.Bool("dry-run", false, "show the changes and the queued URLs each touches; change nothing")
	prune := fs.Bool("prune", false, "also remove the rules the file does not hold (set by hand or from other files)")
	by := e.byFlag(fs)
	e.connFlags(fs, false, true)
	if err := e.parse(c, fs, args); err != nil {
		return err
	}
	if *file == "" || fs.NArg() > 0 {
		return usagef("want -f FILE and no other argument")
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return usagef("%v", err)
	}
	rules, err := rulesfile.Parse(*file, data)
	if err != nil {
		return usagef("%v", err)
	}
	rdb, err := conn.Redis(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer rdb.Close()
	st := policy.NewStore(rdb, e.cfg.RedisPrefix)
	set, err := st.Load(ctx)
	if err != nil {
		return err
	}
	changes := rulesfile.FileChanges(set, *file, rules, *prune)
	if !*dry {
		return e.applyAndReport(ctx, st, changes, *by, set.Version())
	}
	diffs, err := st.Plan(ctx, changes)
	if err != nil {
		return err
	}
	if len(diffs) == 0 {
		fmt.Fprintf(e.Stdout, "no change (version %d)\n", set.Version())
		return nil
	}
	q, err := readQueued(ctx, rdb, e.cfg.RedisPrefix, e.cfg.Shards)
	if err != nil {
		return err
	}
	for _, d := range diffs {
		writeDiff(e.Stdout, d)
		if d.Scope.Kind == policy.KindAddr {
			fmt.Fprintln(e.Stdout, "    queued URLs: by server address, not counted here")
			continue
		}
		urls, hosts, err := q.touched(ctx, d.Scope)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "    queued URLs touched: %d on %d hosts\n", urls, hosts)
	}
	fmt.Fprintf(e.Stdout, "dry run: %d changes at version %d, nothing applied\n", len(diffs), set.Version())
	return nil
}

// queued is every shard's active and parked hosts, read once (frontierkeys.Reader.QueuedHosts),
// to count what each change touches.
type queued struct {
	fr    *frontierkeys.Reader
	hosts [][]string // per shard: active and parked hosts
	empty *policy.Set
}

func readQueued(ctx context.Context, rdb redis.UniversalClient, prefix string, n int) (*queued, error) {
	fr := frontierkeys.OpenReadOnly(rdb, prefix, n)
	hosts, err := fr.QueuedHosts(ctx)
	if err != nil {
		return nil, err
	}
	return &queued{fr: fr, hosts: hosts, empty: policy.Empty()}, nil
}

// touched counts the queued and parked URLs of the hosts a scope covers: every entry of
// their back queues and park lists, or for a URL prefix, the entries whose URL it covers.
func (q *queued) touched(ctx context.Context, sc policy.Scope) (urls int64, hosts int, err error) {
	for k, hs := range q.hosts {
		var covered []string
		for _, h := range hs {
			if q.empty.Covers(sc, h) {
				covered = append(covered, h)
			}
		}
		if len(covered) == 0 {
			continue
		}
		hosts += len(covered)
		var covers func(string) bool
		if sc.Kind == policy.KindPrefix {
			covers = sc.CoversURL
		}
		n, err := q.fr.CountQueued(ctx, k, covered, covers)
		if err != nil {
			return 0, 0, fmt.Errorf("count the queue of %s: %w", sc, err)
		}
		urls += n
	}
	return urls, hosts, nil
}
