package recrawl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

// Backlog is the recrawl schedule's state as CRAWL_RECRAWL holds it: counts from the
// stream and its consumers, figures from a sample of the schedules. Nothing of it is kept
// in Redis.
type Backlog struct {
	// Scheduled URLs wait for their time; Due ones came due and wait for their scheduler
	// to queue them (its intake is metered), the oldest of them for OldestDue.
	Scheduled uint64        `json:"scheduled"`
	Due       uint64        `json:"due"`
	OldestDue time.Duration `json:"oldest_due_ns"`
	// Sampled schedules give the rest: their median interval, and the share of their
	// fetches that were answered 304 and that found a change.
	Sampled          int           `json:"sampled"`
	MedianInterval   time.Duration `json:"median_interval_ns"`
	NotModifiedShare float64       `json:"not_modified_share"`
	ChangedShare     float64       `json:"changed_share"`
}

// ReadBacklog reads the backlog of a crawl of shards shards, sampling up to sample
// schedules. It returns nil without error when the crawl does not recrawl (no stream).
// The schedules may be split over several streams (TRAWL_RECRAWL_STREAMS): they are found
// by their subjects, so the reader needs no setting.
func ReadBacklog(ctx context.Context, js jetstream.JetStream, shards, sample int, now time.Time) (*Backlog, error) {
	strs, err := recrawlStreams(ctx, js)
	if err != nil {
		return nil, err
	}
	if len(strs) == 0 {
		return nil, nil
	}
	b := &Backlog{}
	var msgs uint64
	for _, str := range strs {
		msgs += str.CachedInfo().State.Msgs
	}
	for s := range shards {
		str, err := streamOf(ctx, js, strs, topology.DueFilter(s))
		if err != nil {
			return nil, err
		}
		c, err := str.Consumer(ctx, topology.SchedulerRecrawlConsumer(s))
		if err != nil {
			return nil, fmt.Errorf("recrawl: consumer of shard %d: %w", s, err)
		}
		ci := c.CachedInfo()
		b.Due += ci.NumPending + uint64(ci.NumAckPending)
		if ci.NumPending+uint64(ci.NumAckPending) == 0 {
			continue
		}
		// The oldest due message not yet acked is the first of the shard's after its ack floor.
		m, err := str.GetMsg(ctx, ci.AckFloor.Stream+1, jetstream.WithGetMsgSubject(topology.DueFilter(s)))
		if err == nil {
			b.OldestDue = max(b.OldestDue, now.Sub(m.Time))
		}
	}
	b.Scheduled = msgs - min(b.Due, msgs)
	if msgs == 0 || sample <= 0 {
		return b, nil
	}
	var intervals []int64
	var fetches, notModified, changed int
	for range sample {
		// A stream drawn in proportion to the schedules it holds, then a sequence in it.
		k := rand.Uint64N(msgs)
		str := strs[0]
		for _, x := range strs {
			if n := x.CachedInfo().State.Msgs; k >= n {
				k -= n
			} else {
				str = x
				break
			}
		}
		st := str.CachedInfo().State
		if st.Msgs == 0 {
			continue
		}
		seq := st.FirstSeq + rand.Uint64N(st.LastSeq-st.FirstSeq+1)
		m, err := str.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(topology.ScheduleFilter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("recrawl: sample: %w", err)
		}
		e, err := crawlmsg.DecodeRecrawl(m.Data)
		if err != nil {
			continue
		}
		intervals = append(intervals, e.State.Interval)
		fetches += e.State.Fetches
		notModified += e.State.NotModified
		changed += e.State.Changes
	}
	b.Sampled = len(intervals)
	if len(intervals) > 0 {
		slices.Sort(intervals)
		b.MedianInterval = time.Duration(intervals[len(intervals)/2]) * time.Millisecond
	}
	if fetches > 0 {
		b.NotModifiedShare = float64(notModified) / float64(fetches)
		b.ChangedShare = float64(changed) / float64(fetches)
	}
	return b, nil
}

// recrawlStreams are the streams holding recrawl schedules (none when the crawl does not
// recrawl), with their info.
func recrawlStreams(ctx context.Context, js jetstream.JetStream) ([]jetstream.Stream, error) {
	var strs []jetstream.Stream
	l := js.ListStreams(ctx, jetstream.WithStreamListSubject(topology.ScheduleFilter))
	for info := range l.Info() {
		str, err := js.Stream(ctx, info.Config.Name)
		if err != nil {
			return nil, fmt.Errorf("recrawl: stream %s: %w", info.Config.Name, err)
		}
		strs = append(strs, str)
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("recrawl: streams: %w", err)
	}
	return strs, nil
}

// streamOf is the stream of strs, or else of the server, that holds subject.
func streamOf(ctx context.Context, js jetstream.JetStream, strs []jetstream.Stream, subject string) (jetstream.Stream, error) {
	name, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("recrawl: stream of %s: %w", subject, err)
	}
	for _, s := range strs {
		if s.CachedInfo().Config.Name == name {
			return s, nil
		}
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("recrawl: stream %s: %w", name, err)
	}
	return s, nil
}

// History is what CRAWL_RECRAWL holds of one URL: its entry and where it is.
type History struct {
	crawlmsg.RecrawlEntry
	// Where is "scheduled" (waiting for its time), "due" (waiting for its scheduler), or
	// "" when the stream holds nothing of the URL: it is queued or being fetched (its
	// state then travels in the frontier entry and the task), was never fetched in
	// adaptive mode, or was forgotten (404/410 twice).
	Where string `json:"where"`
}

// Lookup reads url's schedule (a URL of shard's hosts).
func Lookup(ctx context.Context, js jetstream.JetStream, shard int, url string) (History, error) {
	str, err := streamOf(ctx, js, nil, topology.ScheduleSubject(shard, url))
	if err != nil {
		return History{}, err
	}
	for _, w := range []struct{ where, subject string }{
		{"due", topology.DueSubject(shard, url)},
		{"scheduled", topology.ScheduleSubject(shard, url)},
	} {
		m, err := str.GetLastMsgForSubject(ctx, w.subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return History{}, fmt.Errorf("recrawl: %s: %w", w.subject, err)
		}
		e, err := crawlmsg.DecodeRecrawl(m.Data)
		if err != nil {
			return History{}, err
		}
		if e.URL != url {
			// Another URL whose key collides holds the subject.
			continue
		}
		return History{RecrawlEntry: e, Where: w.where}, nil
	}
	return History{}, nil
}
