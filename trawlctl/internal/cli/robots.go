package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/trawlctl/internal/robotscheck"
)

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
  ROBOTS_URL            fetch it as the fetcher does (following up to 5 redirects, to
                        public addresses and TRAWL_ALLOW_CIDRS only); no answer at all
                        disallows everything

The first TRAWL_ROBOTS_MAX_BYTES of the file are parsed, as by the fetchers.`,
}

func init() { robotsCheckCmd.run = runRobotsCheck }

func runRobotsCheck(ctx context.Context, e *env, args []string) error {
	fs := e.flags(robotsCheckCmd)
	fs.StringVar(&e.cfg.RobotsAgent, "agent", e.cfg.RobotsAgent, "product `TOKEN` matched against user-agent lines (TRAWL_ROBOTS_AGENT)")
	file := fs.String("file", "", "robots.txt `FILE` (- = stdin)")
	status := fs.Int("status", 0, "HTTP status `CODE` robots.txt answered with")
	timeout := fs.Duration("timeout", 30*time.Second, "fetch timeout for ROBOTS_URL")
	fs.StringVar(&e.cfg.UserAgent, "user-agent", e.cfg.UserAgent, "User-Agent header for ROBOTS_URL (TRAWL_USER_AGENT)")
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
		f := &robotscheck.Fetcher{Timeout: *timeout, UserAgent: e.cfg.UserAgent, Allow: e.cfg.AllowCIDRs, MaxBytes: e.cfg.Robots.MaxBytes}
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
		entry = robotscheck.FromBody(agent, code, body, e.cfg.Robots.MaxBytes)
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

func readFile(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}
