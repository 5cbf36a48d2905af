package natsx

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Standing is what a stream says of a message that Redis recorded under its stream
// sequence, when an OS crash may have brought NATS back older than Redis.
type Standing int

const (
	// Held: the stream holds the message. A crash loses a stream's tail, so the messages
	// below it are there too: a walk from the top can stop.
	Held Standing = iota
	// Removed: no message at that sequence, which is within the stream: it was removed once
	// acknowledged, so nothing was lost.
	Removed
	// Lost: the sequence is beyond the stream's last, or the stream holds another message
	// there (NATS, rolled back, gave the sequence to a newer one, or the stream was made
	// again).
	Lost
)

// Rollback tells, for messages recorded by sequence, which of them a stream lost. Loss is
// taken only from such evidence, so after a restart that lost nothing (SIGKILL, a NATS
// restart) nothing reads as lost. The scheduler's page log and dedup's memos are checked
// with it at start and at each reconnect.
//
// A walk reads its records a batch at a time and calls Refresh after each read: every
// record of the batch then stands against the stream's state read after it, so one beyond
// the last sequence is lost with no request to NATS. The records NATS lost lie above the
// rest, and the ones whose sequences a rolled-back NATS gave to new messages come right
// after them: reading the state once per batch rather than once per lost record lets the
// walk reach those sequences within milliseconds of the reconnect, before a consumer can
// have acknowledged the new messages there (which would leave the sequences reading as
// removed, and the records as handled).
type Rollback struct {
	js   jetstream.JetStream
	str  jetstream.Stream
	name string
	last uint64
}

// NewRollback returns a Rollback over stream; Refresh reads its state.
func NewRollback(js jetstream.JetStream, stream string) *Rollback {
	return &Rollback{js: js, name: stream}
}

// Refresh reads the stream's last sequence. Call it after reading the records to be
// checked, and before checking them.
func (r *Rollback) Refresh(ctx context.Context) error {
	str, err := r.js.Stream(ctx, r.name)
	if err != nil {
		return fmt.Errorf("natsx: stream %s: %w", r.name, err)
	}
	r.str, r.last = str, str.CachedInfo().State.LastSeq
	return nil
}

// Last is the stream's last sequence as last read.
func (r *Rollback) Last() uint64 { return r.last }

// Standing says where the message recorded at seq stands; is tells whether the message the
// stream holds at seq is the one recorded. The record must have been read before the last
// Refresh: its message, if the stream still held it, was stored by then.
func (r *Rollback) Standing(ctx context.Context, seq uint64, is func(*jetstream.RawStreamMsg) bool) (Standing, error) {
	if r.str == nil {
		return 0, fmt.Errorf("natsx: stream %s: standing asked before its state was read", r.name)
	}
	if seq > r.last {
		return Lost, nil
	}
	m, err := r.str.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return Removed, nil
	case err != nil:
		return 0, fmt.Errorf("natsx: stream %s: message %d: %w", r.name, seq, err)
	case is(m):
		return Held, nil
	default:
		return Lost, nil
	}
}

// Verdict is what a stream says of the records logged under one sequence.
type Verdict struct {
	// Standing is the sequence's: Held when the stream holds one of the records there.
	Standing Standing
	// Msg is the message the stream holds at the sequence, when Held.
	Msg  *jetstream.RawStreamMsg
	held []bool
	one  bool
}

// Lost tells whether record i of the sequence's is lost: every one the message the stream
// holds there does not hold; all when it holds another message or the sequence lies beyond
// its last; and when the stream removed the sequence's message, all of two or more records
// unless they were, by their own account, one message's (a bundle's pages), since a
// sequence logged for two messages was given twice by a rolled-back NATS and which of them
// was acknowledged cannot be told (the lost one's work is done again).
func (v Verdict) Lost(i int) bool {
	switch v.Standing {
	case Held:
		return !v.held[i]
	case Lost:
		return true
	default:
		return len(v.held) > 1 && !v.one
	}
}

// Judge says where the n records logged under seq stand; holds tells whether the message
// the stream holds at seq holds record i (a bundle holds several), and one whether the n
// records are, by their own account, one message's. As for Standing, the records must
// have been read before the last Refresh.
func (r *Rollback) Judge(ctx context.Context, seq uint64, n int, one bool, holds func(m *jetstream.RawStreamMsg, i int) bool) (Verdict, error) {
	v := Verdict{held: make([]bool, n), one: one}
	st, err := r.Standing(ctx, seq, func(m *jetstream.RawStreamMsg) bool {
		v.Msg = m
		found := false
		for i := range n {
			v.held[i] = holds(m, i)
			found = found || v.held[i]
		}
		return found
	})
	if err != nil {
		return Verdict{}, err
	}
	v.Standing = st
	if st != Held {
		v.Msg = nil
	}
	return v, nil
}
