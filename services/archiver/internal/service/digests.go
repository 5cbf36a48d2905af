package service

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/redisx"
)

// digestBuckets spreads the per-URL digests over this many hashes, each small enough for
// Redis's compact listpack encoding (128 entries by default) up to ~8 million URLs.
const digestBuckets = 1 << 16

// digests keeps, per URL, the payload digest and date of the last capture archived in
// full, so that an identical payload becomes a revisit record. One entry is a field of 10
// octets (a hash of the URL) and a value of ~46 (digest and unix ms): about 60 octets of
// Redis memory per URL while the buckets stay listpacks.
type digests struct {
	rdb redis.UniversalClient
	ks  redisx.Keyspace
}

// last is the capture an identical payload refers to.
type last struct {
	Digest string // "sha1:…"
	Date   time.Time
}

func newDigests(rdb redis.UniversalClient, prefix string) *digests {
	return &digests{rdb: rdb, ks: redisx.NewKeyspace(prefix, "archive")}
}

func (d *digests) slot(url string) (key, field string) {
	h := sha1.Sum([]byte(url))
	return d.ks.Key("digests", hex.EncodeToString(h[:2])), string(h[2:12])
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
