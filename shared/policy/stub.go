package policy

// Placeholder implementations, replaced by the real ones.

import (
	"context"
	"errors"
	"time"
)

var errTodo = errors.New("policy: not implemented yet")

// ErrVersionMoved: an apply's ifVersion no longer matches the store.
var ErrVersionMoved = errors.New("policy: the rules changed since the plan was made")

func (st *Store) version(context.Context) (int64, error)         { return 0, errTodo }
func (st *Store) load(context.Context) (*Set, error)             { return nil, errTodo }
func (st *Store) plan(context.Context, []Change) ([]Diff, error) { return nil, errTodo }
func (st *Store) apply(context.Context, []Change, string, int64) (int64, []Diff, error) {
	return 0, nil, errTodo
}
func (st *Store) audit(context.Context, int) ([]AuditEntry, error) { return nil, errTodo }

type watcher struct{}

func newWatcher(context.Context, *Store, time.Duration) (*Watcher, error) { return nil, errTodo }
func (w *watcher) current() *Set                                          { return Empty() }
func (w *watcher) onChange(func(old, new *Set))                           {}
func (w *watcher) run(ctx context.Context) error                          { <-ctx.Done(); return nil }
func (w *watcher) stale() time.Duration                                   { return 0 }

type dirSecrets struct{}

func newDirSecrets(string) Secrets                    { return dirSecrets{} }
func (dirSecrets) Lookup(name string) (string, error) { return "", errTodo }
