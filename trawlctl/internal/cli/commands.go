package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/seed"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
	"github.com/trawl/trawl/trawlctl/internal/conn"
	"github.com/trawl/trawl/trawlctl/internal/inspect"
	"github.com/trawl/trawl/trawlctl/internal/progress"
	"github.com/trawl/trawl/trawlctl/internal/robotscheck"
	"github.com/trawl/trawl/trawlctl/internal/tap"
)

func init() {
	register(seedCmd)
	register(statusCmd)
	register(pauseCmd)
	register(resumeCmd)
	register(tapCmd)
	register(robotsCheckCmd)
	register(urlNormalizeCmd)
	register(explainCmd)
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

var seedCmd = &command{
	name:    "seed",
	args:    "[URL...]",
	summary: "publish seed URLs to crawl.discovered (normalised, batched)",
	detail: `
URLs come from the arguments and from -file (one URL a line; blank lines and lines starting
with # are skipped; "-" reads standard input). Every URL is checked before anything is
published, so a typo publishes nothing. Seeds pass the seen test like any URL: a seed
already crawled is dropped.

Priority: the frontier puts a URL in front queue min(depth, F-1) (breadth-first; queue 0
first), so -depth is the lever: depth 0 seeds go first. A deeper seed also has fewer hops
left before TRAWL_MAX_DEPTH.`,
}

func init() { seedCmd.run = runSeed }

func runSeed(ctx context.Context, e *env, args []string) error {
	fs := e.flags(seedCmd)
	depth := fs.Int("depth", 0, "depth the seeds start at (0 = highest priority)")
	var files listFlag
	fs.Var(&files, "file", "read URLs from `FILE` (repeatable; - = stdin)")
	priority := fs.String("priority", "", "not supported: priority follows -depth (see above)")
	e.connFlags(fs, true, false)
	if err := e.parse(seedCmd, fs, args); err != nil {
		return err
	}
	if *priority != "" {
		return usagef("-priority: the frontier derives priority from depth (front queue min(depth, F-1)); use -depth")
	}
	if *depth < 0 {
		return usagef("-depth %d: want at least 0", *depth)
	}
	urls := append([]string(nil), fs.Args()...)
	for _, f := range files {
		got, err := readURLFile(f, e.Stdin)
		if err != nil {
			return err
		}
		urls = append(urls, got...)
	}
	if len(urls) == 0 {
		return usagef("no URLs: give them as arguments or with -file")
	}
	batches, err := seed.Batches(urls, *depth)
	if err != nil {
		return err
	}
	if *depth > e.cfg.MaxDepth {
		e.infof("note: depth %d is beyond TRAWL_MAX_DEPTH=%d: the frontier will count these seeds out of scope", *depth, e.cfg.MaxDepth)
	}
	nc, js, err := conn.NATS(ctx, e.cfg.NATSURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	n, err := seed.Publish(ctx, js, urls, *depth)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		return fmt.Errorf("no stream takes %s on %s: start a Trawl service first (services create the streams)", topology.SubjectDiscovered, e.cfg.NATSURL)
	}
	if err != nil {
		return fmt.Errorf("published %d of %d URLs: %w", n, len(urls), err)
	}
	fmt.Fprintf(e.Stdout, "published %d URLs to %s at depth %d in %d messages\n", n, topology.SubjectDiscovered, *depth, len(batches))
	return nil
}

// readURLFile reads one URL a line, skipping blank lines and # comments.
func readURLFile(name string, stdin io.Reader) ([]string, error) {
	var r io.Reader
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return out, nil
}

var statusCmd = &command{
	name:    "status",
	summary: "frontier sizes, hosts, counters, pages/s and stage backlogs",
	detail: `
Reads the scheduler's Redis keys (every shard) and the JetStream streams and consumers.
Front queues: TRAWL_FRONT_QUEUES (or -queues) of them; when unset, every possible queue is
read and the report goes up to the last non-empty one. pages/s compares the fetched
counter of two samples (-sample apart; with -watch, consecutive snapshots).`,
}

func init() { statusCmd.run = runStatus }

func runStatus(ctx context.Context, e *env, args []string) error {
	fs := e.flags(statusCmd)
	asJSON := fs.Bool("json", false, "print JSON (one object per snapshot)")
	watch := fs.Bool("watch", false, "refresh every -interval until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "refresh interval of -watch")
	sample := fs.Duration("sample", time.Second, "without -watch: time between the two samples behind pages/s (0 = one sample, no rate)")
	fs.IntVar(&e.cfg.FrontQueues, "queues", e.cfg.FrontQueues, "front queues F (TRAWL_FRONT_QUEUES; 0 = probe)")
	e.connFlags(fs, true, true)
	if err := e.parse(statusCmd, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *interval <= 0 || *sample < 0 {
		return usagef("-interval must be positive and -sample not negative")
	}
	rdb, err := conn.Redis(ctx, e.cfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	nc, js, err := conn.NATS(ctx, e.cfg.NATSURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	rd := &progress.Reader{RDB: rdb, JS: js, O: progress.Options{Prefix: e.cfg.RedisPrefix, Shards: e.cfg.Shards, FrontQueues: e.cfg.FrontQueues}}
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
		if *sample > 0 && sleep(ctx, *sample) {
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
	for sleep(ctx, *interval) {
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

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

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
	rdb, err := conn.Redis(ctx, e.cfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	key := func(k int) string { return frontierkeys.ForShard(e.cfg.RedisPrefix, k).Paused() }
	states := make([]*redis.IntCmd, len(shards))
	// One round trip: the change, then each shard's resulting state as Redis has it.
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range shards {
			if pause {
				p.Set(ctx, key(k), "1", 0)
			} else {
				p.Del(ctx, key(k))
			}
		}
		for i, k := range shards {
			states[i] = p.Exists(ctx, key(k))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	for i, k := range shards {
		state := "running"
		if states[i].Val() > 0 {
			state = "paused"
		}
		fmt.Fprintf(e.Stdout, "shard %d: %s\n", k, state)
	}
	return nil
}

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
with -from-start: the messages waiting now, read without consuming them.`,
}

func init() { tapCmd.run = runTap }

func runTap(ctx context.Context, e *env, args []string) error {
	fs := e.flags(tapCmd)
	var o tap.Options
	fs.BoolVar(&o.FromStart, "from-start", false, "start at the oldest message kept instead of now")
	fs.StringVar(&o.Durable, "durable", "", "durable consumer `NAME` to create or resume")
	fs.IntVar(&o.Count, "n", 0, "stop after `COUNT` messages (0 = until interrupted)")
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
	nc, js, err := conn.NATS(ctx, e.cfg.NATSURL)
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

var robotsCheckCmd = &command{
	name:    "robots check",
	args:    "(-file FILE | -status CODE [-file FILE] | ROBOTS_URL) URL...",
	summary: "decide URLs against a robots.txt exactly as the fetchers do",
	detail: `
Prints "allowed URL" or "disallowed URL" for each URL, using shared/robots (RFC 9309
parsing, longest match, Allow on a tie) for the agent's product token.

  -file FILE            a robots.txt file served with 200
  -status CODE          the HTTP status robots.txt answered: 2xx uses the -file body,
                        4xx allows everything, 5xx and 429 disallow everything
  ROBOTS_URL            fetch it (following up to 5 redirects, like the fetcher); no
                        answer at all disallows everything`,
}

func init() { robotsCheckCmd.run = runRobotsCheck }

func runRobotsCheck(ctx context.Context, e *env, args []string) error {
	fs := e.flags(robotsCheckCmd)
	fs.StringVar(&e.cfg.RobotsAgent, "agent", e.cfg.RobotsAgent, "product `TOKEN` matched against user-agent lines (TRAWL_ROBOTS_AGENT)")
	file := fs.String("file", "", "robots.txt `FILE` (- = stdin)")
	status := fs.Int("status", 0, "HTTP status `CODE` robots.txt answered with")
	timeout := fs.Duration("timeout", 30*time.Second, "fetch timeout for ROBOTS_URL")
	userAgent := fs.String("user-agent", lookupDefault(e.Lookup, "TRAWL_USER_AGENT", "Mozilla/5.0 (compatible; trawl/0.1; +https://github.com/trawl/trawl)"), "User-Agent header for ROBOTS_URL (TRAWL_USER_AGENT)")
	verbose := fs.Bool("v", false, "add why: the deciding rule or status")
	if err := e.parse(robotsCheckCmd, fs, args); err != nil {
		return err
	}
	if *status != 0 && (*status < 100 || *status > 599) {
		return usagef("-status %d: want an HTTP status 100..599", *status)
	}
	rest := fs.Args()
	fromURL := *file == "" && *status == 0
	if fromURL && len(rest) < 2 || !fromURL && len(rest) < 1 {
		return usagef("want %s", robotsCheckCmd.args)
	}
	agent := e.cfg.RobotsAgent
	var src string
	var entry *robots.Entry
	if fromURL {
		src, rest = rest[0], rest[1:]
		f := &robotscheck.Fetcher{Timeout: *timeout, UserAgent: *userAgent}
		got, err := f.Fetch(ctx, agent, src)
		if err != nil {
			return err
		}
		entry = got
	} else {
		var body []byte
		if *file != "" {
			var err error
			if body, err = readFile(*file, e.Stdin); err != nil {
				return err
			}
			src = *file
		}
		code := *status
		if code == 0 {
			code = 200
		}
		entry = robotscheck.FromBody(agent, code, body)
	}
	if *verbose || fromURL {
		line := fmt.Sprintf("robots.txt %s: %s", src, entry.Class)
		if entry.Status != 0 {
			line += fmt.Sprintf(" (status %d)", entry.Status)
		}
		if entry.Error != "" {
			line += ": " + entry.Error
		}
		e.infof("%s, agent %s", line, entry.Agent)
	}
	failed := false
	for _, r := range robotscheck.Check(entry, rest) {
		if r.Err != nil {
			e.infof("%v", r.Err)
			failed = true
			continue
		}
		verdict := "disallowed"
		if r.Decision.Allowed {
			verdict = "allowed"
		}
		line := verdict + " " + r.URL
		if *verbose {
			line += "\t" + string(r.Decision.Reason)
			if r.Decision.Rule != "" {
				line += ": " + r.Decision.Rule
			}
		}
		fmt.Fprintln(e.Stdout, line)
	}
	if failed {
		return errSilent
	}
	return nil
}

func lookupDefault(lookup func(string) (string, bool), name, def string) string {
	if v, ok := lookup(name); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	return def
}

func readFile(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

var urlNormalizeCmd = &command{
	name:    "url normalize",
	args:    "URL...",
	summary: "print each URL in the crawl's normal form (urlnorm.Normalize)",
	detail: `
One line per URL. An invalid URL gets an error line on stderr instead, and the exit
status is 1.`,
}

func init() { urlNormalizeCmd.run = runURLNormalize }

func runURLNormalize(_ context.Context, e *env, args []string) error {
	fs := e.flags(urlNormalizeCmd)
	if err := e.parse(urlNormalizeCmd, fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("want at least one URL")
	}
	failed := false
	for _, raw := range fs.Args() {
		n, err := urlnorm.Normalize(raw)
		if err != nil {
			e.infof("invalid URL %q: %v", raw, err)
			failed = true
			continue
		}
		fmt.Fprintln(e.Stdout, n)
	}
	if failed {
		return errSilent
	}
	return nil
}

var explainCmd = &command{
	name:    "explain",
	args:    "URL",
	summary: "what the crawl knows about a URL: seen, scope, robots, frontier, host",
	detail: `
Read-only. Seen: the dedup Bloom filter's bits for the URL. Scope: the URL-only rules
(length, trap, TRAWL_INCLUDE/EXCLUDE); depth and host/domain scope depend on how the URL was
reached. Robots: the fetchers' cached robots.txt entry for the origin. Frontier: the host's
back queue, heap entry and lease, and the front queues (each searched up to -scan
entries). Politeness: the host:<host> hash. The last fetch outcome cannot be looked up by
URL in JetStream; the report says how to search for it.`,
}

func init() { explainCmd.run = runExplain }

func runExplain(ctx context.Context, e *env, args []string) error {
	fs := e.flags(explainCmd)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	scanLimit := fs.Int("scan", 10000, "most entries of each queue searched for the URL")
	fs.IntVar(&e.cfg.FrontQueues, "queues", e.cfg.FrontQueues, "front queues F (TRAWL_FRONT_QUEUES; 0 = probe all 64)")
	e.connFlags(fs, false, true)
	if err := e.parse(explainCmd, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one URL, got %d arguments", fs.NArg())
	}
	if *scanLimit <= 0 {
		return usagef("-scan %d: want at least 1", *scanLimit)
	}
	if _, err := urlnorm.Normalize(fs.Arg(0)); err != nil {
		return fmt.Errorf("invalid URL %q: %w", fs.Arg(0), err)
	}
	o := inspect.Options{
		Prefix: e.cfg.RedisPrefix, Shards: e.cfg.Shards, FrontQueues: e.cfg.FrontQueues,
		Agent: e.cfg.RobotsAgent, MaxDepth: e.cfg.MaxDepth, MaxURLLength: e.cfg.MaxURLLength,
		ScanLimit: *scanLimit,
	}
	// Validate compiled them already; these cannot fail.
	if e.cfg.Include != "" {
		o.Include = regexp.MustCompile(e.cfg.Include)
	}
	if e.cfg.Exclude != "" {
		o.Exclude = regexp.MustCompile(e.cfg.Exclude)
	}
	rdb, err := conn.Redis(ctx, e.cfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	now := time.Now()
	o.Now = func() time.Time { return now }
	r, err := inspect.Explain(ctx, rdb, o, fs.Arg(0))
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return inspect.WriteText(e.Stdout, r, now)
}
