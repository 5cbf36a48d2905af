package envconfig

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

// Conn are the settings that find a crawl: every service reads them (in Common), and so
// does trawlctl.
type Conn struct {
	NATSURL     string // TRAWL_NATS_URL
	RedisURL    string // TRAWL_REDIS_URL
	RedisPrefix string // TRAWL_REDIS_PREFIX: first part of every key; two crawls can share a Redis
	Shards      int    // TRAWL_SHARDS: scheduler shards
	// NATSAuth is what a NATS connection presents beyond its URL: TRAWL_NATS_CREDS,
	// TRAWL_NATS_NKEY, TRAWL_NATS_TLS_CA, TRAWL_NATS_TLS_CERT, TRAWL_NATS_TLS_KEY.
	NATSAuth natsx.Auth
	// RedisTLS are a rediss:// connection's files: TRAWL_REDIS_TLS_CA,
	// TRAWL_REDIS_TLS_CERT, TRAWL_REDIS_TLS_KEY.
	RedisTLS redisx.TLSFiles
}

// NATSOptions are the nats.go options presenting NATSAuth (natsx.Connect takes them).
func (c Conn) NATSOptions() ([]nats.Option, error) { return c.NATSAuth.Options() }

// RedisOptions are the redisx options presenting RedisTLS (redisx.Connect takes them).
func (c Conn) RedisOptions() []redisx.Option { return []redisx.Option{redisx.WithTLS(c.RedisTLS)} }

// DefaultLeaseTTL is TRAWL_LEASE_TTL's default: how long a fetch task holds its host.
const DefaultLeaseTTL = 2 * time.Minute

// LoadLeaseTTL reads TRAWL_LEASE_TTL, for the services and for the tools that date the
// tasks out by it (trawlctl status).
func LoadLeaseTTL(r *Reader) time.Duration { return r.Duration("LEASE_TTL", DefaultLeaseTTL) }

// MaxTaskBatch bounds TRAWL_TASK_BATCH: a fetcher needs at least that many fetch slots.
const MaxTaskBatch = 64

// MaxShards bounds TRAWL_SHARDS.
const MaxShards = 1024

// LoadConn reads the settings that find a crawl.
func LoadConn(r *Reader) Conn {
	return Conn{
		NATSURL:     r.String("NATS_URL", "nats://127.0.0.1:4222"),
		RedisURL:    r.String("REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisPrefix: r.String("REDIS_PREFIX", redisx.DefaultPrefix),
		Shards:      r.Int("SHARDS", 1),
		NATSAuth: natsx.Auth{
			Creds:    r.String("NATS_CREDS", ""),
			NKeySeed: r.String("NATS_NKEY", ""),
			TLSCA:    r.String("NATS_TLS_CA", ""),
			TLSCert:  r.String("NATS_TLS_CERT", ""),
			TLSKey:   r.String("NATS_TLS_KEY", ""),
		},
		RedisTLS: redisx.TLSFiles{
			CA:   r.String("REDIS_TLS_CA", ""),
			Cert: r.String("REDIS_TLS_CERT", ""),
			Key:  r.String("REDIS_TLS_KEY", ""),
		},
	}
}

// Validate reports every invalid setting. flag, when not nil, names the command-line flag
// that overrides a variable (a CLI's), so the message points at both.
func (c Conn) Validate(flag func(variable string) string) error {
	name := func(v string) string {
		if flag != nil {
			if f := flag(v); f != "" {
				return v + " (" + f + ")"
			}
		}
		return v
	}
	var errs []error
	// Several NATS servers are one comma-separated list, as nats.Connect takes it.
	if err := natsx.CheckURL(c.NATSURL); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", name("TRAWL_NATS_URL"), err))
	}
	if err := redisx.Check(c.RedisURL); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", name("TRAWL_REDIS_URL"), err))
	}
	if c.RedisPrefix == "" {
		errs = append(errs, fmt.Errorf("%s: must not be empty", name("TRAWL_REDIS_PREFIX")))
	}
	if c.Shards < 1 || c.Shards > MaxShards {
		errs = append(errs, fmt.Errorf("%s=%d: want 1..%d", name("TRAWL_SHARDS"), c.Shards, MaxShards))
	}
	return errors.Join(append(errs, c.checkFiles()...)...)
}

// checkFiles reports credential and TLS files that are missing, unreadable or given
// without their partner, naming the variable; what the files hold is checked on connect.
func (c Conn) checkFiles() []error {
	var errs []error
	for _, f := range []struct{ name, path string }{
		{"TRAWL_NATS_CREDS", c.NATSAuth.Creds}, {"TRAWL_NATS_NKEY", c.NATSAuth.NKeySeed},
		{"TRAWL_NATS_TLS_CA", c.NATSAuth.TLSCA}, {"TRAWL_NATS_TLS_CERT", c.NATSAuth.TLSCert},
		{"TRAWL_NATS_TLS_KEY", c.NATSAuth.TLSKey}, {"TRAWL_REDIS_TLS_CA", c.RedisTLS.CA},
		{"TRAWL_REDIS_TLS_CERT", c.RedisTLS.Cert}, {"TRAWL_REDIS_TLS_KEY", c.RedisTLS.Key},
	} {
		if f.path == "" {
			continue
		}
		file, err := os.Open(f.path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
			continue
		}
		file.Close()
	}
	if c.NATSAuth.Creds != "" && c.NATSAuth.NKeySeed != "" {
		errs = append(errs, errors.New("TRAWL_NATS_CREDS and TRAWL_NATS_NKEY: set one, not both"))
	}
	if (c.NATSAuth.TLSCert == "") != (c.NATSAuth.TLSKey == "") {
		errs = append(errs, errors.New("TRAWL_NATS_TLS_CERT and TRAWL_NATS_TLS_KEY: set both or neither"))
	}
	if (c.RedisTLS.Cert == "") != (c.RedisTLS.Key == "") {
		errs = append(errs, errors.New("TRAWL_REDIS_TLS_CERT and TRAWL_REDIS_TLS_KEY: set both or neither"))
	}
	if c.RedisTLS.Set() && !strings.HasPrefix(c.RedisURL, "rediss") {
		errs = append(errs, errors.New("TRAWL_REDIS_TLS_*: set, but TRAWL_REDIS_URL is not a rediss:// (TLS) URL"))
	}
	return errs
}

// Common is the configuration every service reads. Each pipeline consumer takes its ack
// wait from the service that owns it (topology.ConsumerSpec.Owner); another service whose
// TRAWL_ACK_WAIT or TRAWL_LEASE_TTL would give it another is refused (natsx.Ensure).
type Common struct {
	Conn
	HTTPAddr    string        // TRAWL_HTTP_ADDR: /metrics, /healthz, /readyz
	LogLevel    string        // TRAWL_LOG_LEVEL: debug, info, warn, error
	LogFormat   string        // TRAWL_LOG_FORMAT: text or json
	Pprof       bool          // TRAWL_PPROF: serve the Go profiler on HTTPAddr
	LeaseTTL    time.Duration // TRAWL_LEASE_TTL: how long a fetch task holds its host
	AckWait     time.Duration // TRAWL_ACK_WAIT: redelivery timeout of the fast stages
	ErrorAfter  int           // TRAWL_LOG_ERROR_AFTER: deliveries after which a message still failing is logged at error level
	DeadAfter   int           // TRAWL_DEAD_LETTER_AFTER: deliveries after which a message still failing is parked in CRAWL_DEAD
	Replicas    int           // TRAWL_STREAM_REPLICAS: JetStream replicas per stream
	MemoryStore bool          // TRAWL_STREAM_MEMORY: memory instead of file storage (benchmarks only)
	// TaskBatch is the most fetch tasks in one crawl.fetch message (TRAWL_TASK_BATCH): the
	// scheduler packs up to this many, and a fetcher counts a message as this many of its
	// fetch slots until it has read how many it holds.
	TaskBatch int
	// Recrawl is TRAWL_RECRAWL: RecrawlOff (a one-shot crawl) or RecrawlAdaptive (every
	// fetched URL is fetched again on its own schedule; shared/recrawl holds the rest).
	Recrawl string
	// RecrawlSplit is TRAWL_RECRAWL_STREAMS: the streams the recrawl schedules are split
	// over (topology.Options.RecrawlStreams), 1..TRAWL_SHARDS.
	RecrawlSplit int
	// RecrawlPlacement is TRAWL_RECRAWL_PLACEMENT: NATS server tags (SplitList); recrawl
	// stream g is placed on a server with tag g mod their number
	// (topology.Options.RecrawlPlacement). A string, so that Common stays comparable.
	RecrawlPlacement string
	// RedisWait is TRAWL_REDIS_WAIT: how long the writes that must survive a Redis master's
	// crash wait for a replica to have them (redisx.Waiter); 0 = never.
	RedisWait time.Duration
	// PagesMaxBytes (TRAWL_PAGES_MAX_BYTES) caps the pages stream and, apart, the bodies
	// object store; DocsMaxBytes (TRAWL_DOCS_MAX_BYTES) the docs stream. JetStream reserves
	// a file stream's cap out of its storage limit when the stream is made, so together
	// they set the free disk NATS needs (topology.Options).
	PagesMaxBytes int64
	DocsMaxBytes  int64
	// SkippedMaxBytes is TRAWL_SKIPPED_MAX_BYTES, the cap of the skip log (CRAWL_SKIPPED).
	SkippedMaxBytes int64
	// DeadMaxBytes is TRAWL_DEAD_MAX_BYTES, the cap of the dead letters (CRAWL_DEAD).
	DeadMaxBytes int64
	// Durability is TRAWL_FSYNC, which the stores run with: a stage acknowledges its input
	// only once what it stored for it is past the level's window (durability.Level.Window).
	Durability durability.Level
	// MemoryLimit is TRAWL_MEMORY_LIMIT: the memory the process may take (its container's
	// limit), from which runner.SetMemoryLimit sets the Go runtime's soft limit; 0 = the
	// process's cgroup limit, if any.
	MemoryLimit int64
}

// MinStreamBytes is the least TRAWL_PAGES_MAX_BYTES and TRAWL_DOCS_MAX_BYTES: room for
// several of the largest messages (topology.Options.MaxMsgSize).
const MinStreamBytes = 64 << 20

// MinMemoryLimit is the least TRAWL_MEMORY_LIMIT: below it a service's own working set
// (pull windows, Redis pipelines) would keep the collector running all the time.
const MinMemoryLimit = 64 << 20

// DefaultDeadAfter is TRAWL_DEAD_LETTER_AFTER's default: at the consume loops' longest
// backoff (30 s), a message is parked after about eight hours of failing.
const DefaultDeadAfter = 1000

// MaxRedisWait bounds TRAWL_REDIS_WAIT, below the Redis client's read timeout.
const MaxRedisWait = 5 * time.Second

// Recrawl modes (TRAWL_RECRAWL).
const (
	RecrawlOff      = "off"
	RecrawlAdaptive = "adaptive"
)

// LoadCommon reads the common settings; defaultHTTP is the service's own /metrics address.
func LoadCommon(r *Reader, defaultHTTP string) Common {
	return Common{
		Conn:             LoadConn(r),
		HTTPAddr:         r.String("HTTP_ADDR", defaultHTTP),
		LogLevel:         r.String("LOG_LEVEL", "info"),
		LogFormat:        r.String("LOG_FORMAT", "text"),
		Pprof:            r.Bool("PPROF", false),
		LeaseTTL:         LoadLeaseTTL(r),
		AckWait:          r.Duration("ACK_WAIT", 30*time.Second),
		ErrorAfter:       r.Int("LOG_ERROR_AFTER", 20),
		DeadAfter:        r.Int("DEAD_LETTER_AFTER", DefaultDeadAfter),
		Replicas:         r.Int("STREAM_REPLICAS", 1),
		MemoryStore:      r.Bool("STREAM_MEMORY", false),
		TaskBatch:        r.Int("TASK_BATCH", 8),
		Recrawl:          r.String("RECRAWL", RecrawlOff),
		RecrawlSplit:     r.Int("RECRAWL_STREAMS", 1),
		RecrawlPlacement: strings.Join(r.List("RECRAWL_PLACEMENT", nil), ","),
		RedisWait:        r.Duration("REDIS_WAIT", 0),
		PagesMaxBytes:    r.Bytes("PAGES_MAX_BYTES", topology.DefaultOptions(0).PagesMaxBytes),
		DocsMaxBytes:     r.Bytes("DOCS_MAX_BYTES", topology.DefaultOptions(0).DocsMaxBytes),
		SkippedMaxBytes:  r.Bytes("SKIPPED_MAX_BYTES", topology.DefaultOptions(0).SkippedMaxBytes),
		DeadMaxBytes:     r.Bytes("DEAD_MAX_BYTES", topology.DefaultOptions(0).DeadMaxBytes),
		Durability:       LoadDurability(r),
		MemoryLimit:      r.Bytes("MEMORY_LIMIT", 0),
	}
}

// LoadURLNorm reads the settings of a URL's normal form beyond urlnorm's fixed rules
// (TRAWL_STRIP_SESSION_IDS, TRAWL_SORT_QUERY): dedup gives every URL this form, and every
// process that makes a request of its own (the renderer's for the browser) puts its URL in
// the same form before judging it, so that one URL is one URL everywhere.
func LoadURLNorm(r *Reader) urlnorm.Options {
	return urlnorm.Options{
		StripSessionIDs: r.Bool("STRIP_SESSION_IDS", true),
		SortQuery:       r.Bool("SORT_QUERY", false),
	}
}

// LoadDurability reads TRAWL_FSYNC as written; durability.Parse checks it.
func LoadDurability(r *Reader) durability.Level {
	return durability.Level(r.String(strings.TrimPrefix(durability.Env, Prefix), string(durability.Default)))
}

// Validate reports every invalid setting.
func (c Common) Validate() error {
	errs := []error{c.Conn.Validate(nil)}
	if c.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("TRAWL_LEASE_TTL=%s: want at least 1s", c.LeaseTTL))
	}
	if c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("TRAWL_ACK_WAIT=%s: want at least 1s", c.AckWait))
	}
	// An outcome held by a scheduler that dies comes back after AckWait; it must come back
	// while its lease is still live, or the lease expires first and the URL is fetched again.
	if c.AckWait > c.LeaseTTL/2 {
		errs = append(errs, fmt.Errorf("TRAWL_ACK_WAIT=%s: want at most half of TRAWL_LEASE_TTL (%s), so a redelivered outcome arrives before its lease expires", c.AckWait, c.LeaseTTL))
	}
	if c.ErrorAfter < 2 {
		errs = append(errs, fmt.Errorf("TRAWL_LOG_ERROR_AFTER=%d: want at least 2", c.ErrorAfter))
	}
	if c.DeadAfter <= c.ErrorAfter {
		errs = append(errs, fmt.Errorf("TRAWL_DEAD_LETTER_AFTER=%d: want more than TRAWL_LOG_ERROR_AFTER (%d), so that a message is reported before it is parked", c.DeadAfter, c.ErrorAfter))
	}
	if c.TaskBatch < 1 || c.TaskBatch > MaxTaskBatch {
		errs = append(errs, fmt.Errorf("TRAWL_TASK_BATCH=%d: want 1..%d", c.TaskBatch, MaxTaskBatch))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("TRAWL_STREAM_REPLICAS=%d: want 1..5", c.Replicas))
	}
	if c.RedisWait < 0 || c.RedisWait > MaxRedisWait {
		errs = append(errs, fmt.Errorf("TRAWL_REDIS_WAIT=%s: want 0 (off) to %s", c.RedisWait, MaxRedisWait))
	}
	if c.PagesMaxBytes < MinStreamBytes {
		errs = append(errs, fmt.Errorf("TRAWL_PAGES_MAX_BYTES=%d: want at least %d (64MiB)", c.PagesMaxBytes, MinStreamBytes))
	}
	if c.MemoryLimit != 0 && c.MemoryLimit < MinMemoryLimit {
		errs = append(errs, fmt.Errorf("TRAWL_MEMORY_LIMIT=%d: want 0 (the cgroup's limit) or at least %d (64MiB)", c.MemoryLimit, MinMemoryLimit))
	}
	if c.DocsMaxBytes < MinStreamBytes {
		errs = append(errs, fmt.Errorf("TRAWL_DOCS_MAX_BYTES=%d: want at least %d (64MiB)", c.DocsMaxBytes, MinStreamBytes))
	}
	if c.SkippedMaxBytes < MinStreamBytes {
		errs = append(errs, fmt.Errorf("TRAWL_SKIPPED_MAX_BYTES=%d: want at least %d (64MiB)", c.SkippedMaxBytes, MinStreamBytes))
	}
	if c.DeadMaxBytes < MinStreamBytes {
		errs = append(errs, fmt.Errorf("TRAWL_DEAD_MAX_BYTES=%d: want at least %d (64MiB)", c.DeadMaxBytes, MinStreamBytes))
	}
	if _, err := durability.Parse(string(c.Durability)); err != nil {
		errs = append(errs, err)
	} else if w := c.Durability.Window(); w > 0 && c.AckWait < w+time.Second {
		// Each stage acknowledges its input a window after handling it; a redelivery in
		// between would only be work done twice.
		errs = append(errs, fmt.Errorf("TRAWL_ACK_WAIT=%s: want at least a second more than the window of TRAWL_FSYNC=%s (%s), after which a stage acknowledges what it handled", c.AckWait, c.Durability, w))
	}
	if c.Recrawl != RecrawlOff && c.Recrawl != RecrawlAdaptive {
		errs = append(errs, fmt.Errorf("TRAWL_RECRAWL=%q: want %s or %s", c.Recrawl, RecrawlOff, RecrawlAdaptive))
	}
	if c.RecrawlSplit < 1 || c.RecrawlSplit > max(c.Shards, 1) {
		errs = append(errs, fmt.Errorf("TRAWL_RECRAWL_STREAMS=%d: want 1..TRAWL_SHARDS (%d)", c.RecrawlSplit, c.Shards))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("TRAWL_LOG_FORMAT=%q: want text or json", c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("TRAWL_LOG_LEVEL=%q: want debug, info, warn or error", c.LogLevel))
	}
	return errors.Join(errs...)
}

// Topology returns the stream sizing implied by the settings.
func (c Common) Topology() topology.Options {
	o := topology.DefaultOptions(c.Shards)
	o.Replicas = c.Replicas
	o.Recrawl = c.Recrawl == RecrawlAdaptive
	o.RecrawlStreams = c.RecrawlSplit
	o.RecrawlPlacement = SplitList(c.RecrawlPlacement)
	o.PagesMaxBytes, o.DocsMaxBytes, o.SkippedMaxBytes, o.DeadMaxBytes = c.PagesMaxBytes, c.DocsMaxBytes, c.SkippedMaxBytes, c.DeadMaxBytes
	o.DuplicateWindow = topology.DuplicateWindowFor(c.Timings())
	if c.MemoryStore {
		o.Storage = 1 // jetstream.MemoryStorage
	}
	return o
}

// Timings returns the consumers' redelivery settings. A fetch task's AckWait exceeds the
// lease by a quarter (at least 5s, for clock skew between hosts) so that JetStream never
// redelivers a task whose lease may still be live. The consumers' MaxDeliver is unlimited:
// the server would drop a message silently after MaxDeliver, while the consume loop parks
// the messages it gives up on where an operator finds them (natsx.DeadLetter).
func (c Common) Timings() topology.StageTimings {
	return topology.StageTimings{
		AckWait:      c.AckWait,
		FetchAckWait: c.LeaseTTL + max(c.LeaseTTL/4, 5*time.Second),
		MaxDeliver:   -1,
		LeaseTTL:     c.LeaseTTL,
	}
}
