// Package crawlid gives a crawl an identity stored once, when the crawl starts, in Redis
// (the hash `<prefix>:crawl`: id, created, shards) and in a JetStream key-value bucket
// (TRAWL_CRAWL, key `<prefix>`). Every service opens a Guard at start-up and gates its
// consumption on it, so that:
//
//   - a service whose TRAWL_SHARDS differs from the crawl's refuses to start, since hosts
//     would move between shards mid-crawl (a stranded queue, two leases for one host);
//   - a Redis that lost the crawl's state (a crash without persistence, FLUSHALL, a
//     different server) is noticed: at start-up because NATS still knows the crawl, and
//     while running because the key vanished. The service then says so in its log, in
//     `trawl_crawl_state_lost` and in /readyz, and stops consuming instead of carrying on
//     with an empty frontier.
package crawlid

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/redisx"
)

// Bucket is the JetStream key-value bucket holding one record per crawl (key: the Redis
// prefix). NATS keeps it in its own store, so it outlives a Redis that lost its data.
const Bucket = "TRAWL_CRAWL"

// Key is the Redis hash of the crawl identity under prefix (TRAWL_REDIS_PREFIX).
func Key(prefix string) string { return prefix + ":crawl" }

// Identity is what a crawl records about itself when it starts.
type Identity struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Shards  int       `json:"shards"`
}

var (
	// ErrLost reports a Redis without the state of the crawl NATS knows.
	ErrLost = errors.New("redis has lost the crawl's state")
	// ErrShards reports a TRAWL_SHARDS that differs from the crawl's.
	ErrShards = errors.New("TRAWL_SHARDS differs from the crawl's shard count")
)

//go:embed lua/claim.lua
var luaFS embed.FS

// claim creates the identity hash unless it exists and returns the stored one
// (lua/claim.lua).
var claim = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/claim.lua"})

// Guard holds the identity a service started with and checks that Redis still has it.
type Guard struct {
	rdb  redis.UniversalClient
	key  string
	id   Identity
	log  *slog.Logger
	mu   sync.Mutex
	lost bool
	// okAt is when Check last passed (unix ns); Ready trusts it for readyTrust.
	okAt atomic.Int64
	// okFrom is when the last check that passed began, failedAt when the last one that
	// failed ended (unix ns; 0: none): what Kept goes by.
	okFrom, failedAt atomic.Int64
	// kdone is closed when the check under way for Kept's callers ends (nil: none);
	// kLast is when the last one was set to begin.
	kmu   sync.Mutex
	kdone chan struct{}
	kLast time.Time
}

// readyTrust is how long a passed check lets Ready answer without Redis. A consume loop asks
// before every pull, and a write probe each time would cost a round trip (and, with the AOF
// fsynced on every write, an fsync) per batch; a real failure still surfaces at once as the
// handler's own Redis error, and Invalidate makes the next Ready check again.
const readyTrust = time.Second

// Open establishes the crawl's identity for a service configured by c: it creates it
// when neither Redis nor NATS has one, copies Redis's to NATS when only Redis has one (a
// crawl begun before identities were recorded), and fails with ErrLost when NATS knows a
// crawl Redis does not, or with ErrShards when c.Shards differs from the crawl's.
func Open(ctx context.Context, js jetstream.JetStream, rdb redis.UniversalClient, c envconfig.Common, log *slog.Logger) (*Guard, error) {
	topo := c.Topology()
	kv, err := natsx.KeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "identity of each crawl (key: TRAWL_REDIS_PREFIX)",
		Storage:     topo.Storage,
		Replicas:    topo.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("crawlid: bucket %s: %w", Bucket, err)
	}
	kvKey := c.RedisPrefix
	known, err := readKV(ctx, kv, kvKey)
	if err != nil {
		return nil, err
	}
	key := Key(c.RedisPrefix)
	if known != nil {
		n, err := rdb.Exists(ctx, key).Result()
		if err != nil {
			return nil, fmt.Errorf("crawlid: read %s: %w", key, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: NATS knows crawl %s (started %s, %d shards) but Redis has no %s. "+
				"Restore Redis from its AOF, or start a new crawl: delete the JetStream streams and the %s bucket (or use a new NATS store) with an empty Redis",
				ErrLost, known.ID, known.Created.Format(time.RFC3339), known.Shards, key, Bucket)
		}
	}
	fresh := Identity{ID: newID(), Created: time.Now().UTC().Truncate(time.Second), Shards: c.Shards}
	vals, err := claim.Run(ctx, rdb, []string{key}, fresh.ID, fresh.Created.Format(time.RFC3339), fresh.Shards).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("crawlid: claim %s: %w", key, err)
	}
	stored, err := parse(vals)
	if err != nil {
		return nil, fmt.Errorf("crawlid: %s: %w", key, err)
	}
	if known == nil {
		b, _ := json.Marshal(stored)
		if _, err := kv.Create(ctx, kvKey, b); err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return nil, fmt.Errorf("crawlid: record in %s: %w", Bucket, err)
			}
			if known, err = readKV(ctx, kv, kvKey); err != nil {
				return nil, err
			}
		} else {
			known = &stored
		}
	}
	if known != nil && known.ID != stored.ID {
		return nil, fmt.Errorf("%w: Redis holds crawl %s but NATS knows crawl %s: the two belong to different crawls", ErrLost, stored.ID, known.ID)
	}
	if stored.Shards != c.Shards {
		return nil, fmt.Errorf("%w: TRAWL_SHARDS=%d but crawl %s was started with %d; run every service with TRAWL_SHARDS=%d (the shard count cannot change mid-crawl)",
			ErrShards, c.Shards, stored.ID, stored.Shards, stored.Shards)
	}
	g := &Guard{
		rdb: rdb, key: key, id: stored, log: log,
	}
	watchDials(ctx, rdb, g)
	log.Info("crawl identity", "crawl", stored.ID, "created", stored.Created, "shards", stored.Shards, "key", key)
	return g, nil
}

// Identity is the crawl the service started with.
func (g *Guard) Identity() Identity { return g.id }

// Register declares trawl_crawl_state_lost, the series every service that uses Redis shares.
func (g *Guard) Register(m *obs.Metrics) {
	DeclareStateLost(m, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.lost
	})
}

// DeclareStateLost declares trawl_crawl_state_lost, read from lost at each scrape.
func DeclareStateLost(m *obs.Metrics, lost func() bool) {
	m.With("crawl").GaugeFunc("state_lost", "1 while Redis lacks the crawl identity this process started with (its state was lost); consumption is stopped.", func() float64 {
		if lost() {
			return 1
		}
		return 0
	})
}

// Check is the readiness check and the consume gate of a service: Redis answers and takes
// a write (redisx.Ping), and still holds this crawl's identity. Losing the identity is
// logged at error level once per episode; the check keeps failing, so consumption stays
// stopped, until the identity is back (Redis restored from its files).
func (g *Guard) Check(ctx context.Context) error {
	began := time.Now().UnixNano()
	err := g.check(ctx)
	if err == nil {
		g.okAt.Store(time.Now().UnixNano())
		storeMax(&g.okFrom, began)
	} else {
		g.okAt.Store(0)
		if ctx.Err() == nil { // a check given up by its caller says nothing of Redis
			g.failedAt.Store(time.Now().UnixNano())
		}
	}
	return err
}

// storeMax sets a to v unless it holds a later time: checks run concurrently.
func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if old >= v || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// Kept reports whether Redis kept what was written to it from since on, as far as an OS
// crash goes: a check begun at or after durableBy (the writes' last instant plus the
// durability window: by then Redis has them on disk) passed, and none failed from since
// on. When the last check began too early it waits for the next shared one (sharedCheck).
// false means Redis was out of reach in between: it may be back from an OS crash, rolled
// back to before those writes, which a machine's reboot, lasting longer than the checks'
// second apart (Watch), always shows as a failed check.
func (g *Guard) Kept(ctx context.Context, since, durableBy time.Time) bool {
	for {
		if g.failedAt.Load() >= since.UnixNano() {
			return false
		}
		if g.okFrom.Load() >= durableBy.UnixNano() {
			return g.failedAt.Load() < since.UnixNano()
		}
		if wait := time.Until(durableBy); wait > 0 && !ctxsleep.Sleep(ctx, wait) {
			return false
		}
		if !g.sharedCheck(ctx) {
			return false
		}
	}
}

// keptSpacing is the least time between two checks Kept asks for: every settling loop of
// a process asks about its acks each 100 ms, and one check serves all that wait for it.
const keptSpacing = 50 * time.Millisecond

// sharedCheck waits for the next check begun for Kept's callers, starting it if none is
// under way, no sooner than keptSpacing after the last; false when ctx ended first. The
// check runs on its own context: one caller giving up does not fail the others'.
func (g *Guard) sharedCheck(ctx context.Context) bool {
	g.kmu.Lock()
	if g.kdone == nil {
		done := make(chan struct{})
		g.kdone = done
		at := g.kLast.Add(keptSpacing)
		if now := time.Now(); now.After(at) {
			at = now
		}
		g.kLast = at
		go func() {
			time.Sleep(time.Until(at))
			_ = g.Check(context.Background())
			g.kmu.Lock()
			g.kdone = nil
			g.kmu.Unlock()
			close(done)
		}()
	}
	done := g.kdone
	g.kmu.Unlock()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// FailedAt is when a check last failed (zero: never): Redis was out of reach, and may have
// come back older.
func (g *Guard) FailedAt() time.Time {
	if f := g.failedAt.Load(); f != 0 {
		return time.Unix(0, f)
	}
	return time.Time{}
}

// Ready is Check for a consume loop (natsx.ConsumeOptions.Ready): a check that passed
// less than a second ago stands.
func (g *Guard) Ready(ctx context.Context) error {
	if ok := g.okAt.Load(); ok != 0 && time.Since(time.Unix(0, ok)) < readyTrust {
		return nil
	}
	return g.Check(ctx)
}

// Watch checks every second until ctx ends, so a service notices a Redis that lost the
// crawl's state — log, metric and readiness — even while no message arrives and its consume
// loops sit waiting; it also keeps Ready's answer fresh.
func (g *Guard) Watch(ctx context.Context) {
	t := time.NewTicker(readyTrust)
	defer t.Stop()
	for {
		_ = g.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Invalidate makes the next Ready check Redis again; a handler calls it when a Redis call
// failed, so that an outage stops consumption at the next pull.
func (g *Guard) Invalidate() { g.okAt.Store(0) }

func (g *Guard) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pipe := g.rdb.Pipeline()
	probe := redisx.ProbeWrite(ctx, pipe)
	get := pipe.HGet(ctx, g.key, "id")
	_, _ = pipe.Exec(ctx)
	if err := probe.Err(); err != nil {
		return fmt.Errorf("redisx: write probe: %w", err)
	}
	id, err := get.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("crawlid: read %s: %w", g.key, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if id == g.id.ID {
		if g.lost {
			g.log.Warn("crawl state is back in redis; consuming again", "crawl", g.id.ID, "key", g.key)
			g.lost = false
		}
		return nil
	}
	lost := fmt.Errorf("%w: crawl %s (started %s) is not in Redis (%s id=%q); consumption stopped. Restore Redis from its AOF or start a new crawl",
		ErrLost, g.id.ID, g.id.Created.Format(time.RFC3339), g.key, id)
	if !g.lost {
		g.log.Error("REDIS LOST THE CRAWL STATE", "err", lost)
		g.lost = true
	}
	return lost
}

// Read returns the identity stored in Redis under prefix, or nil when there is none.
func Read(ctx context.Context, rdb redis.UniversalClient, prefix string) (*Identity, error) {
	vals, err := rdb.HMGet(ctx, Key(prefix), "id", "created", "shards").Result()
	if err != nil {
		return nil, fmt.Errorf("crawlid: read %s: %w", Key(prefix), err)
	}
	if vals[0] == nil {
		return nil, nil
	}
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i], _ = v.(string)
	}
	id, err := parse(s)
	if err != nil {
		return nil, fmt.Errorf("crawlid: %s: %w", Key(prefix), err)
	}
	return &id, nil
}

// Known returns the identity NATS records for prefix, or nil when there is none.
func Known(ctx context.Context, js jetstream.JetStream, prefix string) (*Identity, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("crawlid: bucket %s: %w", Bucket, err)
	}
	return readKV(ctx, kv, prefix)
}

func readKV(ctx context.Context, kv jetstream.KeyValue, key string) (*Identity, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("crawlid: read %s/%s: %w", Bucket, key, err)
	}
	var id Identity
	if err := json.Unmarshal(e.Value(), &id); err != nil || id.ID == "" {
		return nil, fmt.Errorf("crawlid: %s/%s holds no identity (%q)", Bucket, key, e.Value())
	}
	return &id, nil
}

func parse(vals []string) (Identity, error) {
	if len(vals) != 3 || vals[0] == "" {
		return Identity{}, fmt.Errorf("incomplete identity %q", vals)
	}
	created, err := time.Parse(time.RFC3339, vals[1])
	if err != nil {
		return Identity{}, fmt.Errorf("created %q: %w", vals[1], err)
	}
	shards, err := strconv.Atoi(vals[2])
	if err != nil {
		return Identity{}, fmt.Errorf("shards %q: %w", vals[2], err)
	}
	return Identity{ID: vals[0], Created: created, Shards: shards}, nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}
