package cli

import (
	"context"
	"fmt"

	"github.com/trawl/trawl/shared/urlnorm"
)

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
