package service

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

// recoverLost publishes again the outputs of the input messages NATS lost after their
// seen test, and returns their ids. When an OS crash at TRAWL_FSYNC=1s brings NATS back
// older than Redis, a crawl.discovered message handled in NATS's lost seconds is gone,
// with the frontier messages it produced, while Redis kept the bits that make its URLs
// seen: the page it came from, parsed or fetched again, finds them seen, and they would
// never be crawled. Its memo, which Redis keeps exactly when it keeps those bits, holds
// what it found new (seen.Message.Keep), and that is published again under the frontier
// ids of the first time, so a copy NATS still holds is dropped by the duplicate window.
//
// Which messages NATS lost is natsx.Rollback's to tell, as for the scheduler's page log,
// the messages memoised under one sequence judged together (natsx.Verdict). The walk goes
// down from the highest sequence, and a crash takes a stream's tail, so it stops at the
// first message the stream still holds: at start (lostAt zero), any, since it
// runs before the consumer starts, so no memo lies above the lost ones and no
// acknowledgement of this run can have removed one. At a reconnect, lostAt is when the
// connection was lost and the consumer runs on: a new message may take a lost one's
// sequence and be memoised by this process above it, so only a message the stream stored
// before lostAt ends the walk.
func recoverLost(ctx context.Context, js jetstream.JetStream, store *seen.Store, publish publishFunc, shards int, lostAt time.Time) (ids []string, urls int, err error) {
	rb := natsx.NewRollback(js, topology.StreamDiscovered)
	lost := map[string]bool{}
	var werr error
	err = store.WalkDown(ctx, rb.Refresh, func(seq uint64, memoised []string) bool {
		var v natsx.Verdict
		v, werr = rb.Judge(ctx, seq, len(memoised), false, func(raw *jetstream.RawStreamMsg, i int) bool {
			return memoised[i] == natsx.StoredID(topology.StreamDiscovered, raw.Sequence, raw.Time)
		})
		if werr != nil {
			return false
		}
		for i, id := range memoised {
			if v.Lost(i) {
				lost[id] = true
			}
		}
		return v.Standing != natsx.Held || !(lostAt.IsZero() || v.Msg.Time.Before(lostAt))
	})
	if err == nil {
		err = werr
	}
	if err != nil || len(lost) == 0 {
		return nil, 0, err
	}
	for id := range lost {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	kept, err := store.Kept(ctx, ids)
	if err != nil {
		return nil, 0, err
	}
	var out []*nats.Msg
	for _, id := range ids {
		msgs, n, err := rebuild(id, kept[id], shards)
		if err != nil {
			return nil, 0, fmt.Errorf("memo of %s: %w", id, err)
		}
		out = append(out, msgs...)
		urls += n
	}
	if err := publish(ctx, out); err != nil {
		return nil, 0, fmt.Errorf("publish the outputs of %d lost messages: %w", len(ids), err)
	}
	return ids, urls, nil
}

// rebuild makes the frontier messages of input id from what its memo kept, as route made
// them the first time.
func rebuild(id string, kept []byte, shards int) ([]*nats.Msg, int, error) {
	entries, err := seen.SplitKept(kept)
	if err != nil {
		return nil, 0, err
	}
	var sources []string
	cands := make([]candidate, 0, len(entries))
	idx := make([]int, 0, len(entries))
	for i, e := range entries {
		src, d, err := parseKept(e)
		if err != nil {
			return nil, 0, err
		}
		host, err := urlnorm.Host(d.URL)
		if err != nil {
			return nil, 0, fmt.Errorf("kept URL %q: %w", d.URL, err)
		}
		if len(sources) == 0 || sources[len(sources)-1] != src {
			sources = append(sources, src)
		}
		cands = append(cands, candidate{index: i, group: len(sources) - 1, shard: topology.ShardOf(host, shards), d: d})
		idx = append(idx, i)
	}
	return route(id, sources, cands, idx)
}
