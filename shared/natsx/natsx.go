// Package natsx is Trawl's NATS JetStream plumbing: connecting with retry, declaring the
// streams and consumers, publishing batches idempotently, and consume loops that ack, nak
// with backoff, or terminate poison messages after bounded retries.
package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/redact"
	"github.com/trawl/trawl/shared/tlsx"
	"github.com/trawl/trawl/shared/topology"
)

// APITimeout bounds a JetStream API request whose context has no deadline, and the wait
// for an asynchronous publish's ack. On a cluster, creating or updating a replicated
// stream, consumer or bucket is a proposal through the meta leader's Raft group and then
// the asset's own, and with every service declaring the topology at once it can take
// longer than the client's 5 s default.
const APITimeout = 15 * time.Second

// ErrURL marks a TRAWL_NATS_URL that cannot be used.
var ErrURL = errors.New("natsx: bad NATS URL")

// CheckURL reports whether urls, one URL or several separated by commas, is a usable
// TRAWL_NATS_URL. The error quotes the value redacted and leaves net/url's error out
// (redact.EncodingHint).
func CheckURL(urls string) error {
	for raw := range strings.SplitSeq(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%w %q: not a valid URL (%s)", ErrURL, redact.URL(urls), redact.EncodingHint)
		}
		if u.Host == "" {
			return fmt.Errorf("%w %q: want a URL with a host, or several separated by commas", ErrURL, redact.URL(urls))
		}
	}
	return nil
}

// Connect dials url (the servers of a cluster comma-separated: the client picks one and
// moves to another when it is lost) and keeps reconnecting forever: a NATS restart must
// not stop a service. It waits until the first connection is up or ctx ends, saying what
// it waits on (the URL, redacted, and the last error) every few seconds.
func Connect(ctx context.Context, url, name string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if err := CheckURL(url); err != nil {
		return nil, nil, err
	}
	refused := make(chan error, 1)
	// A failed dial is reported only to this handler (LastError stays nil), and the wait
	// below names it.
	var dialErr atomic.Pointer[error]
	nc, err := nats.Connect(url, append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		// Nothing is kept to be sent once reconnected: a publish or an ack made while the
		// client reconnects fails at once. Kept, it would reach a server that may be back
		// older, after its caller took it for failed: an outcome a fetcher gave up on at
		// its lease's deadline, applied after the scheduler's page log check, named a page
		// NATS had lost (shared/durability/README.md).
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				dialErr.Store(&err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if isRefused(err) {
				select {
				case refused <- err:
				default:
				}
			}
		}),
	}, opts...)...)
	if err != nil {
		if isRefused(err) {
			err = errors.Join(ErrRefused, err)
		}
		return nil, nil, fmt.Errorf("natsx: connect %s: %w", redact.URL(url), redact.Error(err))
	}
	waiting := newLogGate(time.Second, 5*time.Second)
	for !nc.IsConnected() {
		if waiting.open() {
			args := []any{"url", redact.URL(url)}
			if err := nc.LastError(); err != nil {
				args = append(args, "err", redact.Error(err))
			} else if err := dialErr.Load(); err != nil {
				args = append(args, "err", redact.Error(*err))
			}
			log.Warn("waiting for nats", args...)
		}
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, nil, fmt.Errorf("natsx: connect %s: %w", redact.URL(url), ctx.Err())
		case err := <-refused:
			// Credentials do not get better by retrying: say so and stop.
			nc.Close()
			return nil, nil, fmt.Errorf("natsx: connect %s: %w: %w", redact.URL(url), ErrRefused, err)
		case <-time.After(50 * time.Millisecond):
			if err := nc.LastError(); isRefused(err) {
				nc.Close()
				return nil, nil, fmt.Errorf("natsx: connect %s: %w: %w", redact.URL(url), ErrRefused, err)
			}
		}
	}
	// An asynchronous publish whose ack was lost with its server (a cluster node that
	// died) would otherwise wait for ever, and with it the handler that published it.
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(APITimeout), jetstream.WithPublishAsyncTimeout(APITimeout))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("natsx: jetstream: %w", err)
	}
	return nc, js, nil
}

// Ensure creates or updates every stream and pipeline consumer, retrying until ctx ends so
// that services started before NATS is ready simply wait; what waiting cannot change (a
// configuration JetStream refuses, ErrConfigRefused, and the errors below) it returns at
// once. Every service calls it at start:
// the fetched stream keeps messages only for existing consumers, so they must exist before
// the first outcome is published.
func Ensure(ctx context.Context, js jetstream.JetStream, o topology.Options, t topology.StageTimings, log *slog.Logger) error {
	var lastErr error
	for attempt := 0; ; attempt++ {
		if lastErr = ensureOnce(ctx, js, o, t); lastErr == nil {
			return nil
		}
		// Waiting does not make disk: the service stops with what to change.
		if err := noStorage(lastErr); errors.Is(err, ErrNoStorage) {
			return err
		}
		if err := overlap(lastErr); err != nil {
			return err
		}
		if errors.Is(lastErr, ErrSettingsDiffer) {
			return lastErr
		}
		switch err := tooFewPeers(lastErr, o.Replicas); {
		case errors.Is(err, ErrNotClustered):
			return err
		case err != nil:
			// A cluster with a server down can take the streams once it is back.
			lastErr = err
		}
		if err := refusedConfig(lastErr); err != nil {
			return err
		}
		if attempt%20 == 0 {
			log.Warn("waiting for jetstream", "err", lastErr)
		}
		if !ctxsleep.Sleep(ctx, 250*time.Millisecond) {
			return fmt.Errorf("natsx: ensure topology: %w (last error: %v)", ctx.Err(), lastErr)
		}
	}
}

// ErrConfigRefused: JetStream refused a stream or consumer as asked (a JetStream 400, which
// shared/errclass calls permanent: e.g. a MaxAckPending above the server's or account's
// limit). Sent again, it is refused again.
var ErrConfigRefused = errors.New("natsx: JetStream refused the configuration of a stream or consumer")

// Answers of the JetStream API that errclass calls permanent, as every 400 is, but that
// Ensure can meet while other services declare the same topology, or while a cluster's
// membership changes, and that a later attempt gets past (nats-server's errors.json).
var ensureRaces = []jetstream.ErrorCode{
	jetstream.JSErrCodeStreamNameInUse,       // made by another service with other settings
	jetstream.JSErrCodeConsumerNameExists,    // likewise, a consumer
	jetstream.JSErrCodeConsumerAlreadyExists, // likewise (10105)
	jetstream.JSErrCodeConsumerExists,        // likewise (10148)
	jetstream.JSErrCodeConsumerDoesNotExist,  // an update that raced a delete
	errCodeNoPeers,                           // a JetStream server is yet to join
	10040,                                    // JSClusterPeerNotMemberErr
	10044,                                    // JSClusterServerNotMemberErr
	10124,                                    // JSStreamMoveInProgressErr
	10202,                                    // JSClusterServerMemberChangeInflightErr
	10226,                                    // JSStreamReconfigureInProgressErr
}

// refusedConfig wraps in ErrConfigRefused an error of Ensure that waiting cannot cure, by
// errclass's reading, and returns nil for any other.
func refusedConfig(err error) error {
	if !errclass.IsPermanent(err) {
		return nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && slices.Contains(ensureRaces, apiErr.ErrorCode) {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfigRefused, err)
}

// ErrOverlap: a stream could not be made because another holds some of its subjects. The
// recrawl schedules' streams follow TRAWL_RECRAWL_STREAMS, so a crawl made with another
// split has them under other names; no wait changes that.
var ErrOverlap = errors.New("natsx: a stream's subjects are held by another stream: TRAWL_RECRAWL_STREAMS must stay what the crawl was started with (or delete the crawl's CRAWL_RECRAWL* streams, which forgets every recrawl schedule)")

// jsErrSubjectOverlap is JetStream's error code for a stream whose subjects overlap
// another's (nats-server JSStreamSubjectOverlapErr).
const jsErrSubjectOverlap jetstream.ErrorCode = 10065

func overlap(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrSubjectOverlap {
		return fmt.Errorf("%w: %w", ErrOverlap, err)
	}
	return nil
}

// ErrRefused: the NATS server refused the connection's credentials (or their absence),
// or the TLS handshake failed on a certificate, on either side.
var ErrRefused = errors.New("NATS refused the credentials (TRAWL_NATS_URL's user and password, TRAWL_NATS_CREDS, TRAWL_NATS_NKEY, TRAWL_NATS_TLS_*)")

func isRefused(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		(err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")) ||
		tlsx.Refused(err)
}

// ErrNoStorage: the NATS server cannot set aside a stream's byte cap. JetStream reserves
// every file stream's cap out of its storage limit when the stream is made, so the caps
// together must fit that limit, whatever the streams hold.
var ErrNoStorage = errors.New("natsx: NATS cannot reserve the streams' byte caps: the pages stream and the bodies store " +
	"take TRAWL_PAGES_MAX_BYTES each, the docs stream TRAWL_DOCS_MAX_BYTES, the skip log TRAWL_SKIPPED_MAX_BYTES and the dead letters TRAWL_DEAD_MAX_BYTES out of JetStream's file storage limit " +
	"(max_file_store; by default three quarters of the disk that was free when the server started); " +
	"free disk space, raise max_file_store, or lower those settings")

// noStorage wraps the server's refusal to reserve a stream's cap in ErrNoStorage, and
// returns other errors as they are.
func noStorage(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStorageExceeded {
		return fmt.Errorf("%w: %w", ErrNoStorage, err)
	}
	return err
}

// ErrNotClustered: streams of several replicas were asked of a NATS server that is not
// part of a JetStream cluster.
var ErrNotClustered = errors.New("natsx: NATS is not a JetStream cluster")

// Error codes of the JetStream API (nats-server's JSStreamReplicasNotSupportedErr,
// JSInsufficientResourcesErr, JSClusterNoPeersErr, JSStorageResourcesExceededErr).
const (
	errCodeReplicasNotSupported jetstream.ErrorCode = 10074
	errCodeInsufficient         jetstream.ErrorCode = 10023
	errCodeNoPeers              jetstream.ErrorCode = 10005
	errCodeStorageExceeded      jetstream.ErrorCode = 10047
)

// tooFewPeers turns the server's refusal to place a replicated stream into an error that
// names the setting: ErrNotClustered from a single server, which no wait can change, or a
// lack of JetStream peers in a cluster, which a server joining can. Other errors give nil.
func tooFewPeers(err error, replicas int) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return nil
	}
	switch apiErr.ErrorCode {
	case errCodeReplicasNotSupported:
		return fmt.Errorf("%w: TRAWL_STREAM_REPLICAS=%d needs a NATS cluster with JetStream on at least %d servers; "+
			"set it to 1 for a single server: %w", ErrNotClustered, replicas, replicas, err)
	case errCodeInsufficient, errCodeNoPeers:
		if replicas > 1 {
			return fmt.Errorf("TRAWL_STREAM_REPLICAS=%d: fewer JetStream servers are available than replicas "+
				"(or they lack storage): %w", replicas, err)
		}
	}
	return nil
}

func ensureOnce(ctx context.Context, js jetstream.JetStream, o topology.Options, t topology.StageTimings) error {
	// Each request has its own deadline: a clustered server can leave a request that
	// raced another service's for the same stream unanswered, and the next attempt then
	// finds the stream made.
	call := func(fn func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, ensureTimeout)
		defer cancel()
		return fn(ctx)
	}
	// Create first, update only what differs: a create of an existing stream or consumer
	// with the same configuration is answered at once, while updates from every service
	// starting together queue up in a cluster's Raft groups.
	for _, sc := range topology.Streams(o) {
		err := call(func(ctx context.Context) error {
			_, err := js.CreateStream(ctx, sc)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				// It exists, with another configuration (name in use), or with this one
				// on a server that counts the create's storage again before it notices
				// (insufficient resources): update it.
				if _, ierr := js.Stream(ctx, sc.Name); ierr == nil {
					_, err = js.UpdateStream(ctx, sc)
				}
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	for _, c := range topology.Consumers(o, t) {
		err := call(func(ctx context.Context) error {
			_, err := js.CreateConsumer(ctx, c.Stream, c.Config)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				if cons, ierr := js.Consumer(ctx, c.Stream, c.Config.Durable); ierr == nil {
					// Only the owner changes a consumer's settings; another service takes
					// them as they are, or refuses to run with settings that differ.
					if t.As != "" && t.As != c.Owner {
						return differs(c, cons.CachedInfo().Config, t.As)
					}
					_, err = js.UpdateConsumer(ctx, c.Stream, c.Config)
				}
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("consumer %s/%s: %w", c.Stream, c.Config.Durable, err)
		}
	}
	return nil
}

// ErrSettingsDiffer: a service's setting differs from the one a pipeline consumer was
// made with by the service that owns it. Waiting does not change it: the service stops
// with what to change.
var ErrSettingsDiffer = errors.New("natsx: settings differ between services")

// differs compares what service would give the consumer of spec with the consumer as it
// is (have), and names the variable and both values when they differ.
func differs(spec topology.ConsumerSpec, have jetstream.ConsumerConfig, service string) error {
	if have.AckWait == spec.Config.AckWait {
		return nil
	}
	by, value := have.Metadata[topology.MetaSetBy], have.Metadata[topology.MetaValue]
	if by == "" {
		by = "an earlier version"
	}
	if value == "" || have.Metadata[topology.MetaSetting] != spec.Setting {
		value = "? (ack wait " + have.AckWait.String() + ")"
	}
	return fmt.Errorf("%w: the %s has %s=%s, but the consumer was made with %s=%s by the %s, which owns it (ack wait %s, not %s): "+
		"give %s one value in every service", ErrSettingsDiffer, service, spec.Setting, spec.Value, spec.Setting, value, by,
		have.AckWait, spec.Config.AckWait, spec.Setting)
}

// ensureTimeout bounds one request of Ensure.
const ensureTimeout = 5 * time.Second

// PublishBatch publishes msgs and waits until JetStream has stored every one. Callers set a
// Nats-Msg-Id header (nats.MsgIdHdr) on each message derived from the input that produced
// it, so that a republish after a crash is dropped by the stream's duplicate window instead
// of doubling work. An error means some messages may not be stored; the caller must not ack
// its input. Through a handle marked by AtomicBatches, messages bound for one stream go
// as atomic batches (publishAll).
func PublishBatch(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) error {
	_, err := PublishBatchSeqs(ctx, js, msgs)
	return err
}

// PublishBatchSeqs is PublishBatch returning, when every message was stored, each one's
// stream sequence in msgs' order: from its own ack (a republish the duplicate window
// dropped gets the stored original's), or 0 for a message stored in an atomic batch.
func PublishBatchSeqs(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) ([]uint64, error) {
	errs, seqs := publishAll(ctx, js, msgs)
	if err := joinDistinct(errs); err != nil {
		return nil, err
	}
	return seqs, nil
}

// PublishEach publishes msgs as PublishBatch does and returns each one's own error and
// stream sequence, for a caller that settles each message on its own.
func PublishEach(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) ([]error, []uint64) {
	return publishAll(ctx, js, msgs)
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
// Outputs derived from it use this plus a suffix as their Nats-Msg-Id. A bundle's part
// has its bundle's id and its place in the bundle.
func MsgID(m jetstream.Msg) string {
	if id, ok := partID(m); ok {
		return id
	}
	md, err := m.Metadata()
	if err != nil {
		return ""
	}
	return StoredID(md.Stream, md.Sequence.Stream, md.Timestamp)
}

// StoredID is MsgID of the message stream stored at seq at the time stored, for a message
// read from its stream (jetstream.Stream.GetMsg) rather than delivered: whether the stream
// still holds the message an id was taken from.
func StoredID(stream string, seq uint64, stored time.Time) string {
	return stream + ":" + strconv.FormatUint(seq, 10) + ":" + strconv.FormatInt(stored.UnixNano(), 36)
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

// KeyValue creates the key-value bucket, or updates it when it exists with another
// configuration, as Ensure does streams: safe for every service to call at once on a
// cluster. A request left unanswered is sent again until ctx ends.
func KeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return retryUnanswered(ctx, "key-value bucket "+cfg.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		kv, err := js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.UpdateKeyValue(ctx, cfg)
		}
		if err == nil {
			// Reads are answered by the bucket's servers once its stream has a leader.
			if _, err = kv.Get(ctx, "natsx-probe"); errors.Is(err, jetstream.ErrKeyNotFound) {
				err = nil
			}
		}
		return kv, err
	})
}

// ObjectStore is KeyValue for an object store.
func ObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	st, err := retryUnanswered(ctx, "object store "+cfg.Bucket, func(ctx context.Context) (jetstream.ObjectStore, error) {
		st, err := js.CreateObjectStore(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			st, err = js.UpdateObjectStore(ctx, cfg)
		}
		if err == nil {
			_, err = st.Status(ctx)
		}
		return st, err
	})
	return st, noStorage(err)
}

// retryUnanswered calls fn until it succeeds, fails otherwise than by going unanswered, or
// ctx ends. Unanswered: no reply in time, or no responder, which is what a replicated
// stream answers until its Raft group has elected a leader; or "stream not found" from
// the probe after a create or update that succeeded, which a server of a cluster answers
// while the bucket's stream, just created by another service starting at the same time,
// has not reached it yet. While it waits it says so, naming what (the bucket), every few
// seconds.
func retryUnanswered[T any](ctx context.Context, what string, fn func(context.Context) (T, error)) (T, error) {
	waiting := newLogGate(time.Second, 5*time.Second)
	for tries := 1; ; tries++ {
		rctx, cancel := context.WithTimeout(ctx, ensureTimeout)
		v, err := fn(rctx)
		cancel()
		unanswered := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) ||
			errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound)
		if err == nil || !unanswered || ctx.Err() != nil {
			return v, err
		}
		if waiting.open() {
			slog.Warn("waiting for jetstream to answer", "for", what, "tries", tries, "err", err)
		}
		if !ctxsleep.Sleep(ctx, 50*time.Millisecond) {
			return v, err
		}
	}
}

// logGate spaces the log lines of a wait: the first once first has passed, then one per
// every.
type logGate struct {
	next  time.Time
	every time.Duration
}

func newLogGate(first, every time.Duration) logGate {
	return logGate{next: time.Now().Add(first), every: every}
}

func (g *logGate) open() bool {
	now := time.Now()
	if now.Before(g.next) {
		return false
	}
	g.next = now.Add(g.every)
	return true
}
