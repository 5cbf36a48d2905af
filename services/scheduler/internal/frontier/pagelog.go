package frontier

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Logged is a URL of the page log (frontierkeys.Shard.PageLog): it ended fetched and its
// page, at sequence Seq of CRAWL_PAGES, has not yet been acknowledged by the parser.
type Logged struct {
	Seq uint64
	// Token is the lease the page was fetched under (its id is topology.PageID(Token)).
	Token, Host, URL string
	// Member is the log's member, which Readmit takes.
	Member string
}

// PageLog returns up to count logged URLs whose pages' sequences are below before (0: no
// bound), highest sequence first.
func (f *Frontier) PageLog(ctx context.Context, before uint64, count int64) ([]Logged, error) {
	max := "+inf"
	if before > 0 {
		max = "(" + strconv.FormatUint(before, 10)
	}
	zs, err := f.rdb.ZRevRangeByScoreWithScores(ctx, f.k.PageLog(), &redis.ZRangeBy{Min: "-inf", Max: max, Count: count}).Result()
	if err != nil {
		return nil, fmt.Errorf("frontier: shard %d: page log: %w", f.o.Shard, err)
	}
	out := make([]Logged, 0, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		parts := strings.SplitN(m, "\n", 3)
		if len(parts) != 3 {
			continue
		}
		l := Logged{Seq: uint64(z.Score), Token: parts[0], Host: parts[1], Member: m}
		if fs := strings.SplitN(parts[2], " ", 4); len(fs) == 4 {
			l.URL, _, _ = strings.Cut(fs[3], " ")
		}
		out = append(out, l)
	}
	return out, nil
}

// Readmit puts the logged URLs whose pages NATS lost back at the head of the shard's first
// front queue, counting an attempt (readmit.lua), and returns how many went: a member
// already gone from the log (re-admitted by another scheduler of the shard) is skipped.
func (f *Frontier) Readmit(ctx context.Context, lost []Logged) (int, error) {
	if len(lost) == 0 {
		return 0, nil
	}
	args := f.args(1 + len(lost))
	args = append(args, strconv.Itoa(len(lost)))
	for _, l := range lost {
		args = append(args, l.Member)
	}
	v, err := f.run(ctx, scriptReadmit, args)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("frontier: shard %d: readmit: unexpected reply %v", f.o.Shard, v)
	}
	return int(n), nil
}

// TrimPageLog drops the logged URLs whose pages are at or below stream sequence floor and
// returns how many went. Pass the parser consumer's ack floor on CRAWL_PAGES: a page at
// or below it was parsed and its acknowledgement settled (natsx.ConsumeBatches), so its
// links are durably in NATS.
func (f *Frontier) TrimPageLog(ctx context.Context, floor uint64) (int64, error) {
	if floor == 0 {
		return 0, nil
	}
	n, err := f.rdb.ZRemRangeByScore(ctx, f.k.PageLog(), "-inf", strconv.FormatUint(floor, 10)).Result()
	if err != nil {
		return 0, fmt.Errorf("frontier: shard %d: trim page log: %w", f.o.Shard, err)
	}
	return n, nil
}
