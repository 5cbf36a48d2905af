package renderconf

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The last render decision of a URL is kept in a table of fixed size, so that it stays
// bounded whatever the crawl's length: WhyHashes hashes of WhyFields fields each, a URL's
// slot chosen by its SHA-1. A URL whose slot another URL took since is simply not found
// (the entry carries its URL). Each hash is its own hash tag, so on Redis Cluster they
// spread over every slot. The parser writes only the decisions that are not the
// settings' plain consequence (see Why), so a crawl of ordinary pages writes nothing.
const (
	WhyHashes = 1 << 16
	WhyFields = 16
)

// Why is one URL's last decision as kept for trawlctl explain.
type Why struct {
	URL    string `json:"url"`
	Render bool   `json:"render"`
	Reason Reason `json:"reason"`
	// Detail says more: the rule's scope, the detector's figures.
	Detail string `json:"detail,omitempty"`
	At     int64  `json:"at"` // unix ms the parser decided
}

// WhySlot is the hash key and field of a URL's slot under a deployment's key prefix.
func WhySlot(prefix, url string) (key, field string) {
	sum := sha1.Sum([]byte(url))
	key = prefix + ":render:why:{" + hex.EncodeToString(sum[:2]) + "}"
	field = fmt.Sprint(int(sum[2]) % WhyFields)
	return key, field
}

// Record writes decisions in one pipelined round trip.
func Record(ctx context.Context, rdb redis.UniversalClient, prefix string, whys []Why) error {
	if len(whys) == 0 {
		return nil
	}
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, w := range whys {
			b, err := json.Marshal(w)
			if err != nil {
				return err
			}
			k, f := WhySlot(prefix, w.URL)
			p.HSet(ctx, k, f, b)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("renderconf: record decisions: %w", err)
	}
	return nil
}

// Lookup is the URL's last recorded decision; ok is false when none is kept (never
// recorded, or its slot since taken by another URL).
func Lookup(ctx context.Context, rdb redis.UniversalClient, prefix, url string) (w Why, ok bool, err error) {
	k, f := WhySlot(prefix, url)
	b, err := rdb.HGet(ctx, k, f).Bytes()
	if errors.Is(err, redis.Nil) {
		return Why{}, false, nil
	}
	if err != nil {
		return Why{}, false, fmt.Errorf("renderconf: read decision of %s: %w", url, err)
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return Why{}, false, fmt.Errorf("renderconf: decision of %s: %w", url, err)
	}
	return w, w.URL == url, nil
}
