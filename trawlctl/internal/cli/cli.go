// Package cli is trawlctl's command dispatcher: it reads the TRAWL_* configuration, parses
// each command's flags (which override the environment), runs the command and maps its
// result to an exit status. Run never exits the process, so tests drive every command
// in-process against real servers.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/redact"
	"github.com/trawl/trawl/trawlctl/internal/config"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and failed: a server unreachable, a bad URL, …
	ExitUsage   = 2 // the command line or a TRAWL_* variable is wrong
)

// IO is the process's environment as the commands see it.
type IO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Lookup reads environment variables (os.LookupEnv when nil).
	Lookup func(string) (string, bool)
	// Environ lists them, for the warning of TRAWL_* variables no Trawl program reads
	// (os.Environ when Lookup is nil too; nil with a Lookup of its own: no warning).
	Environ func() []string
}

// usageError marks a wrong command line; it exits with ExitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// errSilent is a failure the command has already reported line by line.
var errSilent = errors.New("failed")

// command is one subcommand.
type command struct {
	name    string // "seed", "robots check", …
	args    string // synopsis after the flags
	summary string
	detail  string // printed by -h after the synopsis
	run     func(ctx context.Context, e *env, args []string) error
}

// env is what a running command gets.
type env struct {
	IO
	cfg  config.Config
	name string
}

func (e *env) infof(format string, a ...any) {
	fmt.Fprintf(e.Stderr, "trawlctl %s: %s\n", e.name, fmt.Sprintf(format, a...))
}

var commands []*command

func register(c *command) { commands = append(commands, c) }

func find(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// Run runs the command line args (without the program name) and returns the exit status.
func Run(ctx context.Context, args []string, stdio IO) int {
	if stdio.Lookup == nil {
		stdio.Lookup, stdio.Environ = os.LookupEnv, os.Environ
	}
	if len(args) == 0 {
		writeHelp(stdio.Stderr)
		return ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c := lookup(args[1:]); c != nil {
				return Run(ctx, append(strings.Fields(c.name), "-h"), stdio)
			}
			fmt.Fprintf(stdio.Stderr, "trawlctl: unknown command %q (see trawlctl help)\n", strings.Join(args[1:], " "))
			return ExitUsage
		}
		writeHelp(stdio.Stdout)
		return ExitOK
	}
	c := lookup(args)
	if c == nil {
		name := args[0]
		group := inGroup(name)
		if len(group) > 0 && (len(args) == 1 || isHelpFlag(args[1])) {
			// "trawlctl policy" or "trawlctl policy -h": the group's commands.
			w, status := stdio.Stderr, ExitUsage
			if len(args) > 1 {
				w, status = stdio.Stdout, ExitOK
			}
			fmt.Fprintf(w, "usage: trawlctl %s <command> [flags] [args]\n\ncommands:\n", name)
			writeCommands(w, group)
			fmt.Fprintf(w, "\n\"trawlctl %s <command> -h\" describes a command.\n", name)
			return status
		}
		if len(group) > 0 && len(args) > 1 {
			name += " " + args[1]
		}
		fmt.Fprintf(stdio.Stderr, "trawlctl: unknown command %q (see trawlctl help)\n", name)
		return ExitUsage
	}
	rest := args[len(strings.Fields(c.name)):]
	if stdio.Environ != nil {
		if w := envconfig.UnknownWarning(stdio.Environ()); w != "" {
			fmt.Fprintf(stdio.Stderr, "trawlctl: warning: %s\n", w)
		}
	}

	r := &envconfig.Reader{Lookup: stdio.Lookup}
	cfg := config.Load(r)
	e := &env{IO: stdio, cfg: cfg, name: c.name}
	if err := r.Err(); err != nil {
		return report(e, usagef("%v", err))
	}
	return report(e, c.run(ctx, e, rest))
}

// inGroup is the commands whose name is word followed by a second word ("policy" →
// policy set, policy get …): a group, which answers -h with its commands.
func inGroup(word string) []*command {
	var out []*command
	for _, c := range commands {
		if strings.HasPrefix(c.name, word+" ") {
			out = append(out, c)
		}
	}
	return out
}

func isHelpFlag(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

// writeCommands lists commands with their summaries, sorted by name.
func writeCommands(w io.Writer, commands []*command) {
	cs := append([]*command(nil), commands...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
}

// lookup finds the command named by the first one or two words of args.
func lookup(args []string) *command {
	if len(args) >= 2 {
		if c := find(args[0] + " " + args[1]); c != nil {
			return c
		}
	}
	return find(args[0])
}

// report prints err as one line and returns the exit status for it.
func report(e *env, err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, errSilent):
		return ExitFailure
	}
	// redact as a last guard: a library's error may quote a URL.
	fmt.Fprintf(e.Stderr, "trawlctl %s: %s\n", e.name, oneLine(redact.Text(err.Error())))
	var ue *usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitFailure
}

// oneLine joins a multi-line error (errors.Join) so a failure is one line on stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// flags returns a FlagSet for c whose errors are returned, not printed: parse prints
// -h to stdout and turns a bad flag into one usage line.
func (e *env) flags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("trawlctl "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses args; after it the config reflects flag overrides and is validated.
func (e *env) parse(c *command, fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(e.Stdout, c, fs)
			return err
		}
		return usagef("%v (see trawlctl %s -h)", err, c.name)
	}
	if err := e.cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	return nil
}

// connFlags registers the overrides of the connection settings a command uses.
func (e *env) connFlags(fs *flag.FlagSet, nats, redis bool) {
	if nats {
		fs.Var(redact.Flag(&e.cfg.NATSURL), "nats", "NATS server `URL` (TRAWL_NATS_URL)")
	}
	if redis {
		fs.Var(redact.Flag(&e.cfg.RedisURL), "redis", "Redis `URL` (TRAWL_REDIS_URL)")
		fs.StringVar(&e.cfg.RedisPrefix, "prefix", e.cfg.RedisPrefix, "Redis key prefix of the crawl (TRAWL_REDIS_PREFIX)")
		fs.IntVar(&e.cfg.Shards, "shards", e.cfg.Shards, "scheduler shards (TRAWL_SHARDS)")
	}
}

func writeUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: trawlctl %s [flags] %s\n\n%s\n", c.name, c.args, c.summary)
	if c.detail != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.detail))
	}
	fmt.Fprintln(w, "\nflags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

func writeHelp(w io.Writer) {
	fmt.Fprintln(w, "trawlctl — operate a Trawl crawl")
	fmt.Fprintln(w, "\nusage: trawlctl <command> [flags] [args]\n\ncommands:")
	writeCommands(w, commands)
	fmt.Fprint(w, `
Connection settings come from the services' variables (TRAWL_NATS_URL, TRAWL_REDIS_URL,
TRAWL_REDIS_PREFIX, TRAWL_SHARDS, …); the flags -nats, -redis, -prefix and -shards override
them. "trawlctl <command> -h" describes a command.

Exit status: 0 done, 1 failed (server unreachable, invalid URL, …), 2 bad command line or
TRAWL_* value.
`)
}
