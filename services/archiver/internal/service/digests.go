package service

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/redisx"
)

// digestBuckets spreads the per-URL digests over this many hashes, each small enough for
// Redis's compact listpack encoding (128 entries by default) up to ~8 million URLs.
const digestBuckets = 1 << 16

// A bucket's key is "<prefix>:archive:digests:{<b>}", b the 4 hex digits of the first 2
// octets of the URL's SHA-1: each bucket is its own hash tag, so on Redis Cluster the
// buckets spread over every slot (the lookups and stores are plain pipelined HGET and
// HSET, no script that would need them together). Releases before this layout kept every
// bucket under one tag, "<prefix>:{archive}:digests:<b>"; migrate moves those.

// digests keeps, per URL, the payload digest and date of the last capture archived in
// full, so that an identical payload becomes a revisit record. One entry is a field of 10
// octets (a hash of the URL) and a value of ~46 (digest and unix ms): about 60 octets of
// Redis memory per URL while the buckets stay listpacks.
type digests struct {
	rdb    redis.UniversalClient
	prefix string // "<prefix>:archive:digests:"
	old    string // the bucket prefix of the single-tag layout, "<prefix>:{archive}:digests:"
}

// last is the capture an identical payload refers to.
type last struct {
	Digest string // "sha1:…"
	Date   time.Time
}

func newDigests(rdb redis.UniversalClient, prefix string) *digests {
	if prefix == "" {
		prefix = redisx.DefaultPrefix
	}
	return &digests{rdb: rdb, prefix: prefix + ":archive:digests:", old: redisx.NewKeyspace(prefix, "archive").Key("digests", "")}
}

// bucketKey is the key of bucket b, 4 hex digits.
func (d *digests) bucketKey(b string) string { return d.prefix + "{" + b + "}" }

func (d *digests) slot(url string) (key, field string) {
	h := sha1.Sum([]byte(url))
	return d.bucketKey(hex.EncodeToString(h[:2])), string(h[2:12])
}

// migrateSlice is the buckets one migration step tests or moves in one command or
// pipeline.
const migrateSlice = 1024

// migrate moves the buckets of the single-tag layout to their own keys, once, at start-up
// before any lookup: each bucket is copied field by field without overwriting (HSETNX, so
// a digest stored under the new layout wins) and then deleted. Interrupted, it is resumed
// by the next start: a copied bucket is copied again to no effect. The old buckets have
// known names in one slot, so they are found without a SCAN of the whole keyspace: one
// pipeline of EXISTS over every name, then only the slices holding some are read. It
// returns how many buckets it moved.
func (d *digests) migrate(ctx context.Context, log *slog.Logger) (int, error) {
	names := make([]string, digestBuckets)
	for b := range names {
		names[b] = fmt.Sprintf("%04x", b)
	}
	wrap := func(err error) error {
		return fmt.Errorf("archiver: move revisit digests from %s<b> to %s{<b>}: %w", d.old, d.prefix, err)
	}
	pipe := d.rdb.Pipeline()
	var found []*redis.IntCmd
	for i := 0; i < len(names); i += migrateSlice {
		keys := make([]string, 0, migrateSlice)
		for _, b := range names[i : i+migrateSlice] {
			keys = append(keys, d.old+b)
		}
		found = append(found, pipe.Exists(ctx, keys...))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, wrap(err)
	}
	moved := 0
	for j, c := range found {
		if c.Val() == 0 {
			continue
		}
		n, err := d.move(ctx, names[j*migrateSlice:(j+1)*migrateSlice])
		if err != nil {
			return moved, wrap(err)
		}
		moved += n
	}
	if moved > 0 {
		log.Info("moved revisit digests to one hash tag per bucket", "buckets", moved, "from", d.old+"<b>", "to", d.prefix+"{<b>}")
	}
	return moved, nil
}

// move copies the old-layout buckets named (4 hex digits each) to their new keys and
// deletes them, returning how many held entries.
func (d *digests) move(ctx context.Context, buckets []string) (int, error) {
	pipe := d.rdb.Pipeline()
	gets := make([]*redis.MapStringStringCmd, len(buckets))
	for i, b := range buckets {
		gets[i] = pipe.HGetAll(ctx, d.old+b)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	var olds []string
	for i, b := range buckets {
		if len(gets[i].Val()) == 0 {
			continue
		}
		olds = append(olds, d.old+b)
		for f, v := range gets[i].Val() {
			pipe.HSetNX(ctx, d.bucketKey(b), f, v)
		}
	}
	if len(olds) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	// One slot holds every old bucket, so one DEL takes them all.
	if err := d.rdb.Del(ctx, olds...).Err(); err != nil {
		return 0, err
	}
	return len(olds), nil
}

// lookup returns the last capture of each URL (nil where none), in one round trip.
func (d *digests) lookup(ctx context.Context, urls []string) ([]*last, error) {
	out := make([]*last, len(urls))
	if len(urls) == 0 {
		return out, nil
	}
	pipe := d.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(urls))
	for i, u := range urls {
		k, f := d.slot(u)
		cmds[i] = pipe.HGet(ctx, k, f)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("archiver: digest lookup: %w", err)
	}
	for i, c := range cmds {
		v, err := c.Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("archiver: digest lookup: %w", err)
		}
		dg, ms, ok := strings.Cut(v, " ")
		n, perr := strconv.ParseInt(ms, 10, 64)
		if !ok || perr != nil {
			continue // unreadable: as if never archived
		}
		out[i] = &last{Digest: "sha1:" + dg, Date: time.UnixMilli(n).UTC()}
	}
	return out, nil
}

// store records captures archived in full, in one round trip.
func (d *digests) store(ctx context.Context, urls []string, caps []last) error {
	if len(urls) == 0 {
		return nil
	}
	pipe := d.rdb.Pipeline()
	for i, u := range urls {
		k, f := d.slot(u)
		pipe.HSet(ctx, k, f, strings.TrimPrefix(caps[i].Digest, "sha1:")+" "+strconv.FormatInt(caps[i].Date.UnixMilli(), 10))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("archiver: store digests: %w", err)
	}
	return nil
}
