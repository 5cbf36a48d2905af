package natsx

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/trawl/trawl/shared/topology"
)

// AtomicMax is the most messages one atomic batch holds: nats-server's default
// max_batch_size is 1,000; a server set lower refuses larger batches, whose messages then
// go one at a time.
const AtomicMax = 1000

// AtomicMin is the fewest messages of one stream that go as an atomic batch; fewer go one
// at a time. nats-server stages each atomic batch of a one-replica file stream in a file
// store of its own, made, synced and removed per batch, so a batch of a few messages costs
// it more than their single synced writes; at TRAWL_FSYNC=always the crawl spent least
// with 8 or 16 here, more with 2 or 32 (docs/cost-per-page.md, "Durability").
const AtomicMin = 16

// AtomicBatches returns js marked for atomic batches: PublishBatch and Committer publish
// through it the messages of one stream as atomic batches, and through an unmarked handle
// each message alone (durability.Level.AtomicBatches says when to mark).
func AtomicBatches(js jetstream.JetStream) jetstream.JetStream {
	if atomicOn(js) {
		return js
	}
	return atomicJS{js}
}

type atomicJS struct{ jetstream.JetStream }

func atomicOn(js jetstream.JetStream) bool {
	_, ok := js.(atomicJS)
	return ok
}

// publishAll publishes msgs and waits for JetStream to store them, returning one error per
// message (nil: stored, or dropped as a duplicate of one stored). Through a handle marked
// by AtomicBatches, messages of one topology.AtomicGroup, AtomicMin or more, go as atomic
// batches (publishAtomic): the server stores a batch whole or not at all, and at
// TRAWL_FSYNC=always syncs the stream's file once per batch instead of once per message,
// and acks it once. The others are published asynchronously, each acked. seqs holds each
// message's stream sequence, from its own ack (a duplicate's names the stored original);
// 0 for a message stored in an atomic batch, whose ack names the batch.
func publishAll(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) (errs []error, seqs []uint64) {
	errs, seqs = make([]error, len(msgs)), make([]uint64, len(msgs))
	if len(msgs) < AtomicMin || !atomicOn(js) {
		publishAsync(ctx, js, msgs, nil, true, errs, seqs)
		return errs, seqs
	}
	groups := make(map[string][]int)
	var single []int
	for i, m := range msgs {
		if g := topology.AtomicGroup(m.Subject); g != "" {
			groups[g] = append(groups[g], i)
		} else {
			single = append(single, i)
		}
	}
	for g, idx := range groups {
		if len(idx) < AtomicMin {
			single = append(single, idx...)
			delete(groups, g)
		}
	}
	done := make(chan struct{}, len(groups))
	for _, idx := range groups {
		// One group's batches in order, the groups side by side; each writes only its
		// own messages' errors.
		go func() {
			defer func() { done <- struct{}{} }()
			for chunk := range slices.Chunk(idx, AtomicMax) {
				publishAtomic(ctx, js, msgs, chunk, errs, seqs)
			}
		}()
	}
	publishAsync(ctx, js, msgs, single, false, errs, seqs)
	for range groups {
		<-done
	}
	return errs, seqs
}

// publishAtomic stores msgs[idx], all bound for one stream, as one atomic batch. A batch
// the server refuses (an API error: nothing of it is stored) goes again one message at a
// time, where each is judged alone: a message already stored (a republish, which fails a
// whole batch) is dropped by its Nats-Msg-Id, and one too large fails alone with its own
// error. So do the messages of a stream made without atomic publish, and of a batch the
// client refused for a message over max_payload. An error without the server's answer (a
// timeout) leaves the batch's fate unknown: every message gets it, and the caller's retry
// finds out.
func publishAtomic(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg, idx []int, errs []error, seqs []uint64) {
	// The library writes the batch headers into the messages it is given; the fallback
	// needs them without.
	batch := make([]*nats.Msg, len(idx))
	for i, j := range idx {
		m := msgs[j]
		batch[i] = &nats.Msg{Subject: m.Subject, Header: maps.Clone(m.Header), Data: m.Data}
		if batch[i].Header == nil {
			batch[i].Header = nats.Header{}
		}
	}
	// Not waiting for the first message's ack saves a round trip per batch; a batch the
	// server did not start is refused at the commit.
	_, err := jetstreamext.PublishMsgBatch(ctx, js, batch, jetstreamext.BatchFlowControl{AckFirst: false})
	if err == nil {
		return
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) || errors.Is(err, nats.ErrMaxPayload) {
		publishAsync(ctx, js, msgs, idx, false, errs, seqs)
		return
	}
	err = fmt.Errorf("natsx: atomic batch of %d on %s: %w", len(idx), msgs[idx[0]].Subject, err)
	for _, j := range idx {
		errs[j] = err
	}
}

// publishAsync publishes msgs[idx] (all of msgs when all is set) asynchronously and waits
// for every pub-ack, writing each message's error and stream sequence.
func publishAsync(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg, idx []int, all bool, errs []error, seqs []uint64) {
	if all {
		idx = make([]int, len(msgs))
		for i := range idx {
			idx[i] = i
		}
	}
	futures := make([]jetstream.PubAckFuture, len(idx))
	for i, j := range idx {
		f, err := js.PublishMsgAsync(msgs[j])
		if err != nil {
			errs[j] = fmt.Errorf("natsx: publish %s: %w", msgs[j].Subject, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		j := idx[i]
		select {
		case ack := <-f.Ok():
			seqs[j] = ack.Sequence
		case err := <-f.Err():
			errs[j] = fmt.Errorf("natsx: publish %s: %w", msgs[j].Subject, err)
		case <-ctx.Done():
			errs[j] = fmt.Errorf("natsx: publish %s: %w", msgs[j].Subject, ctx.Err())
		}
	}
}

// joinDistinct joins errs, each error value once: the messages of a batch that failed
// whole share one.
func joinDistinct(errs []error) error {
	var out []error
	for _, err := range errs {
		if err != nil && !slices.Contains(out, err) {
			out = append(out, err)
		}
	}
	return errors.Join(out...)
}
