// Package durability is the crawl's one durability setting, TRAWL_FSYNC: how often the
// crawl's two stores, Redis and NATS JetStream, fsync what they have acknowledged, and so
// what an acknowledged write survives. The two stores hold one crawl between them (a URL
// marked seen in Redis is queued in NATS), so they must be as durable as each other: a URL
// whose Bloom bits survive an OS crash while its queued message does not is never crawled.
//
// The setting's two values are spelled so that nats-server takes them as they are for its
// sync_interval (compose's nats.conf reads the variable directly); Redis's appendfsync is
// derived here, and compose.yaml's Redis commands say the same (devstack/composecheck
// holds them to it). The services read it too (envconfig.Common.Durability): at
// EverySecond each stage acknowledges its input only once what it wrote for it is past
// the level's Window, so that an OS crash, which rolls each store back by its own last
// second or so, cannot keep a message's acknowledgement and lose its effects.
package durability

import (
	"fmt"
	"time"
)

// Env is the variable that sets the level.
const Env = "TRAWL_FSYNC"

// Level is how often both stores fsync, and so what an acknowledged write survives.
type Level string

const (
	// Always: both stores fsync a write before acknowledging it (Redis appendfsync
	// always, JetStream sync_interval always). An OS crash or a power loss loses nothing
	// acknowledged; each write waits for the disk.
	Always Level = "always"
	// EverySecond: both stores hand a write to the OS before acknowledging it and fsync
	// once a second (Redis appendfsync everysec, JetStream sync_interval 1s). A crash of
	// any process loses nothing; an OS crash or a power loss loses about the last second
	// or two of each store's writes.
	EverySecond Level = "1s"
)

// Default is the level when Env is unset: measured by make bench (docs/cost-per-page.md),
// Always crawls at less than half of EverySecond's rate on one node, for the last second
// of an OS crash; the uncertain second that EverySecond leaves is re-admitted after an
// unclean restart (shared/durability/README.md "Durability").
const Default = EverySecond

// Levels lists every level, strongest first.
var Levels = []Level{Always, EverySecond}

// Parse reads a level; "" is Default.
func Parse(s string) (Level, error) {
	if s == "" {
		return Default, nil
	}
	for _, l := range Levels {
		if Level(s) == l {
			return l, nil
		}
	}
	return "", fmt.Errorf("%s=%q: want %q (fsync every write) or %q (fsync once a second)", Env, s, Always, EverySecond)
}

// RedisAppendFsync is Redis's appendfsync for the level (the AOF is always on).
func (l Level) RedisAppendFsync() string {
	if l == EverySecond {
		return "everysec"
	}
	return "always"
}

// Window is how long an acknowledged write may stay out of reach of an OS crash: at
// EverySecond, JetStream's sync interval (1 s) and Redis's everysec, which fsyncs once a
// second and, behind a slow fsync, holds writes back for up to 2 s more before it blocks.
// A stage that acknowledges its input Window after storing the input's effects in both
// stores (natsx.ConsumeOptions.SettleAfter) never has its acknowledgement outlive them. 0
// at Always: every write is on disk when it is acknowledged.
func (l Level) Window() time.Duration {
	if l == EverySecond {
		return 3 * time.Second
	}
	return 0
}

// AtomicBatches says whether the services publish the messages each call stores in one
// stream as an atomic batch (natsx.AtomicBatches): at Always the server syncs a batch once
// instead of each message, less than half the fsyncs a page; at EverySecond, where no
// write is synced, the server's staging of each batch only costs CPU, halving the crawl's
// rate (docs/cost-per-page.md, "Durability").
func (l Level) AtomicBatches() bool { return l == Always }

// NATSSync is JetStream's sync_interval for the level: always, or an interval.
func (l Level) NATSSync() (always bool, interval time.Duration) {
	if l == EverySecond {
		return false, time.Second
	}
	return true, 0
}
