package policy

// Placeholder implementations, replaced by the real ones.

import (
	"context"
	"errors"
	"time"
)

var errTodo = errors.New("policy: not implemented yet")

type watcher struct{}

func newWatcher(context.Context, *Store, time.Duration) (*Watcher, error) { return nil, errTodo }
func (w *watcher) current() *Set                                          { return Empty() }
func (w *watcher) onChange(func(old, new *Set))                           {}
func (w *watcher) run(ctx context.Context) error                          { <-ctx.Done(); return nil }
func (w *watcher) stale() time.Duration                                   { return 0 }

type dirSecrets struct{}

func newDirSecrets(string) Secrets                    { return dirSecrets{} }
func (dirSecrets) Lookup(name string) (string, error) { return "", errTodo }
