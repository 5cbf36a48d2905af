// Package config reads the archiver's TRAWL_* settings.
package config

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/trawl/trawl/shared/digestindex"
	"github.com/trawl/trawl/shared/envconfig"
)

// DefaultHTTPAddr is where the archiver serves /metrics, /healthz and /readyz.
const DefaultHTTPAddr = ":9105"

// Config is the archiver's configuration.
type Config struct {
	Common envconfig.Common

	Dir         string // TRAWL_ARCHIVE_DIR: where WARC and CDXJ files are written (required)
	MaxSize     int64  // TRAWL_ARCHIVE_MAX_SIZE: a WARC file is sealed before a batch would take it past this
	ID          string // TRAWL_ARCHIVE_ID: names this archiver in its file names
	Operator    string // TRAWL_ARCHIVE_OPERATOR: warcinfo operator (contact)
	Robots      string // TRAWL_ARCHIVE_ROBOTS: warcinfo robots policy
	Description string // TRAWL_ARCHIVE_DESCRIPTION: warcinfo description
	Batch       int    // TRAWL_ARCHIVE_BATCH: pages written per fsync
	Revisits    bool   // TRAWL_ARCHIVE_REVISITS: identical payloads become revisit records
	// Index is TRAWL_ARCHIVE_DEDUP_INDEX: the name of the payload digest index ("": the
	// crawl's Redis prefix); crawls naming the same index on one Redis share it.
	Index string
}

// DedupIndex is the name of the payload digest index this archiver uses.
func (c Config) DedupIndex() string { return digestindex.Name(c.Index, c.Common.RedisPrefix) }

// Load reads the configuration; the error lists every value that could not be read.
func Load(r *envconfig.Reader) (Config, error) {
	c := Config{
		Common:      envconfig.LoadCommon(r, DefaultHTTPAddr),
		Dir:         r.String("ARCHIVE_DIR", ""),
		MaxSize:     r.Bytes("ARCHIVE_MAX_SIZE", 1<<30),
		ID:          r.String("ARCHIVE_ID", defaultID()),
		Operator:    r.String("ARCHIVE_OPERATOR", ""),
		Robots:      r.String("ARCHIVE_ROBOTS", "obey"),
		Description: r.String("ARCHIVE_DESCRIPTION", ""),
		Batch:       r.Int("ARCHIVE_BATCH", 64),
		Revisits:    r.Bool("ARCHIVE_REVISITS", true),
		Index:       digestindex.LoadName(r),
	}
	return c, r.Err()
}

// defaultID is the host name reduced to the characters a file name may hold.
func defaultID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "archiver"
	}
	h = strings.Map(func(r rune) rune {
		if idRE.MatchString(string(r)) {
			return r
		}
		return '-'
	}, h)
	return strings.Trim(h, "-")
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Validate reports every invalid setting.
func (c Config) Validate() error {
	errs := []error{c.Common.Validate()}
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Dir == "" {
		bad("TRAWL_ARCHIVE_DIR is required: the directory WARC files are written to")
	}
	// A file always holds at least one whole exchange, so a small cap only means one
	// capture per file; below 64 KiB it is a mistake for a size in another unit.
	if c.MaxSize < 64<<10 || c.MaxSize > 1<<40 {
		bad("TRAWL_ARCHIVE_MAX_SIZE=%d: want 64KiB..1TiB", c.MaxSize)
	}
	if !idRE.MatchString(c.ID) || len(c.ID) > 64 {
		bad("TRAWL_ARCHIVE_ID=%q: want 1..64 of A-Z a-z 0-9 _ . -", c.ID)
	}
	for name, v := range map[string]string{"TRAWL_ARCHIVE_OPERATOR": c.Operator, "TRAWL_ARCHIVE_ROBOTS": c.Robots, "TRAWL_ARCHIVE_DESCRIPTION": c.Description} {
		if strings.ContainsAny(v, "\r\n") {
			bad("%s: a warcinfo field is one line", name)
		}
	}
	errs = append(errs, digestindex.CheckName(c.Index))
	if c.Batch < 1 || c.Batch > 1024 {
		bad("TRAWL_ARCHIVE_BATCH=%d: want 1..1024", c.Batch)
	}
	return errors.Join(errs...)
}
