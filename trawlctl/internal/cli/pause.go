package cli

import (
	"context"
	"fmt"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/trawlctl/internal/conn"
)

var pauseCmd = &command{
	name:    "pause",
	summary: "stop dispatching (every shard, or -shard N)",
	detail: `
Sets <prefix>:{s<k>}:paused: no scheduler process dispatches from a paused shard. Tasks
already out finish; nothing is lost. "trawlctl resume" undoes it.`,
}

var resumeCmd = &command{
	name:    "resume",
	summary: "undo pause (every shard, or -shard N)",
}

func init() {
	pauseCmd.run = func(ctx context.Context, e *env, args []string) error { return runPause(ctx, e, pauseCmd, args, true) }
	resumeCmd.run = func(ctx context.Context, e *env, args []string) error {
		return runPause(ctx, e, resumeCmd, args, false)
	}
}

func runPause(ctx context.Context, e *env, c *command, args []string, pause bool) error {
	fs := e.flags(c)
	shard := fs.Int("shard", -1, "only this shard (default: every shard)")
	e.connFlags(fs, false, true)
	if err := e.parse(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	shards := make([]int, 0, e.cfg.Shards)
	switch {
	case *shard == -1:
		for k := range e.cfg.Shards {
			shards = append(shards, k)
		}
	case *shard < 0 || *shard >= e.cfg.Shards:
		return usagef("-shard %d: want 0..%d (TRAWL_SHARDS=%d)", *shard, e.cfg.Shards-1, e.cfg.Shards)
	default:
		shards = append(shards, *shard)
	}
	rdb, err := conn.Redis(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer rdb.Close()
	states, err := frontierkeys.SetPaused(ctx, rdb, e.cfg.RedisPrefix, e.cfg.Shards, shards, pause)
	if err != nil {
		return err
	}
	for i, k := range shards {
		state := "running"
		if states[i] {
			state = "paused"
		}
		fmt.Fprintf(e.Stdout, "shard %d: %s\n", k, state)
	}
	return nil
}
