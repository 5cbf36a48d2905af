package service

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// pageLogBatch is how many logged URLs recoverPages reads from Redis at a time.
const pageLogBatch = 1000

// recoverPages puts back in their queues the URLs of the page log whose pages NATS lost
// (frontier.Frontier.PageLog): when an OS crash brings NATS back older than Redis, a page
// published in NATS's lost seconds is gone while Redis kept the outcome that ended its URL
// fetched, and nothing else would fetch it again. It runs before the shard dispatches
// (lostAt zero), and again each time NATS is back while the scheduler runs, lostAt then
// being when the connection was lost (goLoops).
func (s *shard) recoverPages(ctx context.Context, lostAt time.Time) error {
	lost, last, err := s.lostPages(ctx, lostAt)
	if err != nil {
		return fmt.Errorf("shard %d: page log check: %w", s.id, err)
	}
	n, err := s.f.Readmit(ctx, lost)
	if err != nil {
		return fmt.Errorf("shard %d: page log check: %w", s.id, err)
	}
	s.m.pageLogChecks.WithLabelValues(s.label).Inc()
	if n > 0 {
		s.m.pagesReadmitted.WithLabelValues(s.label).Add(float64(n))
		s.log.Warn("NATS lost pages whose URLs Redis counted fetched; URLs queued again", "count", n,
			"first", lost[0].URL, "pages_from", lost[len(lost)-1].Seq, "pages_to", lost[0].Seq, "stream_last", last)
	}
	return nil
}

// lostPages walks the page log from its highest sequence down and returns the URLs whose
// pages CRAWL_PAGES lost (natsx.Rollback: a rollback must be evident, so after a plain
// restart nothing is lost), and the stream's last sequence as last read. A crash takes a
// stream's tail, so the walk stops at the first page the stream holds: at start, any;
// after a reconnect (lostAt set), the first the stream stored before the connection was
// lost, since the shard kept applying outcomes and may have logged a page stored since at
// a sequence NATS lost, which is held without telling anything of the lost ones below it.
//
// The pages logged under one sequence, in this shard's log and the others', are judged
// together (natsx.Verdict): a sequence logged twice was given twice by a rolled-back NATS.
func (s *shard) lostPages(ctx context.Context, lostAt time.Time) (lost []frontier.Logged, last uint64, err error) {
	rb := natsx.NewRollback(s.js, topology.StreamPages)
	var before uint64
	for {
		logged, err := s.f.PageLog(ctx, before, pageLogBatch)
		if err != nil || len(logged) == 0 {
			return lost, rb.Last(), err
		}
		if len(logged) == pageLogBatch {
			logged = wholeSeqs(logged)
		}
		others, err := s.f.OtherLogged(ctx, logged[len(logged)-1].Seq, logged[0].Seq)
		if err != nil {
			return nil, 0, err
		}
		if err := rb.Refresh(ctx); err != nil {
			return nil, 0, err
		}
		for len(logged) > 0 {
			n := 1
			for n < len(logged) && logged[n].Seq == logged[0].Seq {
				n++
			}
			same := append(logged[:n:n], others[logged[0].Seq]...)
			logged = logged[n:]
			before = same[0].Seq
			var (
				ids  map[string]bool
				read *jetstream.RawStreamMsg
			)
			v, err := rb.Judge(ctx, before, len(same), oneMessage(same), func(m *jetstream.RawStreamMsg, i int) bool {
				if m != read {
					read, ids = m, pageIDs(m)
				}
				return ids[topology.PageID(same[i].Token)]
			})
			if err != nil {
				return nil, 0, err
			}
			for i, l := range same {
				if v.Lost(i) {
					lost = append(lost, l)
				}
			}
			if v.Standing == natsx.Held && (lostAt.IsZero() || v.Msg.Time.Before(lostAt)) {
				return lost, rb.Last(), nil
			}
		}
	}
}

// pageIDs are the ids of the pages m carries: its own, or its parts' when it is a bundle.
func pageIDs(m *jetstream.RawStreamMsg) map[string]bool {
	parts, err := crawlmsg.Unbundle(m.Header, m.Data)
	if err != nil {
		return nil // no page of the log's
	}
	ids := make(map[string]bool, len(parts))
	for _, p := range parts {
		ids[p.Header.Get(nats.MsgIdHdr)] = true
	}
	return ids
}

// oneMessage says whether the URLs logged under one sequence are, by their own account,
// the pages of one message: as many as each says its message carried, of one shard (a
// bundle holds the pages of one outcome batch, one shard's).
func oneMessage(same []frontier.Logged) bool {
	for _, l := range same {
		if l.Parts != len(same) || l.Shard != same[0].Shard {
			return false
		}
	}
	return true
}

// wholeSeqs drops from a full batch the URLs logged under its lowest sequence, so that the
// next batch, which reads below the last sequence seen, has them all.
func wholeSeqs(logged []frontier.Logged) []frontier.Logged {
	low := logged[len(logged)-1].Seq
	n := len(logged)
	for n > 0 && logged[n-1].Seq == low {
		n--
	}
	if n == 0 { // one sequence filled the batch: nothing rolled back gives one that often
		return logged
	}
	return logged[:n]
}

// Tries and the first wait of a page log check after a reconnect that failed: few and
// short, since it must run before the parser acknowledges a page stored since at a lost
// sequence (a settle window after storing its links), which would leave that sequence
// reading as removed rather than reused.
const (
	recheckAttempts = 5
	recheckBackoff  = 200 * time.Millisecond
)

// trimPageLog drops the logged URLs whose pages the parser acknowledged: at or below its
// consumer's ack floor on CRAWL_PAGES as read one round ago (as trimMarkers does), which
// only settled acknowledgements move (natsx.ConsumeBatches), so those pages' links are
// durably in NATS. A page parsed before its URL was logged is dropped by the next round.
func (s *shard) trimPageLog(ctx context.Context) {
	floor := s.pageFloor
	if s.parserC == nil {
		c, err := s.js.Consumer(ctx, topology.StreamPages, topology.ConsumerParser)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("page log trim: parser consumer", "err", err)
			}
			return
		}
		s.parserC = c
	}
	ci, err := s.parserC.Info(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("page log trim: parser consumer info", "err", err)
		}
		return
	}
	s.pageFloor = ci.AckFloor.Stream
	if floor == 0 || floor > s.pageFloor {
		// First round, or the stream was made again (its sequence started over).
		return
	}
	if _, err := s.f.TrimPageLog(ctx, floor); err != nil && ctx.Err() == nil {
		s.m.redisErrors.WithLabelValues(s.label, "trim").Inc()
		s.log.Warn("page log trim failed", "err", err)
	}
}
