package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

type watcher struct {
	st   *Store
	poll time.Duration
	o    watchOptions
	cur  atomic.Pointer[Set]
	// lastOK is when the store last answered a poll (unix ns); 0 before Run's first.
	lastOK    atomic.Int64
	mu        sync.Mutex
	callbacks []func(old, new *Set)
	running   atomic.Bool
}

func newWatcher(ctx context.Context, st *Store, poll time.Duration, o watchOptions) (*Watcher, error) {
	if poll <= 0 {
		poll = Defaults.Poll
	}
	w := &watcher{st: st, poll: poll, o: o}
	s, err := w.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy: first load of the rules: %w", err)
	}
	w.cur.Store(s)
	w.lastOK.Store(time.Now().UnixNano())
	return &Watcher{w: w}, nil
}

func (w *watcher) current() *Set { return w.cur.Load() }

// load reads the rules and compiles those the watcher keeps (OnlyFields).
func (w *watcher) load(ctx context.Context) (*Set, error) {
	rules, v, err := w.st.read(ctx)
	if err != nil {
		return nil, err
	}
	if w.o.only != nil {
		kept := rules[:0]
		for _, r := range rules {
			if r.SetsAny(w.o.only...) {
				kept = append(kept, r)
			}
		}
		rules = kept
	}
	return Compile(rules, v)
}

func (w *watcher) onChange(f func(old, new *Set)) {
	if w.running.Load() {
		panic("policy: Watcher.OnChange after Run")
	}
	w.mu.Lock()
	w.callbacks = append(w.callbacks, f)
	w.mu.Unlock()
}

func (w *watcher) run(ctx context.Context) error {
	w.running.Store(true)
	w.mu.Lock()
	cbs := append([]func(old, new *Set){}, w.callbacks...)
	w.mu.Unlock()
	t := time.NewTicker(w.poll)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := w.pollOnce(ctx, cbs)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			// Logged once per outage, with the rules kept; the recovery is logged too.
			slog.Warn("policy: cannot read the rules; the last ones loaded stay in force", "version", w.current().Version(), "err", err)
			failing = true
		case err == nil && failing:
			slog.Info("policy: the rules are read again", "version", w.current().Version(), "stale", w.stale())
			failing = false
		}
	}
}

// pollOnce reads the version and, when it moved, loads the rules and tells the callbacks.
func (w *watcher) pollOnce(ctx context.Context, cbs []func(old, new *Set)) error {
	ctx, cancel := context.WithTimeout(ctx, max(w.poll, time.Second))
	defer cancel()
	v, err := w.st.Version(ctx)
	if err != nil {
		return err
	}
	old := w.current()
	if v == old.Version() {
		w.lastOK.Store(time.Now().UnixNano())
		return nil
	}
	s, err := w.load(ctx)
	if err != nil {
		return err
	}
	w.lastOK.Store(time.Now().UnixNano())
	if s.Version() == old.Version() {
		return nil
	}
	if s.Version() < old.Version() {
		// A Redis restored from an older snapshot: its rules are what is in force now.
		slog.Warn("policy: the store's version went back", "from", old.Version(), "to", s.Version())
	}
	w.cur.Store(s)
	slog.Info("policy: rules changed", "version", s.Version(), "rules", len(s.Rules()))
	for _, f := range cbs {
		f(old, s)
	}
	return nil
}

func (w *watcher) stale() time.Duration {
	last := w.lastOK.Load()
	if last == 0 {
		return 0
	}
	d := time.Since(time.Unix(0, last))
	// A poll that answered within its period is current.
	if d <= w.poll+w.poll/2 {
		return 0
	}
	return d
}

var errNoSecret = errors.New("policy: no such secret")
