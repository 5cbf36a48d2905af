// Package redisx is Trawl's Redis plumbing: connecting, waiting for readiness, and naming
// keys so that every key of one shard shares a Redis Cluster hash slot.
package redisx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/tlsx"
)

// Connect opens TRAWL_REDIS_URL (see Open) and waits until the server answers PING or ctx
// ends. A Redis restart later is survived by go-redis's own reconnects, and a Redis
// Cluster failover by the cluster client's reloading of the slot map on MOVED and
// connection errors; callers gate their consumption on Ping so they do not spend message
// deliveries while Redis is away.
func Connect(ctx context.Context, url string, log *slog.Logger, opts ...Option) (redis.UniversalClient, error) {
	c, err := Open(url, Timeouts{Dial: 2 * time.Second, Read: 10 * time.Second, Write: 10 * time.Second, Retries: 3}, opts...)
	if err != nil {
		return nil, err
	}
	addr := Addrs(url)
	for i := 0; ; i++ {
		err := c.Ping(ctx).Err()
		if err == nil {
			return c, nil
		}
		if IsRefused(err) {
			// Credentials do not get better by retrying: say so and stop.
			c.Close()
			return nil, fmt.Errorf("redisx: connect %s: %w: %w", addr, ErrRefused, err)
		}
		if i%20 == 0 {
			log.Warn("waiting for redis", "addr", addr, "err", err)
		}
		if !ctxsleep.Sleep(ctx, 250*time.Millisecond) {
			c.Close()
			return nil, fmt.Errorf("redisx: connect %s: %w (last error: %v)", addr, ctx.Err(), err)
		}
	}
}

// ErrRefused: Redis refused the connection's credentials (or their absence), or the TLS
// handshake failed on a certificate, on either side.
var ErrRefused = errors.New("Redis refused the credentials (TRAWL_REDIS_URL's user and password, TRAWL_REDIS_TLS_*)")

// IsRefused reports an authentication refusal: a wrong user or password (WRONGPASS), none
// given to a server that wants one (NOAUTH), or a user without the rights (NOPERM).
func IsRefused(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "NOPERM") ||
		tlsx.Refused(err)
}

// ProbeKey is the key readiness checks write (with a 10 s TTL). A Redis at maxmemory
// under noeviction, LOADING or READONLY still answers PING but refuses every write, and
// every stage needs writes, so readiness is a write.
const ProbeKey = "trawl:{probe}:write"

// ProbeWrite queues the readiness write on p, so that a caller can check more in the same
// round trip.
func ProbeWrite(ctx context.Context, p redis.Pipeliner) *redis.StatusCmd {
	return p.Set(ctx, ProbeKey, "1", 10*time.Second)
}

// Ping is the readiness check and consume gate: Redis answers and accepts a write, within a
// short timeout.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pipe := c.Pipeline()
	set := ProbeWrite(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	if err := set.Err(); err != nil {
		return fmt.Errorf("redisx: write probe: %w", err)
	}
	return nil
}

// Keyspace builds key names under one hash tag: "trawl:{tag}:name". All keys a Lua script
// touches must come from one Keyspace so that they live in one cluster slot.
type Keyspace struct {
	prefix string
}

// NewKeyspace returns the keyspace for tag (e.g. "s0" for scheduler shard 0). base is the
// DefaultPrefix is TRAWL_REDIS_PREFIX's default, the first part of every key Trawl writes.
const DefaultPrefix = "trawl"

// deployment prefix (default "trawl"), which lets two crawls share one Redis.
func NewKeyspace(base, tag string) Keyspace {
	if base == "" {
		base = DefaultPrefix
	}
	return Keyspace{prefix: base + ":{" + tag + "}:"}
}

// Key returns the full name of a key.
func (k Keyspace) Key(parts ...string) string {
	return k.prefix + strings.Join(parts, ":")
}

// Prefix is the common prefix of every key in the keyspace.
func (k Keyspace) Prefix() string { return k.prefix }

// IsNoScript reports a NOSCRIPT reply (script cache flushed, e.g. after a restart).
func IsNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Int64s converts a Lua reply array of integers.
func Int64s(v any) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redisx: reply %T is not an array", v)
	}
	out := make([]int64, len(arr))
	for i, e := range arr {
		switch x := e.(type) {
		case int64:
			out[i] = x
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("redisx: reply[%d]: %w", i, err)
			}
			out[i] = n
		default:
			return nil, fmt.Errorf("redisx: reply[%d] is %T", i, e)
		}
	}
	return out, nil
}

// ErrUnavailable marks a Redis error worth retrying (connection, timeout, loading).
var ErrUnavailable = errors.New("redis unavailable")
