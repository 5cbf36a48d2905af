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
	"github.com/trawl/trawl/shared/policy"
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

	S3 S3 // TRAWL_ARCHIVE_S3_*: sealed files uploaded to object storage (off without an endpoint)
}

// S3 are the object storage settings.
type S3 struct {
	Endpoint   string // TRAWL_ARCHIVE_S3_ENDPOINT: host[:port]; empty = no upload
	TLS        bool   // TRAWL_ARCHIVE_S3_TLS
	Region     string // TRAWL_ARCHIVE_S3_REGION
	Bucket     string // TRAWL_ARCHIVE_S3_BUCKET
	Prefix     string // TRAWL_ARCHIVE_S3_PREFIX: key = prefix + file name
	PartSize   int64  // TRAWL_ARCHIVE_S3_PART_SIZE
	Attempts   int    // TRAWL_ARCHIVE_S3_ATTEMPTS: tries of each request
	KeepLocal  bool   // TRAWL_ARCHIVE_S3_KEEP_LOCAL
	SecretsDir string // TRAWL_SECRETS_DIR: holds archive-s3-access-key and archive-s3-secret-key
}

// Secret file names, in TRAWL_SECRETS_DIR.
const (
	S3AccessKeySecret = "archive-s3-access-key"
	S3SecretKeySecret = "archive-s3-secret-key"
)

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
		S3: S3{
			Endpoint:   r.String("ARCHIVE_S3_ENDPOINT", ""),
			TLS:        r.Bool("ARCHIVE_S3_TLS", true),
			Region:     r.String("ARCHIVE_S3_REGION", "us-east-1"),
			Bucket:     r.String("ARCHIVE_S3_BUCKET", ""),
			Prefix:     r.String("ARCHIVE_S3_PREFIX", ""),
			PartSize:   r.Bytes("ARCHIVE_S3_PART_SIZE", 64<<20),
			Attempts:   r.Int("ARCHIVE_S3_ATTEMPTS", 5),
			KeepLocal:  r.Bool("ARCHIVE_S3_KEEP_LOCAL", false),
			SecretsDir: r.String("SECRETS_DIR", policy.Defaults.SecretsDir),
		},
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
	if c.S3.Endpoint != "" {
		if c.S3.Bucket == "" {
			bad("TRAWL_ARCHIVE_S3_BUCKET is required with TRAWL_ARCHIVE_S3_ENDPOINT")
		}
		if strings.Contains(c.S3.Endpoint, "/") {
			bad("TRAWL_ARCHIVE_S3_ENDPOINT=%q: want host[:port], no scheme or path (TRAWL_ARCHIVE_S3_TLS picks https)", c.S3.Endpoint)
		}
		// S3's bounds: parts of 5 MiB to 5 GiB, at most 10,000 of them.
		if c.S3.PartSize < 5<<20 || c.S3.PartSize > 5<<30 {
			bad("TRAWL_ARCHIVE_S3_PART_SIZE=%d: want 5MiB..5GiB", c.S3.PartSize)
		} else if c.MaxSize/c.S3.PartSize >= 10000 {
			bad("TRAWL_ARCHIVE_S3_PART_SIZE=%d: a file of TRAWL_ARCHIVE_MAX_SIZE would take over 10,000 parts", c.S3.PartSize)
		}
		if c.S3.Attempts < 1 || c.S3.Attempts > 100 {
			bad("TRAWL_ARCHIVE_S3_ATTEMPTS=%d: want 1..100", c.S3.Attempts)
		}
		if strings.HasPrefix(c.S3.Prefix, "/") {
			bad("TRAWL_ARCHIVE_S3_PREFIX=%q: a key does not begin with /", c.S3.Prefix)
		}
	}
	return errors.Join(errs...)
}
