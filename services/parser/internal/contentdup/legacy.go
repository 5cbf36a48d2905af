package contentdup

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Before the exact entries were bounded, each original's digest was a string key of its
// own, "<partition>exact:<64 hex>", kept for ever. Nothing reads them now; DropLegacy
// deletes them so that an index made by an earlier release stops paying for them.

// legacyExactLen is the length of such a key's name after "exact:".
const legacyExactLen = 64

// legacyScan is the SCAN COUNT and the deletes per pipeline: Redis serves other clients
// between two calls of a sweep.
const legacyScan = 1000

// DropLegacy deletes the exact keys of the earlier layout from every partition, one SCAN
// pass over each master (a partition's keys share its hash tag, so one master holds them),
// and returns how many it deleted. It ends with the pass: the keys come only from a
// parser of an earlier release, so one pass after the upgrade leaves none. ctx bounds it.
func (ix *Index) DropLegacy(ctx context.Context) (int64, error) {
	var total atomic.Int64
	sweep := func(ctx context.Context, c redis.Cmdable) error {
		for _, part := range ix.parts {
			n, err := dropLegacyPart(ctx, c, part)
			total.Add(n)
			if err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if cc, ok := ix.rdb.(*redis.ClusterClient); ok {
		// SCAN reads one server: each master's share of the partitions is swept there.
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return sweep(ctx, c) })
	} else {
		err = sweep(ctx, ix.rdb)
	}
	if err != nil {
		return total.Load(), fmt.Errorf("contentdup: drop the earlier layout's exact keys: %w", err)
	}
	return total.Load(), nil
}

func dropLegacyPart(ctx context.Context, c redis.Cmdable, part string) (int64, error) {
	var deleted int64
	var cursor uint64
	prefix := part + "exact:"
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", legacyScan).Result()
		if err != nil {
			return deleted, err
		}
		var old []string
		for _, k := range keys {
			if name := strings.TrimPrefix(k, prefix); len(name) == legacyExactLen && !strings.Contains(name, ":") {
				old = append(old, k)
			}
		}
		if len(old) > 0 {
			// One partition's keys share a slot, so one UNLINK takes them on a cluster too.
			n, err := c.Unlink(ctx, old...).Result()
			deleted += n
			if err != nil {
				return deleted, err
			}
		}
		if cursor = next; cursor == 0 {
			return deleted, nil
		}
	}
}
