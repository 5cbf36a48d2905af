package service

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
// A message is lost only when a rollback is evident, as for the scheduler's page log: its
// sequence is beyond the stream's last, or the stream holds another message there. The
// walk goes down from the highest sequence and stops at the first message the stream
// still holds (a crash loses a stream's tail); one the stream no longer holds at a
// sequence within it was removed once acknowledged. It runs before the consumer starts,
// so that no acknowledgement of this run can have removed one.
func recoverLost(ctx context.Context, js jetstream.JetStream, store *seen.Store, publish publishFunc, shards int) (ids []string, urls int, err error) {
	str, err := js.Stream(ctx, topology.StreamDiscovered)
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s: %w", topology.StreamDiscovered, err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s: %w", topology.StreamDiscovered, err)
	}
	last := info.State.LastSeq
	held := map[uint64]string{} // sequence → id of the message the stream holds there ("" none)
	lost := map[string]bool{}
	var werr error
	err = store.WalkDown(ctx, func(m seen.Memoised) bool {
		if m.Seq > last {
			lost[m.ID] = true
			return true
		}
		id, ok := held[m.Seq]
		if !ok {
			raw, err := str.GetMsg(ctx, m.Seq)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				werr = fmt.Errorf("stream %s: message %d: %w", topology.StreamDiscovered, m.Seq, err)
				return false
			default:
				id = natsx.StoredID(topology.StreamDiscovered, raw.Sequence, raw.Time)
			}
			held[m.Seq] = id
		}
		switch id {
		case "":
			return true
		case m.ID:
			return false
		}
		lost[m.ID] = true
		return true
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
