package cli

import (
	"context"

	"github.com/trawl/trawl/trawlctl/internal/conn"
	"github.com/trawl/trawl/trawlctl/internal/tap"
)

var tapCmd = &command{
	name:    "tap",
	args:    "SUBJECT",
	summary: "print a crawl subject's messages as JSON lines without taking them",
	detail: `
SUBJECT is crawl.docs, crawl.pages, crawl.fetched.<shard> (or crawl.fetched.*), or a work
subject (crawl.discovered, crawl.frontier.<shard>, crawl.fetch.<shard>).

crawl.docs prints each Document; crawl.pages prints each page's metadata (PageMeta) with
"body_len" (and "body" as a string with -body); the others print their JSON payload.

Tapping never takes messages from the crawler. On crawl.docs, crawl.pages and
crawl.fetched.* an ephemeral consumer reads from now (or -from-start); -durable NAME keeps
the position in a durable consumer so the next run resumes after the last printed
message (delete it with "nats consumer rm" when done; a durable tap on crawl.fetched.*
keeps outcomes in the stream until it reads them). Work subjects can only be peeked at
with -from-start: the messages waiting now, read without consuming them.

crawl.docs is kept by limits: a tap that falls behind misses the oldest documents, and is
warned with how many (a jump in the stream sequence). -durable NAME -register makes the
consumer a registered indexer instead: the crawl holds while it lags (TRAWL_HOLD_DOCS_FILL)
and it loses nothing to the byte limit; delete it when done, or the crawl stays held.`,
}

func init() { tapCmd.run = runTap }

func runTap(ctx context.Context, e *env, args []string) error {
	fs := e.flags(tapCmd)
	var o tap.Options
	fs.BoolVar(&o.FromStart, "from-start", false, "start at the oldest message kept instead of now")
	fs.StringVar(&o.Durable, "durable", "", "durable consumer `NAME` to create or resume")
	fs.BoolVar(&o.Register, "register", false, "crawl.docs with -durable: register the consumer as an indexer, so the crawl holds rather than drop documents it has not read")
	fs.IntVar(&o.Count, "n", 0, "stop after `COUNT` lines, a bundle's pages one each (0 = until interrupted)")
	fs.BoolVar(&o.Body, "body", false, "crawl.pages: include the body as a string")
	e.connFlags(fs, true, false)
	if err := e.parse(tapCmd, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one SUBJECT, got %d arguments", fs.NArg())
	}
	if o.Count < 0 {
		return usagef("-n %d: want at least 0", o.Count)
	}
	o.Subject = fs.Arg(0)
	nc, js, err := conn.NATS(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer nc.Close()
	t := &tap.Tapper{
		JS:   js,
		Out:  e.Stdout,
		Info: func(s string) { e.infof("%s", s) },
		Warn: func(s string) { e.infof("warning: %s", s) },
	}
	_, err = t.Run(ctx, o)
	return err
}
