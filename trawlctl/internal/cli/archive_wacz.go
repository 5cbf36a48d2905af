package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/trawl/trawl/shared/wacz"
)

var archiveWACZCmd = &command{
	name:    "archive wacz",
	args:    "-o FILE.wacz (DIR | FILE.warc.gz...)",
	summary: "package sealed WARC files and their CDXJ indexes as WACZ 1.1.1",
	detail: `
Writes one WACZ file (what ReplayWeb.page, pywb and Browsertrix load) of the sealed WARC
files of DIR (the archiver's TRAWL_ARCHIVE_DIR; files still being written, *.open, are
left out) or of the files named, each with its index beside it (TRAWL-….cdxj):
archive/ (the WARC files, stored), indexes/index.cdxj (merged, sorted),
pages/pages.jsonl (every URL captured as HTML with status 200, with its title),
datapackage.json and datapackage-digest.json (sha256 of every entry). The package is
written to FILE.wacz.tmp and renamed when whole, then checked entry by entry.`,
}

func init() { archiveWACZCmd.run = runArchiveWACZ }

func runArchiveWACZ(ctx context.Context, e *env, args []string) error {
	fs := e.flags(archiveWACZCmd)
	out := fs.String("o", "", "the WACZ `FILE` to write")
	title := fs.String("title", "", "the package's `TITLE` (datapackage.json)")
	if err := e.parse(archiveWACZCmd, fs, args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return usagef("want %s", archiveWACZCmd.args)
	}
	var warcs []string
	for _, a := range fs.Args() {
		st, err := os.Stat(a)
		if err != nil {
			return fmt.Errorf("%w", err)
		}
		if !st.IsDir() {
			if !strings.HasSuffix(a, ".warc.gz") {
				return usagef("%s: want a directory or a sealed .warc.gz file", a)
			}
			warcs = append(warcs, a)
			continue
		}
		got, err := wacz.SealedWARCs(a)
		if err != nil {
			return err
		}
		if len(got) == 0 {
			return fmt.Errorf("%s holds no sealed WARC file (*.warc.gz)", a)
		}
		warcs = append(warcs, got...)
	}
	sum, err := wacz.BuildFile(ctx, *out, warcs, wacz.Options{Title: *title, Software: "Trawl trawlctl"})
	if err != nil {
		return err
	}
	if err := wacz.Verify(*out); err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "%s: %d WARC files, %d index lines, %d pages\n", filepath.Clean(*out), len(sum.WARCs), sum.Records, len(sum.Pages))
	return nil
}
