package policy

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/redisx"
)

//go:embed lua/*.lua
var luaFS embed.FS

var applyScript = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/apply.lua"})

// ErrVersionMoved: an apply's ifVersion no longer matches the store.
var ErrVersionMoved = errors.New("policy: the rules changed since the plan was made")

// applyTries bounds how often an apply without ifVersion plans again because another
// apply landed between its read and its write.
const applyTries = 5

func (st *Store) version(ctx context.Context) (int64, error) {
	v, err := st.rdb.Get(ctx, st.keys.Version).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("policy: read version %s: %w", st.keys.Version, err)
	}
	return v, nil
}

// read is the stored rules and the version, read together (one MULTI on one slot).
func (st *Store) read(ctx context.Context) ([]Stored, int64, error) {
	var (
		all *redis.MapStringStringCmd
		ver *redis.StringCmd
	)
	_, err := st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, st.keys.Rules)
		ver = p.Get(ctx, st.keys.Version)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("policy: read rules %s: %w", st.keys.Rules, err)
	}
	var v int64
	if s, err := ver.Result(); err == nil {
		if v, err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, 0, fmt.Errorf("policy: version %s is %q: %w", st.keys.Version, s, err)
		}
	}
	rules := make([]Stored, 0, len(all.Val()))
	var errs []error
	for scope, js := range all.Val() {
		s, err := decodeStored(scope, js)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rules = append(rules, s)
	}
	if len(errs) > 0 {
		return nil, 0, errors.Join(errs...)
	}
	return rules, v, nil
}

func decodeStored(scope, js string) (Stored, error) {
	sc, err := ParseScope(scope)
	if err != nil {
		return Stored{}, fmt.Errorf("policy: stored rule: %w", err)
	}
	var s Stored
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		return Stored{}, fmt.Errorf("policy: stored rule %s: %w", sc, err)
	}
	s.Scope = sc
	return s, nil
}

func (st *Store) load(ctx context.Context) (*Set, error) {
	rules, v, err := st.read(ctx)
	if err != nil {
		return nil, err
	}
	return Compile(rules, v)
}

func (st *Store) plan(ctx context.Context, changes []Change) ([]Diff, error) {
	rules, v, err := st.read(ctx)
	if err != nil {
		return nil, err
	}
	diffs, _, err := planOn(rules, v, changes, "", time.Time{})
	return diffs, err
}

// planOn is what changes do to rules at version v: the diffs, and the new Stored of each
// scope set (by the diff's index), at version v+1. The whole resulting set must compile,
// so an apply never stores a rule that a Watcher would refuse to load.
func planOn(rules []Stored, v int64, changes []Change, by string, at time.Time) ([]Diff, []*Stored, error) {
	cur := make(map[Scope]Stored, len(rules))
	for _, r := range rules {
		cur[r.Scope] = r
	}
	seen := map[Scope]bool{}
	var (
		diffs []Diff
		news  []*Stored
		errs  []error
	)
	for _, c := range changes {
		sc, err := ParseScope(c.Rule.Scope.String())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[sc] {
			errs = append(errs, fmt.Errorf("policy: %s: changed twice in one apply", sc))
			continue
		}
		seen[sc] = true
		old, had := cur[sc]
		var oldp *Stored
		if had {
			o := old
			oldp = &o
		}
		if c.Remove {
			if had {
				diffs = append(diffs, Diff{Scope: sc, Old: oldp})
				news = append(news, nil)
				delete(cur, sc)
			}
			continue
		}
		r := c.Rule
		r.Scope = sc
		if had && sameRule(old.Rule, r) && old.Origin.Source == c.Source {
			continue
		}
		ns := Stored{Rule: r, Origin: Origin{Version: v + 1, At: at, By: by, Source: c.Source}}
		diffs = append(diffs, Diff{Scope: sc, Old: oldp, New: &ns.Rule})
		news = append(news, &ns)
		cur[sc] = ns
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	next := make([]Stored, 0, len(cur))
	for _, r := range cur {
		next = append(next, r)
	}
	if _, err := Compile(next, v+1); err != nil {
		return nil, nil, err
	}
	return diffs, news, nil
}

// sameRule compares two rules as they are stored.
func sameRule(a, b Rule) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return a.Scope == b.Scope && bytes.Equal(ja, jb)
}

func (st *Store) apply(ctx context.Context, changes []Change, by string, ifVersion int64) (int64, []Diff, error) {
	for try := 0; try < applyTries; try++ {
		rules, v, err := st.read(ctx)
		if err != nil {
			return 0, nil, err
		}
		if ifVersion > 0 && v != ifVersion {
			return v, nil, fmt.Errorf("%w (planned at version %d, now %d)", ErrVersionMoved, ifVersion, v)
		}
		at := time.Now().UTC().Truncate(time.Millisecond)
		diffs, news, err := planOn(rules, v, changes, by, at)
		if err != nil {
			return v, nil, err
		}
		if len(diffs) == 0 {
			return v, nil, nil
		}
		args := make([]any, 0, 3+3*len(diffs))
		args = append(args, v, at.UnixMilli(), by)
		for i, d := range diffs {
			js, src := "", ""
			if news[i] != nil {
				b, err := json.Marshal(news[i])
				if err != nil {
					return v, nil, fmt.Errorf("policy: encode %s: %w", d.Scope, err)
				}
				js, src = string(b), news[i].Origin.Source
			}
			args = append(args, d.Scope.String(), js, src)
		}
		res, err := redisx.RunOnce(ctx, st.rdb, applyScript,
			[]string{st.keys.Rules, st.keys.Version, st.keys.Audit}, args...).Slice()
		if err != nil {
			// The reply may have been lost after the script ran: the audit log says.
			return v, nil, fmt.Errorf("policy: apply at version %d (if the reply was lost it may have landed: see the audit log): %w", v, err)
		}
		status, _ := res[0].(string)
		nv, _ := res[1].(int64)
		if status == "ok" {
			return nv, diffs, nil
		}
		if ifVersion > 0 {
			return nv, nil, fmt.Errorf("%w (planned at version %d, now %d)", ErrVersionMoved, ifVersion, nv)
		}
	}
	return 0, nil, fmt.Errorf("policy: apply: the rules changed under %d tries in a row; try again", applyTries)
}

func (st *Store) audit(ctx context.Context, n int) ([]AuditEntry, error) {
	var (
		msgs []redis.XMessage
		err  error
	)
	if n > 0 {
		msgs, err = st.rdb.XRevRangeN(ctx, st.keys.Audit, "+", "-", int64(n)).Result()
	} else {
		msgs, err = st.rdb.XRevRange(ctx, st.keys.Audit, "+", "-").Result()
	}
	if err != nil {
		return nil, fmt.Errorf("policy: read audit %s: %w", st.keys.Audit, err)
	}
	out := make([]AuditEntry, 0, len(msgs))
	for _, m := range msgs {
		e, err := decodeAudit(m.Values)
		if err != nil {
			return nil, fmt.Errorf("policy: audit entry %s: %w", m.ID, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func decodeAudit(f map[string]any) (AuditEntry, error) {
	str := func(k string) string { s, _ := f[k].(string); return s }
	var e AuditEntry
	var err error
	if e.Version, err = strconv.ParseInt(str("version"), 10, 64); err != nil {
		return e, fmt.Errorf("version: %w", err)
	}
	ms, err := strconv.ParseInt(str("at"), 10, 64)
	if err != nil {
		return e, fmt.Errorf("at: %w", err)
	}
	e.At = time.UnixMilli(ms).UTC()
	e.By, e.Source = str("by"), str("source")
	if e.Scope, err = ParseScope(str("scope")); err != nil {
		return e, err
	}
	for _, side := range []struct {
		key string
		dst **Stored
	}{{"old", &e.Old}, {"new", &e.New}} {
		if js := str(side.key); js != "" {
			s, err := decodeStored(e.Scope.String(), js)
			if err != nil {
				return e, err
			}
			*side.dst = &s
		}
	}
	return e, nil
}

// sortRules sorts rules by scope string, as Set.Rules does.
func sortRules(rs []Stored) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Scope.String() < rs[j].Scope.String() })
}
