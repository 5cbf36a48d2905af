package redisx

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Lua names one embedded .lua file: a module (local functions a script calls) or a script.
// Source, when set, is Lua text built in Go instead of a file (the constants of a layout
// Go owns, so that the scripts take their names from Go, as Names builds); Name then only
// labels it.
type Lua struct {
	FS     fs.FS
	Name   string
	Source string
}

// Names is Lua source declaring names Go owns — key suffixes, hash fields, statuses,
// positions in an encoded value — as Lua locals (`local F_LAYERS = 'layers'`, `local
// LIM_CONN = 4`), to be placed before the files that use them in a Script. So a name is
// written once, in Go, and the scripts and the Go code that read the same keys cannot drift
// apart. kv alternates a local's name and its value, a string or an int; a name must be an
// upper-case identifier and a string must not need quoting (both checked: a mistake here
// is a build mistake, caught by any test that loads the package).
func Names(kv ...any) Lua {
	var b strings.Builder
	b.WriteString("-- names from Go (redisx.Names)\n")
	for name, v := range luaPairs("Names", kv) {
		fmt.Fprintf(&b, "local %s = %s\n", name, v)
	}
	return Lua{Name: "names", Source: b.String()}
}

// Table is Names as the fields of one Lua table (`local HF = {NEXT = 'next', …}`, read as
// HF.NEXT): for a family of names in scripts that are near Lua's limit of 200 locals per
// function, which every name of Names takes one of.
func Table(table string, kv ...any) Lua {
	checkLuaName("Table", table)
	var b strings.Builder
	fmt.Fprintf(&b, "-- names from Go (redisx.Table)\nlocal %s = {", table)
	sep := ""
	for name, v := range luaPairs("Table", kv) {
		fmt.Fprintf(&b, "%s%s = %s", sep, name, v)
		sep = ", "
	}
	b.WriteString("}\n")
	return Lua{Name: "names", Source: b.String()}
}

// luaPairs checks kv's names and values and yields each name with its value as a Lua
// literal.
func luaPairs(fn string, kv []any) func(yield func(string, string) bool) {
	if len(kv)%2 != 0 {
		panic("redisx: " + fn + " wants pairs")
	}
	out := make([][2]string, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		name, ok := kv[i].(string)
		if !ok {
			panic(fmt.Sprintf("redisx: %s: bad Lua name %v", fn, kv[i]))
		}
		checkLuaName(fn, name)
		switch v := kv[i+1].(type) {
		case string:
			if strings.ContainsAny(v, "'\\\n\r") {
				panic("redisx: " + fn + ": value of " + name + " needs quoting")
			}
			out = append(out, [2]string{name, "'" + v + "'"})
		case int:
			out = append(out, [2]string{name, strconv.Itoa(v)})
		default:
			panic(fmt.Sprintf("redisx: %s: value of %s is a %T, want a string or an int", fn, name, v))
		}
	}
	return func(yield func(string, string) bool) {
		for _, p := range out {
			if !yield(p[0], p[1]) {
				return
			}
		}
	}
}

func checkLuaName(fn, name string) {
	if name == "" {
		panic("redisx: " + fn + ": empty Lua name")
	}
	for _, c := range name {
		if !(c >= 'A' && c <= 'Z' || c == '_' || c >= '0' && c <= '9') {
			panic("redisx: " + fn + ": bad Lua name " + name)
		}
	}
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

// Source is the source of a script Script built ("" for another), for a test that loads
// it as Redis would: Lua's limits (200 locals per function) are checked only then.
func Source(s *redis.Script) string {
	v, _ := sources.Load(s.Hash())
	src, _ := v.(string)
	return src
}

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
