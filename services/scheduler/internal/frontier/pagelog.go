package frontier

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
)

// Logged is a URL of the page log (frontierkeys.Shard.PageLog): it ended fetched and its
// page, at sequence Seq of CRAWL_PAGES, has not yet been acknowledged by the parser.
type Logged struct {
	Seq uint64
	// Shard is the shard whose log holds it.
	Shard int
	// Token is the lease the page was fetched under (its id is topology.PageID(Token)).
	Token, Host, URL string
	// Parts is how many pages the page's message carried: 1 alone, more in a bundle.
	Parts int
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
		if l, ok := parseLogged(z, f.o.Shard); ok {
			out = append(out, l)
		}
	}
	return out, nil
}

func parseLogged(z redis.Z, shard int) (Logged, bool) {
	m, _ := z.Member.(string)
	parts := strings.SplitN(m, "\n", 3)
	if len(parts) != 3 {
		return Logged{}, false
	}
	l := Logged{Seq: uint64(z.Score), Shard: shard, Token: parts[0], Host: parts[1], Member: m, Parts: 1}
	if tok, n, ok := strings.Cut(parts[0], " "); ok {
		l.Token, l.Parts = tok, max(1, atoiOr0(n))
	}
	if fs := strings.SplitN(parts[2], " ", 4); len(fs) == 4 {
		l.URL, _, _ = strings.Cut(fs[3], " ")
	}
	return l, true
}

// OtherLogged returns, by sequence, the URLs the other shards' page logs hold under the
// sequences from lo to hi. A sequence a rolled-back NATS gave twice may have gone to pages
// of two shards: each shard's walk judges its own pages there with the others'
// (natsx.Verdict).
func (f *Frontier) OtherLogged(ctx context.Context, lo, hi uint64) (map[uint64][]Logged, error) {
	if f.o.Shards <= 1 {
		return nil, nil
	}
	rng := &redis.ZRangeBy{Min: strconv.FormatUint(lo, 10), Max: strconv.FormatUint(hi, 10)}
	pipe := f.rdb.Pipeline()
	cmds := map[int]*redis.ZSliceCmd{}
	for shard := range f.o.Shards {
		if shard != f.o.Shard {
			cmds[shard] = pipe.ZRangeByScoreWithScores(ctx, frontierkeys.ForShard(f.o.KeyPrefix, shard, f.o.Shards).PageLog(), rng)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("frontier: shard %d: other shards' page logs: %w", f.o.Shard, err)
	}
	out := map[uint64][]Logged{}
	for shard, c := range cmds {
		for _, z := range c.Val() {
			if l, ok := parseLogged(z, shard); ok {
				out[l.Seq] = append(out[l.Seq], l)
			}
		}
	}
	return out, nil
}

// Readmit puts the logged URLs whose pages NATS lost back at the head of their shard's
// first front queue, counting an attempt (readmit.lua), and returns how many went: a member
// already gone from its log (re-admitted by another scheduler of the shard, or by the walk
// of another shard that found it lost) is skipped. The URLs of another shard's log are
// those whose pages' sequence NATS gave to pages of two shards (OtherLogged): the shard
// that finds both lost re-admits both, since re-admitting its own takes away what the
// other shard's walk would have judged by.
func (f *Frontier) Readmit(ctx context.Context, lost []Logged) (int, error) {
	n := 0
	for shard, ls := range byShard(lost) {
		g := f
		if shard != f.o.Shard {
			o := f.o
			o.Shard = shard
			g = New(f.rdb, o, f.p)
		}
		m, err := g.readmit(ctx, ls)
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// byShard groups logged URLs by their shard.
func byShard(ls []Logged) map[int][]Logged {
	out := map[int][]Logged{}
	for _, l := range ls {
		out[l.Shard] = append(out[l.Shard], l)
	}
	return out
}

func (f *Frontier) readmit(ctx context.Context, lost []Logged) (int, error) {
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

func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
