package natsx

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// RemoveAcked removes from a work-queue stream the messages of one of its consumers that
// the consumer has acknowledged and the stream still holds, and returns how many. A
// server removes a work-queue message when its consumer acknowledges it, but one back from
// an OS crash (its files written back at different moments) may hold the consumer's
// acknowledgement without the removal. nats-server 2.15 looks for such messages at start
// on interest streams only: on a work queue the message stays, below the consumer's ack
// floor, so it is never delivered again nor removed. The backlog it leaves never drains,
// and a check that reads a held message as one still to be handled (dedup's, after a
// rollback) would wait on it for ever.
//
// Every message at or below the ack floor was acknowledged (or terminated), whatever the
// crash kept, so removing it is what the server would have done. One the server removes
// meanwhile is skipped. Other consumers' messages (another filter) are left alone. A
// stream of another retention is not touched.
func RemoveAcked(ctx context.Context, js jetstream.JetStream, stream, consumer string) (int, error) {
	str, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("natsx: remove acked messages of %s/%s: %w", stream, consumer, err)
	}
	si := str.CachedInfo()
	if si.Config.Retention != jetstream.WorkQueuePolicy || si.State.Msgs == 0 {
		return 0, nil
	}
	cons, err := str.Consumer(ctx, consumer)
	if err != nil {
		return 0, fmt.Errorf("natsx: remove acked messages of %s/%s: %w", stream, consumer, err)
	}
	ci := cons.CachedInfo()
	floor := ci.AckFloor.Stream
	if si.State.FirstSeq > floor {
		return 0, nil // the common case: nothing held at or below the floor
	}
	filters := slices.Clone(ci.Config.FilterSubjects) // appended to below: not the cached info's
	if ci.Config.FilterSubject != "" {
		filters = append(filters, ci.Config.FilterSubject)
	}
	if len(filters) == 0 {
		filters = []string{">"}
	}
	removed := 0
	for _, f := range filters {
		// Subject by subject: the server finds a literal subject's next message from its
		// index, where a wildcard may read the stream's blocks one by one (a recrawl
		// stream holds a schedule for every URL beside its few due messages).
		fi, err := str.Info(ctx, jetstream.WithSubjectFilter(f))
		if err != nil {
			return removed, fmt.Errorf("natsx: remove acked messages of %s/%s: subjects of %s: %w", stream, consumer, f, err)
		}
		for subj := range fi.State.Subjects {
			n, err := removeAckedOf(ctx, str, subj, fi.State.FirstSeq, floor)
			removed += n
			if err != nil {
				return removed, fmt.Errorf("natsx: remove acked messages of %s/%s: %w", stream, consumer, err)
			}
		}
	}
	return removed, nil
}

// removeAckedOf removes the messages of subj from seq up to floor.
func removeAckedOf(ctx context.Context, str jetstream.Stream, subj string, seq, floor uint64) (int, error) {
	removed := 0
	for seq <= floor {
		m, err := str.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return removed, nil
		}
		if err != nil {
			return removed, fmt.Errorf("read %s from %d: %w", subj, seq, err)
		}
		if m.Sequence > floor {
			return removed, nil
		}
		if err := str.DeleteMsg(ctx, m.Sequence); err != nil {
			// The server may have removed it meanwhile.
			if _, gerr := str.GetMsg(ctx, m.Sequence); !errors.Is(gerr, jetstream.ErrMsgNotFound) {
				return removed, fmt.Errorf("remove %d: %w", m.Sequence, err)
			}
		} else {
			removed++
		}
		seq = m.Sequence + 1
	}
	return removed, nil
}
