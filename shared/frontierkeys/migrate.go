package frontierkeys

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/redisx"
)

// MoveUnspreadShard moves shard's keys from the tag every release before spread shard tags
// gave it, "s<shard>", to ShardTag(shard, shards), and reports how many it moved: a
// deployment of several shards upgraded mid-crawl finds its frontier where it left it. The
// scheduler calls it for each of its shards before using it (one process per shard). It
// does nothing when shards is 1 (the tag did not change) or when the old layout holds
// neither the shard's `stats` nor its `paused` key. The `stats` key moves last, so a
// move cut short is taken up again at the next start. On one server each key is
// RENAMEd; on a cluster, where the new tag is another slot, each is copied with DUMP and
// RESTORE (its TTL kept) and then deleted.
func MoveUnspreadShard(ctx context.Context, rdb redis.UniversalClient, prefix string, shard, shards int) (int, error) {
	if shards <= 1 {
		return 0, nil
	}
	old := Shard{ks: redisx.NewKeyspace(prefix, "s"+strconv.Itoa(shard))}
	to := ForShard(prefix, shard, shards)
	n, err := rdb.Exists(ctx, old.Stats(), old.Paused()).Result()
	if err != nil || n == 0 {
		if err != nil {
			err = fmt.Errorf("shard %d: look for keys under %s: %w", shard, old.Prefix(), err)
		}
		return 0, err
	}
	var keys []string
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, globEscape(old.Prefix())+"*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	cc, cluster := rdb.(*redis.ClusterClient)
	switch {
	case cluster:
		err = cc.ForEachMaster(ctx, scan)
	default:
		c, ok := rdb.(*redis.Client)
		if !ok {
			return 0, fmt.Errorf("shard %d: move keys: a %T is neither one server nor a cluster", shard, rdb)
		}
		err = scan(ctx, c)
	}
	if err != nil {
		return 0, fmt.Errorf("shard %d: list keys under %s: %w", shard, old.Prefix(), err)
	}
	// stats last: while it is under the old tag, the move is not done.
	if i := slices.Index(keys, old.Stats()); i >= 0 {
		keys = append(append(keys[:i:i], keys[i+1:]...), old.Stats())
	}
	for _, k := range keys {
		dst := to.Prefix() + strings.TrimPrefix(k, old.Prefix())
		if err := moveKey(ctx, rdb, cluster, k, dst); err != nil {
			return 0, fmt.Errorf("shard %d: move %s to %s: %w", shard, k, dst, err)
		}
	}
	return len(keys), nil
}

// moveKey moves one key to dst, overwriting it; a key gone meanwhile (a lease expired) is
// no error.
func moveKey(ctx context.Context, rdb redis.UniversalClient, cluster bool, src, dst string) error {
	if !cluster {
		err := rdb.Rename(ctx, src, dst).Err()
		if err != nil && strings.Contains(err.Error(), "no such key") {
			return nil
		}
		return err
	}
	v, err := rdb.Dump(ctx, src).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return err
	}
	ttl, err := rdb.PTTL(ctx, src).Result()
	if err != nil {
		return err
	}
	if ttl < 0 {
		ttl = 0 // persistent (RESTORE's 0)
	}
	if err := rdb.RestoreReplace(ctx, dst, ttl, v).Err(); err != nil {
		return err
	}
	return rdb.Del(ctx, src).Err()
}

// globEscape escapes the characters SCAN's MATCH reads as a pattern.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
