package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/digestindex"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
	"github.com/trawl/trawl/trawlctl/internal/conn"
	crawlreport "github.com/trawl/trawl/trawlctl/internal/report"
)

var reportCmd = &command{
	name:    "report",
	summary: "the crawl's reports, as Heritrix writes them (written beside the WARC files with -dir)",
	detail: `
Prints crawl-report.txt: the frontier's counters, what the archive holds, the bytes
deduplication saved. With -dir (the archiver's TRAWL_ARCHIVE_DIR) it reads the CDXJ index
beside each WARC file and writes, into that directory (or -out), crawl-report.txt,
hosts-report.txt, mimetype-report.txt, responsecode-report.txt, skipped-report.txt and,
with -seeds (the file given to trawlctl seed), seeds-report.txt. skipped-report.txt lists
every URL the schedulers ended unarchived with its reason, read from their skip log
(CRAWL_SKIPPED) through an ephemeral consumer. Read-only: it changes nothing in Redis or
NATS.`,
}

func init() { reportCmd.run = runReport }

func runReport(ctx context.Context, e *env, args []string) error {
	fs := e.flags(reportCmd)
	dir := fs.String("dir", "", "directory of the WARC files and their CDXJ indexes (TRAWL_ARCHIVE_DIR)")
	out := fs.String("out", "", "directory the reports are written to (default: -dir)")
	seedsFile := fs.String("seeds", "", "the crawl's seeds, one URL a line, for seeds-report.txt (- for standard input)")
	e.connFlags(fs, true, true)
	if err := e.parse(reportCmd, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *out != "" && *dir == "" {
		return usagef("-out needs -dir: the reports other than the crawl report come from the CDXJ indexes")
	}
	var seeds []string
	if *seedsFile != "" {
		raw, err := readURLFile(*seedsFile, e.Stdin)
		if err != nil {
			return err
		}
		seeds = make([]string, 0, len(raw))
		for _, s := range raw {
			n, err := urlnorm.Normalize(s)
			if err != nil {
				e.infof("seed %q left out: %v", s, err)
				continue
			}
			seeds = append(seeds, n)
		}
	}
	rdb, err := conn.Redis(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer rdb.Close()
	c, err := readCrawl(ctx, rdb, e)
	if err != nil {
		return err
	}
	if *dir != "" {
		nc, js, err := conn.NATS(ctx, e.cfg.Conn)
		if err != nil {
			return err
		}
		var bad int
		c.Skipped, bad, err = readSkipped(ctx, js)
		nc.Close()
		if bad > 0 {
			e.infof("%d skip log entries do not decode: left out", bad)
		}
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			e.infof("no skip log (%s): skipped-report.txt lists only the failures of the frontier's error log", topology.StreamSkipped)
		case err != nil:
			return err
		}
	}
	b := crawlreport.New(c)
	b.Seeds = seeds
	if *dir != "" {
		bad := 0
		if err := b.ReadDir(ctx, *dir, func(file string, line int, err error) {
			if bad++; bad <= 5 {
				e.infof("%s:%d: %v", file, line, err)
			}
		}); err != nil {
			return err
		}
		if b.Indexes == 0 {
			e.infof("no CDXJ index in %s: the reports count no capture", *dir)
		}
		to := *out
		if to == "" {
			to = *dir
		}
		if err := b.Write(to); err != nil {
			return err
		}
		e.infof("wrote %d reports to %s", len(b.Files()), to)
	}
	return b.WriteCrawlReport(e.Stdout)
}

// readCrawl reads the frontier's counters and error log and the archiver's dedup counters.
func readCrawl(ctx context.Context, rdb redis.UniversalClient, e *env) (crawlreport.Crawl, error) {
	fr := frontierkeys.OpenReadOnly(rdb, e.cfg.RedisPrefix, e.cfg.Shards)
	shards, err := fr.Counters(ctx)
	if err != nil {
		return crawlreport.Crawl{}, err
	}
	sum := frontierkeys.Sum(shards).Counters
	errs, err := fr.ErrorLog(ctx)
	if err != nil {
		return crawlreport.Crawl{}, err
	}
	st, err := rdb.HGetAll(ctx, digestindex.Stats(e.cfg.RedisPrefix)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return crawlreport.Crawl{}, fmt.Errorf("archive counters: %w", err)
	}
	revisits, _ := strconv.ParseInt(st[digestindex.StatRevisits], 10, 64)
	saved, _ := strconv.ParseInt(st[digestindex.StatSavedBytes], 10, 64)
	return crawlreport.Crawl{Prefix: e.cfg.RedisPrefix, Counters: &sum, Errors: errs, Revisits: revisits, SavedBytes: saved}, nil
}

// skipReadIdle bounds the wait for the skip log's next entry: the stream said it holds
// more, so a longer silence is a server gone.
const skipReadIdle = 10 * time.Second

// readSkipped reads the skip log (CRAWL_SKIPPED) from its oldest entry to the last one
// stored when the read began, through an ordered (ephemeral, unacknowledged) consumer that
// takes nothing from anyone. An entry that does not decode is left out, counted in bad.
func readSkipped(ctx context.Context, js jetstream.JetStream) (urls []crawlmsg.SkippedURL, bad int, err error) {
	st, err := js.Stream(ctx, topology.StreamSkipped)
	if err != nil {
		return nil, bad, fmt.Errorf("skip log: %w", err)
	}
	last := st.CachedInfo().State.LastSeq
	if st.CachedInfo().State.Msgs == 0 {
		return []crawlmsg.SkippedURL{}, 0, nil
	}
	cons, err := js.OrderedConsumer(ctx, topology.StreamSkipped, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, bad, fmt.Errorf("skip log: consumer: %w", err)
	}
	out := []crawlmsg.SkippedURL{}
	var seen uint64
	for {
		batch, err := cons.Fetch(1024, jetstream.FetchMaxWait(skipReadIdle))
		if err != nil {
			return nil, bad, fmt.Errorf("skip log: fetch: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, bad, fmt.Errorf("skip log: %w", err)
			}
			var b crawlmsg.SkippedBatch
			if err := crawlmsg.Unmarshal(m.Data(), &b); err != nil {
				bad++
			} else {
				out = append(out, b.URLs...)
			}
			seen = md.Sequence.Stream
			if md.Sequence.Stream >= last {
				return out, bad, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, bad, fmt.Errorf("skip log: fetch: %w", err)
		}
		if n == 0 {
			return nil, bad, fmt.Errorf("skip log: nothing for %s after sequence %d of %d", skipReadIdle, seen, last)
		}
		if err := ctx.Err(); err != nil {
			return nil, bad, err
		}
	}
}
