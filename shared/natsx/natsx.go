// Package natsx is Trawl's NATS JetStream plumbing: connecting with retry, declaring the
// streams and consumers, publishing batches idempotently, and consume loops that ack, nak
// with backoff, or terminate poison messages after bounded retries.
package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/topology"
)

// Connect dials url and keeps reconnecting forever: a NATS restart must not stop a
// service. It waits until the first connection is up or ctx ends.
func Connect(ctx context.Context, url, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectBufSize(64<<20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("natsx: connect %s: %w", url, err)
	}
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, nil, fmt.Errorf("natsx: connect %s: %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("natsx: jetstream: %w", err)
	}
	return nc, js, nil
}

// Ensure creates or updates every stream and pipeline consumer, retrying until ctx ends so
// that services started before NATS is ready simply wait. Every service calls it at start:
// the fetched stream keeps messages only for existing consumers, so they must exist before
// the first outcome is published.
func Ensure(ctx context.Context, js jetstream.JetStream, o topology.Options, t topology.StageTimings, log *slog.Logger) error {
	var lastErr error
	for attempt := 0; ; attempt++ {
		if lastErr = ensureOnce(ctx, js, o, t); lastErr == nil {
			return nil
		}
		if attempt%20 == 0 {
			log.Warn("waiting for jetstream", "err", lastErr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natsx: ensure topology: %w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func ensureOnce(ctx context.Context, js jetstream.JetStream, o topology.Options, t topology.StageTimings) error {
	for _, sc := range topology.Streams(o) {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	for _, c := range topology.Consumers(o, t) {
		if _, err := js.CreateOrUpdateConsumer(ctx, c.Stream, c.Config); err != nil {
			return fmt.Errorf("consumer %s/%s: %w", c.Stream, c.Config.Durable, err)
		}
	}
	return nil
}

// PublishBatch publishes msgs asynchronously and waits until JetStream has stored every one.
// Callers set a Nats-Msg-Id header (nats.MsgIdHdr) on each message derived from the input
// that produced it, so that a republish after a crash is dropped by the stream's duplicate
// window instead of doubling work. An error means some messages may not be stored; the
// caller must not ack its input.
func PublishBatch(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) error {
	if len(msgs) == 0 {
		return nil
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("natsx: publish %s: %w", m.Subject, err)
		}
		futures = append(futures, f)
	}
	var errs []error
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs = append(errs, fmt.Errorf("natsx: publish %s: %w", f.Msg().Subject, err))
		case <-ctx.Done():
			return fmt.Errorf("natsx: publish: %w", ctx.Err())
		}
	}
	return errors.Join(errs...)
}

// NewMsg builds a message with an idempotency key.
func NewMsg(subject, msgID string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	return m
}

// MsgID returns a stable identity for a delivered message: its stream, stream sequence
// and the time the stream stored it (unix ns, base 36). The sequence alone repeats when a
// stream is deleted and made again; the stored time does not, so outputs of the new
// stream's messages are not taken for republishes of the old one's (duplicate window,
// applied markers, memos). Every redelivery of a message carries the same three values.
// Outputs derived from it use this plus a suffix as their Nats-Msg-Id.
func MsgID(m jetstream.Msg) string {
	md, err := m.Metadata()
	if err != nil {
		return ""
	}
	return md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10) + ":" + strconv.FormatInt(md.Timestamp.UnixNano(), 36)
}

// Settled reports whether consumer has settled (acked or terminated) every message of
// stream so far, and says where it stands. A nak'ed message waiting out its delay is
// neither pending nor ack-pending, so settled also means the ack floor has reached the
// stream's last message.
func Settled(ctx context.Context, js jetstream.JetStream, stream, consumer string) (ok bool, state string, err error) {
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return false, "", fmt.Errorf("natsx: consumer %s/%s: %w", stream, consumer, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, "", fmt.Errorf("natsx: consumer %s/%s: %w", stream, consumer, err)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return false, "", fmt.Errorf("natsx: stream %s: %w", stream, err)
	}
	sinfo, err := st.Info(ctx)
	if err != nil {
		return false, "", fmt.Errorf("natsx: stream %s: %w", stream, err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= sinfo.State.LastSeq,
		fmt.Sprintf("pending %d, ack pending %d, ack floor %d of %d", info.NumPending, info.NumAckPending, info.AckFloor.Stream, sinfo.State.LastSeq), nil
}
