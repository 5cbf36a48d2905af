package policy

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keys of the rules in Redis, under one hash tag so that an apply is one script in a
// cluster: <prefix>:{policy}:rules (hash: scope string → Stored JSON),
// <prefix>:{policy}:version (the version, raised by one per apply that changes anything),
// <prefix>:{policy}:audit (stream: one entry per changed scope: version, at, by, source,
// scope, old JSON, new JSON). Redis's persistence (TRAWL_FSYNC) keeps them across a
// restart of Redis, as it keeps the frontier.
type Keys struct{ Rules, Version, Audit string }

// KeysFor is the key layout under a deployment's key prefix (TRAWL_REDIS_PREFIX).
func KeysFor(prefix string) Keys {
	t := prefix + ":{policy}:"
	return Keys{Rules: t + "rules", Version: t + "version", Audit: t + "audit"}
}

// AuditEntry is one line of the audit log: one scope changed by one apply.
type AuditEntry struct {
	Version int64
	At      time.Time
	By      string
	Source  string
	Scope   Scope
	Old     *Stored // nil: the scope had no rule
	New     *Stored // nil: the rule was removed
}

// Store reads and changes the rules in Redis.
type Store struct {
	rdb  redis.UniversalClient
	keys Keys
}

// NewStore is the store under a deployment's key prefix.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, keys: KeysFor(prefix)}
}

// Version is the store's current version (0 when no rule was ever set): one GET, what a
// Watcher polls.
func (st *Store) Version(ctx context.Context) (int64, error) { return st.version(ctx) }

// Load reads and compiles every rule at one version.
func (st *Store) Load(ctx context.Context) (*Set, error) { return st.load(ctx) }

// Plan is what Apply would change, without changing it (trawlctl's dry run): one Diff
// per scope whose rule would change; a change equal to the stored rule is no diff.
func (st *Store) Plan(ctx context.Context, changes []Change) ([]Diff, error) {
	return st.plan(ctx, changes)
}

// Apply makes changes atomically: all or none, one new version, one audit entry per scope
// changed. When ifVersion > 0 it applies only if the store is still at that version
// (ErrVersionMoved otherwise), so an apply planned from one version cannot overwrite a
// change made since. By is who, as the operator gave it. Returns the new version and the
// diffs applied (none: nothing changed, version unchanged).
func (st *Store) Apply(ctx context.Context, changes []Change, by string, ifVersion int64) (int64, []Diff, error) {
	return st.apply(ctx, changes, by, ifVersion)
}

// Audit is the last n audit entries, newest first (n <= 0: all).
func (st *Store) Audit(ctx context.Context, n int) ([]AuditEntry, error) { return st.audit(ctx, n) }

// Watcher keeps a service's rules current: it polls the store's version every
// TRAWL_POLICY_POLL (default 500 ms) and loads the rules when it moves, so every process
// holds a change within one poll and a load. Current is one atomic load.
type Watcher struct{ w *watcher }

// NewWatcher loads the rules once (an error here stops the service: it would crawl
// against rules it cannot read) and returns a watcher; Run keeps it current.
func NewWatcher(ctx context.Context, st *Store, poll time.Duration, opts ...WatchOption) (*Watcher, error) {
	var o watchOptions
	for _, opt := range opts {
		opt(&o)
	}
	return newWatcher(ctx, st, poll, o)
}

// WatchOption configures a Watcher.
type WatchOption func(*watchOptions)

type watchOptions struct {
	// only: keep the rules that set one of these fields; nil keeps every rule.
	only []Field
}

// OnlyFields has a Watcher hold only the rules that set one of fields, so that a service
// that reads a few fields holds a set the size of the rules that set them: the parser,
// which reads the scope and render fields, holds 100 rules of a crawl's 10,000 that way,
// and its every garbage collection marks those alone. Each of these fields resolves as in
// the whole set, since a rule that sets none of them never decides one; the set's Version
// is the store's, and its Rules are the rules held. Default: every rule.
func OnlyFields(fields ...Field) WatchOption {
	return func(o *watchOptions) { o.only = append([]Field{}, fields...) }
}

// Current is the rules as last loaded.
func (w *Watcher) Current() *Set { return w.w.current() }

// OnChange registers f to be called (from Run's goroutine, in order) with the old and
// new set after each change is loaded. Register before Run.
func (w *Watcher) OnChange(f func(old, new *Set)) { w.w.onChange(f) }

// Run polls until ctx ends. A failed poll or load is logged and tried again at the next
// poll; the last rules loaded stay in force meanwhile, and Stale reports how long since
// the store last answered.
func (w *Watcher) Run(ctx context.Context) error { return w.w.run(ctx) }

// Stale is how long since the store last answered a poll (0 when the last poll did).
func (w *Watcher) Stale() time.Duration { return w.w.stale() }
