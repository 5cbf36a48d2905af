package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/trawlctl/internal/conn"
	"github.com/trawl/trawl/trawlctl/internal/progress"
)

var statusCmd = &command{
	name:    "status",
	summary: "frontier sizes, hosts, counters, pages/s and stage backlogs",
	detail: `
Reads the scheduler's Redis keys (every shard) and the JetStream streams and consumers.
Front queues: TRAWL_FRONT_QUEUES (or -queues) of them; when unset, every possible queue is
read and the report goes up to the last non-empty one. pages/s compares the fetched
counter of two samples (-sample apart; with -watch, consecutive snapshots). Rules: the live
site policies in force, the -rules most active (what they parked, blocked, excluded and
requested, summed over the shards) and how many there are.`,
}

func init() { statusCmd.run = runStatus }

func runStatus(ctx context.Context, e *env, args []string) error {
	fs := e.flags(statusCmd)
	asJSON := fs.Bool("json", false, "print JSON (one object per snapshot)")
	watch := fs.Bool("watch", false, "refresh every -interval until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "refresh interval of -watch")
	sample := fs.Duration("sample", time.Second, "without -watch: time between the two samples behind pages/s (0 = one sample, no rate)")
	fs.IntVar(&e.cfg.FrontQueues, "queues", e.cfg.FrontQueues, "front queues F (TRAWL_FRONT_QUEUES; 0 = probe)")
	nRules := fs.Int("rules", 10, "site-policy rules listed, the most active first (0 = none)")
	e.connFlags(fs, true, true)
	if err := e.parse(statusCmd, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *interval <= 0 || *sample < 0 || *nRules < 0 {
		return usagef("-interval must be positive and -sample and -rules not negative")
	}
	rdb, err := conn.Redis(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer rdb.Close()
	nc, js, err := conn.NATS(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer nc.Close()
	rd := &progress.Reader{RDB: rdb, JS: js, O: progress.Options{Prefix: e.cfg.RedisPrefix, Shards: e.cfg.Shards, FrontQueues: e.cfg.FrontQueues, LeaseTTL: e.cfg.LeaseTTL, Rules: *nRules}}
	show := func(s *progress.Snapshot) error {
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(s)
		}
		if *watch {
			// Clear the screen and home the cursor, then redraw.
			fmt.Fprint(e.Stdout, "\033[H\033[2J")
		}
		return progress.WriteText(e.Stdout, s)
	}
	prev, err := rd.Read(ctx)
	if err != nil {
		return err
	}
	if !*watch {
		if *sample > 0 && ctxsleep.Sleep(ctx, *sample) {
			cur, err := rd.Read(ctx)
			if err != nil {
				return err
			}
			progress.Rate(prev, cur)
			prev = cur
		}
		return show(prev)
	}
	if err := show(prev); err != nil {
		return err
	}
	for ctxsleep.Sleep(ctx, *interval) {
		cur, err := rd.Read(ctx)
		if err != nil {
			return err
		}
		progress.Rate(prev, cur)
		if err := show(cur); err != nil {
			return err
		}
		prev = cur
	}
	return nil
}
