package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/redisx"
)

// Earlier releases kept, per URL, the digest of the last capture archived in full, in
// 65,536 hashes: first all under one tag, "<prefix>:{archive}:digests:<b>", then each
// under its own, "<prefix>:archive:digests:{<b>}". The payload digest index
// (shared/digestindex) serves what they did and more, so they are no longer read:
// dropLegacyDigests deletes them at start-up, before the archiver consumes. Their names
// are known, so no SCAN of the keyspace is needed: pipelined DELs of every name (single
// key each, so they work on Redis Cluster), a no-op once they are gone. The URL is not
// recoverable from them (the field is a hash of it), so they cannot be moved into the
// index: the first capture of each payload after the upgrade is archived in full.
const legacyBuckets = 1 << 16

// legacySlice is how many names one pipeline deletes.
const legacySlice = 4096

func dropLegacyDigests(ctx context.Context, rdb redis.UniversalClient, prefix string, log *slog.Logger) (int64, error) {
	if prefix == "" {
		prefix = redisx.DefaultPrefix
	}
	single := redisx.NewKeyspace(prefix, "archive").Key("digests", "")
	own := prefix + ":archive:digests:"
	var dropped int64
	for i := 0; i < legacyBuckets; i += legacySlice {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.IntCmd, 0, 2*legacySlice)
		for b := i; b < i+legacySlice; b++ {
			name := fmt.Sprintf("%04x", b)
			cmds = append(cmds, pipe.Del(ctx, single+name), pipe.Del(ctx, own+"{"+name+"}"))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return dropped, fmt.Errorf("archiver: delete the per-URL revisit digests of an earlier release (%s<b>, %s{<b>}): %w", single, own, err)
		}
		for _, c := range cmds {
			dropped += c.Val()
		}
	}
	if dropped > 0 {
		log.Info("deleted the per-URL revisit digests of an earlier release; the payload digest index replaces them", "hashes", dropped)
	}
	return dropped, nil
}
