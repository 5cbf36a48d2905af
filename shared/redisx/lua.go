package redisx

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Lua names one embedded .lua file: a module (local functions a script calls) or a script.
// Source, when set, is Lua text built in Go instead of a file (the constants of a layout
// Go owns, so that the scripts take their names from Go); Name then only labels it.
type Lua struct {
	FS     fs.FS
	Name   string
	Source string
}

// Script joins .lua files into one script, in order: a file may call what the files
// before it define, so modules come first and the script itself last. Redis runs one
// source per script, so this is how every script of Trawl is built from its files. A
// missing file panics: the files are embedded, so that is a build mistake, caught by any
// test that loads the package.
func Script(files ...Lua) *redis.Script {
	var b strings.Builder
	for _, f := range files {
		if f.Source != "" {
			b.WriteString(f.Source)
			b.WriteByte('\n')
			continue
		}
		src, err := fs.ReadFile(f.FS, f.Name)
		if err != nil {
			panic("redisx: lua file " + f.Name + ": " + err.Error())
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	s := redis.NewScript(b.String())
	sources.Store(s.Hash(), b.String())
	return s
}

// sources holds each script's source by hash, for RunOnce's EVAL.
var sources sync.Map

// RunOnce runs a script that changes state at most once: EVALSHA, then EVAL when Redis
// does not have the script. go-redis sends a command again after a read timeout or a
// connection lost mid-reply (MaxRetries, and a cluster client's redirects); for a script
// that would run its effects a second time while the first run's reply was lost (leases
// handed out twice, an outcome found stale by its own first run). Here such an error is
// returned instead, and the caller decides: its step fails and is redelivered, finding what
// the first run did through its own idempotency (message markers, lease tokens). Errors
// that say the script did not run (MOVED, READONLY, LOADING, a dial or pool timeout) are
// still retried by go-redis.
func RunOnce(ctx context.Context, c redis.UniversalClient, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := once(ctx, "evalsha", s.Hash(), keys, args)
	_ = c.Process(ctx, cmd)
	if err := cmd.Err(); err == nil || !IsNoScript(err) {
		return cmd.Cmd
	}
	src, ok := sources.Load(s.Hash())
	if !ok {
		cmd.SetErr(fmt.Errorf("redisx: script %s was not built by redisx.Script: %w", s.Hash(), cmd.Err()))
		return cmd.Cmd
	}
	// EVAL caches the script, so later calls find it by hash again.
	cmd = once(ctx, "eval", src.(string), keys, args)
	_ = c.Process(ctx, cmd)
	return cmd.Cmd
}

// onceCmd is a script call go-redis must not send again once it may have been sent.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

func once(ctx context.Context, verb, script string, keys []string, args []any) onceCmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, verb, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	return onceCmd{redis.NewCmd(ctx, a...)}
}
