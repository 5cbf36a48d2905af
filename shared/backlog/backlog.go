// Package backlog reads how many messages wait at each stage of the pipeline, from
// JetStream: the scheduler's dispatch gate holds dispatch on it, `trawlctl status` and
// devstack's progress line print it. What a stage's backlog is (which stream, which
// consumer, counted how) is written here once.
package backlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/topology"
)

// The stages, by the names their backlogs are printed under.
const (
	Dedup     = "dedup"     // discovered batches not yet deduplicated (CRAWL_DISCOVERED)
	Scheduler = "scheduler" // new URLs not yet added to the frontier (CRAWL_FRONTIER)
	Fetch     = "fetch"     // fetch task messages not yet done (CRAWL_FETCH)
	Render    = "render"    // render tasks not yet done, rendering included (CRAWL_RENDER)
	Parser    = "parser"    // pages the parser has yet to take or ack (CRAWL_PAGES)
	Archiver  = "archiver"  // pages the archiver has yet to take or ack (CRAWL_PAGES)
	Outcomes  = "outcomes"  // fetch outcomes the schedulers have yet to take or ack (CRAWL_FETCHED)
)

// source is where a stage's backlog is read. A work-queue stream keeps a message until it
// is acked, so its size is the backlog (consumer ""). Limits and interest streams keep
// handled messages, so there the backlog is what the stage's consumer has yet to deliver
// or see acked (Pending): one consumer, or one per scheduler shard (perShard).
type source struct {
	stream   string
	consumer string
	perShard func(shard int) string
}

var sources = map[string]source{
	Dedup:     {stream: topology.StreamDiscovered},
	Scheduler: {stream: topology.StreamFrontier},
	Fetch:     {stream: topology.StreamFetch},
	Render:    {stream: topology.StreamRender},
	Parser:    {stream: topology.StreamPages, consumer: topology.ConsumerParser},
	Archiver:  {stream: topology.StreamPages, consumer: topology.ConsumerArchiver},
	Outcomes:  {stream: topology.StreamFetched, perShard: topology.SchedulerFetchedConsumer},
}

// Backlog is the messages waiting per stage, by stage name: only the stages read.
type Backlog map[string]uint64

// Pending is a consumer's backlog: the messages it has yet to deliver and those delivered
// and not acked yet.
func Pending(ctx context.Context, js jetstream.JetStream, stream, consumer string) (uint64, error) {
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return 0, fmt.Errorf("consumer %s/%s: %w", stream, consumer, err)
	}
	info := c.CachedInfo()
	return info.NumPending + uint64(max(info.NumAckPending, 0)), nil
}

// Missing is a stream or consumer a reading needed that does not exist (no service has
// declared it yet, or an optional stage such as the archiver is not running).
type Missing struct {
	Stream   string
	Consumer string // "": the stream itself is missing
	Err      error  // wraps jetstream.ErrStreamNotFound or ErrConsumerNotFound
}

// Reading is what Read found.
type Reading struct {
	Backlog Backlog
	// Streams are the states of the streams read, by name: those asked for and those
	// whose size is a stage's backlog.
	Streams map[string]jetstream.StreamState
	// Missing are the streams and consumers that do not exist, in the order they were
	// asked for; the stages they belong to are absent from Backlog.
	Missing []Missing
}

// Request says what Read reads.
type Request struct {
	// Streams are read first, in this order, whatever the stages.
	Streams []string
	// Stages are the backlogs to read, in this order.
	Stages []string
	// Shards is TRAWL_SHARDS: the schedulers' consumers counted in Outcomes.
	Shards int
}

// Read reads the streams and then the stages' backlogs, one request per stream or
// consumer. A stream or consumer that does not exist is named in Missing, its stage left
// out; any other failure ends the reading with an error.
func Read(ctx context.Context, js jetstream.JetStream, req Request) (Reading, error) {
	r := Reading{Backlog: Backlog{}, Streams: map[string]jetstream.StreamState{}}
	missingStream := map[string]bool{}
	stream := func(name string) (jetstream.StreamState, bool, error) {
		if st, ok := r.Streams[name]; ok {
			return st, true, nil
		}
		if missingStream[name] {
			return jetstream.StreamState{}, false, nil
		}
		// Looking the stream up fetches its info already: one request per stream.
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			missingStream[name] = true
			r.Missing = append(r.Missing, Missing{Stream: name, Err: fmt.Errorf("stream %s: %w", name, err)})
			return jetstream.StreamState{}, false, nil
		}
		if err != nil {
			return jetstream.StreamState{}, false, fmt.Errorf("backlog: stream %s: %w", name, err)
		}
		st := s.CachedInfo().State
		r.Streams[name] = st
		return st, true, nil
	}
	pending := func(name, consumer string) (uint64, bool, error) {
		n, err := Pending(ctx, js, name, consumer)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			r.Missing = append(r.Missing, Missing{Stream: name, Consumer: consumer, Err: err})
			return 0, false, nil
		}
		if err != nil {
			return 0, false, fmt.Errorf("backlog: %w", err)
		}
		return n, true, nil
	}
	for _, name := range req.Streams {
		if _, _, err := stream(name); err != nil {
			return r, err
		}
	}
	for _, stage := range req.Stages {
		src, ok := sources[stage]
		if !ok {
			return r, fmt.Errorf("backlog: unknown stage %q", stage)
		}
		switch {
		case src.perShard != nil:
			// A shard whose consumer is missing adds nothing; the others still count.
			for k := range req.Shards {
				n, ok, err := pending(src.stream, src.perShard(k))
				if err != nil {
					return r, err
				}
				if ok {
					r.Backlog[stage] += n
				}
			}
		case src.consumer != "":
			n, ok, err := pending(src.stream, src.consumer)
			if err != nil {
				return r, err
			}
			if ok {
				r.Backlog[stage] = n
			}
		default:
			st, ok, err := stream(src.stream)
			if err != nil {
				return r, err
			}
			if ok {
				r.Backlog[stage] = st.Msgs
			}
		}
	}
	return r, nil
}

// Stage reads one stage's backlog; a stream or consumer that does not exist is an error
// (wrapping jetstream.ErrStreamNotFound or ErrConsumerNotFound).
func Stage(ctx context.Context, js jetstream.JetStream, stage string, shards int) (uint64, error) {
	r, err := Read(ctx, js, Request{Stages: []string{stage}, Shards: shards})
	if err != nil {
		return 0, err
	}
	if len(r.Missing) > 0 {
		return 0, fmt.Errorf("backlog: %w", r.Missing[0].Err)
	}
	return r.Backlog[stage], nil
}
