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
// with it at start, dedup's also at each reconnect.
type Rollback struct {
	str  jetstream.Stream
	name string
	last uint64
}

// NewRollback returns a Rollback over stream.
func NewRollback(ctx context.Context, js jetstream.JetStream, stream string) (*Rollback, error) {
	str, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("natsx: stream %s: %w", stream, err)
	}
	return &Rollback{str: str, name: stream}, nil
}

// Last is the stream's last sequence as last read.
func (r *Rollback) Last() uint64 { return r.last }

// Standing says where the message recorded at seq stands; is tells whether the message the
// stream holds at seq is the one recorded. A sequence beyond the last read is checked
// against the stream's state read again: a message stored since the last read is not lost.
func (r *Rollback) Standing(ctx context.Context, seq uint64, is func(*jetstream.RawStreamMsg) bool) (Standing, error) {
	if seq > r.last {
		info, err := r.str.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("natsx: stream %s: %w", r.name, err)
		}
		r.last = info.State.LastSeq
		if seq > r.last {
			return Lost, nil
		}
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
