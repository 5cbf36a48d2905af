package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/trawl/trawl/shared/digestindex"
	"github.com/trawl/trawl/trawlctl/internal/conn"
)

var archiveSeedCmd = &command{
	name:    "archive seed-index",
	args:    "FILE.cdxj...",
	summary: "load CDXJ indexes into the archive's payload digest index",
	detail: `
Adds the 200 responses of each CDXJ index (the archiver's own, pywb's, Browsertrix's:
"urlkey timestamp {json}" with url, status, digest, mime) to the payload digest index
named by -index (TRAWL_ARCHIVE_DEDUP_INDEX; default the crawl's prefix). A crawl using
that index then writes an identical payload as a revisit of the capture the line names.
Revisits, other statuses and digests other than SHA-1 are skipped; an entry already in
the index is kept.`,
}

var archiveForgetCmd = &command{
	name:    "archive forget",
	args:    "FILE.cdxj...",
	summary: "drop a WARC file's captures from the payload digest index (before deleting it)",
	detail: `
Drops the entries of the payload digest index that name a capture of each CDXJ index
(same digest, URL and second), so that a crawl using the index archives those payloads
in full again instead of writing revisits of a file about to be deleted. Revisits
already written keep referring to it.`,
}

func init() {
	archiveSeedCmd.run = func(ctx context.Context, e *env, args []string) error {
		return runArchiveIndex(ctx, e, archiveSeedCmd, args, "added", (*digestindex.Index).Seed)
	}
	archiveForgetCmd.run = func(ctx context.Context, e *env, args []string) error {
		return runArchiveIndex(ctx, e, archiveForgetCmd, args, "dropped", (*digestindex.Index).ForgetCDXJ)
	}
}

func runArchiveIndex(ctx context.Context, e *env, c *command, args []string, verb string,
	apply func(*digestindex.Index, context.Context, io.Reader) (digestindex.LoadStats, error)) error {
	fs := e.flags(c)
	e.connFlags(fs, false, true)
	fs.StringVar(&e.cfg.DedupIndex, "index", e.cfg.DedupIndex, "name of the digest index (TRAWL_ARCHIVE_DEDUP_INDEX; default the prefix)")
	if err := e.parse(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no CDXJ file given (see trawlctl %s -h)", c.name)
	}
	rdb, err := conn.Redis(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer rdb.Close()
	name := digestindex.Name(e.cfg.DedupIndex, e.cfg.RedisPrefix)
	idx := digestindex.New(rdb, name)
	for _, path := range fs.Args() {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		st, err := apply(idx, ctx, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Fprintf(e.Stdout, "%s: %d captures, %d %s (index %s), %d skipped, %d malformed lines\n",
			path, st.Captures, st.Changed, verb, name, st.Skipped, st.Bad)
	}
	return nil
}
