// Package tap prints the messages of a crawl subject as JSON lines without taking them
// away from the crawler.
//
// What can be tapped depends on the stream's retention (shared/topology):
//
//   - limits streams (CRAWL_PAGES, CRAWL_DOCS) and the interest stream (CRAWL_FETCHED)
//     accept extra consumers: an ordered, ephemeral consumer by default, or a durable
//     pull consumer with explicit acks (-durable) so that a later run resumes where the
//     last one stopped. A durable tap on CRAWL_FETCHED holds outcomes in the stream until
//     it acks them (up to the stream's 24 h max age): delete it when done.
//   - work-queue streams (CRAWL_DISCOVERED, CRAWL_FRONTIER, CRAWL_FETCH) refuse a second
//     consumer overlapping the pipeline's own, and any consumer there would take work
//     from the services. They can only be peeked at: the messages waiting now, read by
//     sequence with a direct stream get, which changes nothing.
package tap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// Errors a caller may want to tell apart (all are the operator's to fix, not transient).
var (
	ErrNoStream   = errors.New("no stream holds the subject")
	ErrWorkQueue  = errors.New("work-queue stream")
	ErrDurable    = errors.New("unusable durable name")
	ErrManyStream = errors.New("subject spans several streams")
)

// Options say what to tap.
type Options struct {
	Subject   string
	FromStart bool   // DeliverAll instead of DeliverNew; on a work queue: peek at what waits
	Durable   string // durable consumer name; "" = ephemeral ordered consumer
	Count     int    // stop after this many lines (pages of a bundle one each); 0 = until ctx ends
	Body      bool   // include crawl.pages bodies as strings
	// Register makes the durable consumer a registered indexer of crawl.docs
	// (topology.RegisteredMeta): the crawl holds rather than drop what it has not read.
	Register bool
	// AckWait of a newly created durable tap consumer (default 30s).
	AckWait time.Duration
}

// Tapper runs taps. Info gets one human line when the tap is ready (the moment after
// which published messages are seen) and other notes; Warn gets messages that could not
// be printed.
type Tapper struct {
	JS   jetstream.JetStream
	Out  io.Writer
	Info func(string)
	Warn func(string)
}

func (t *Tapper) info(s string) {
	if t.Info != nil {
		t.Info(s)
	}
}

func (t *Tapper) warn(s string) {
	if t.Warn != nil {
		t.Warn(s)
	}
}

// Run taps until ctx ends or o.Count lines were printed (a line per page of a bundle),
// and returns how many were.
// The end of ctx is a normal stop, not an error.
func (t *Tapper) Run(ctx context.Context, o Options) (int, error) {
	stream, err := t.streamOf(ctx, o.Subject)
	if err != nil {
		return 0, err
	}
	s, err := t.JS.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("tap: stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	if info.Config.Retention == jetstream.WorkQueuePolicy {
		if o.Durable != "" || !o.FromStart {
			return 0, fmt.Errorf("%w: %s is on %s, and a consumer there would take messages from the crawler (and JetStream refuses one beside the pipeline's); use -from-start without -durable to peek at the %d messages waiting now without consuming them",
				ErrWorkQueue, o.Subject, stream, info.State.Msgs)
		}
		return t.peek(ctx, s, info, o)
	}
	if o.Register && (o.Durable == "" || stream != topology.StreamDocs) {
		return 0, fmt.Errorf("%w: -register needs -durable NAME on %s (a registered indexer is a durable consumer of %s)", ErrDurable, topology.SubjectDocs, topology.StreamDocs)
	}
	// On a limits stream of this one subject the sequence has no holes but at its front, so
	// a jump is what the limits dropped before the tap read it.
	var gaps *natsx.SeqGaps
	if info.Config.Retention == jetstream.LimitsPolicy && len(info.Config.Subjects) == 1 && info.Config.Subjects[0] == o.Subject {
		gaps = &natsx.SeqGaps{}
	}
	if o.Durable != "" {
		return t.durable(ctx, stream, o, gaps)
	}
	return t.ordered(ctx, stream, o, gaps)
}

// missed warns when the message at stream sequence seq comes after a gap.
func (t *Tapper) missed(gaps *natsx.SeqGaps, stream string, m jetstream.Msg) {
	if gaps == nil {
		return
	}
	md, err := m.Metadata()
	if err != nil {
		return
	}
	if n := gaps.Next(md.Sequence.Stream); n > 0 {
		t.warn(fmt.Sprintf("missed %d messages (stream sequences %d..%d): %s dropped them under its limits before this tap read them; a registered durable tap (-durable NAME -register) makes the crawl wait instead",
			n, md.Sequence.Stream-n, md.Sequence.Stream-1, stream))
	}
}

func (t *Tapper) streamOf(ctx context.Context, subject string) (string, error) {
	var names []string
	l := t.JS.StreamNames(ctx, jetstream.WithStreamListSubject(subject))
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		return "", fmt.Errorf("tap: look up stream of %s: %w", subject, err)
	}
	switch len(names) {
	case 0:
		return "", fmt.Errorf("%w %q (crawl subjects: %s, %s, %s, crawl.fetched.<shard>, crawl.frontier.<shard>, crawl.fetch.<shard>)",
			ErrNoStream, subject, topology.SubjectDocs, topology.SubjectPages, topology.SubjectDiscovered)
	case 1:
		return names[0], nil
	}
	return "", fmt.Errorf("%w: %s matches %s; tap one of them", ErrManyStream, subject, strings.Join(names, ", "))
}

func deliver(fromStart bool) (jetstream.DeliverPolicy, string) {
	if fromStart {
		return jetstream.DeliverAllPolicy, "from the start of the stream"
	}
	return jetstream.DeliverNewPolicy, "from now"
}

func (t *Tapper) ordered(ctx context.Context, stream string, o Options, gaps *natsx.SeqGaps) (int, error) {
	policy, from := deliver(o.FromStart)
	cons, err := t.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{o.Subject},
		DeliverPolicy:  policy,
	})
	if err != nil {
		return 0, fmt.Errorf("tap: consumer on %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return 0, fmt.Errorf("tap: consume %s: %w", stream, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	t.info(fmt.Sprintf("tapping %s on %s %s (ephemeral consumer)", o.Subject, stream, from))
	n := 0
	for o.Count <= 0 || n < o.Count {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return n, nil
			}
			return n, fmt.Errorf("tap: next: %w", err)
		}
		t.missed(gaps, stream, m)
		lines, _, err := t.print(m.Subject(), m.Headers(), m.Data(), o, left(o, n))
		if err != nil {
			return n, err
		}
		n += lines
	}
	return n, nil
}

// left is how many lines -n still wants (0: no bound).
func left(o Options, n int) int {
	if o.Count <= 0 {
		return 0
	}
	return o.Count - n
}

// pipelineName matches the durable names the services use (shared/topology): taking
// messages through one of them would steal them from a stage.
var pipelineName = regexp.MustCompile(`^(` + regexp.QuoteMeta(topology.ConsumerDedup) + `|` +
	regexp.QuoteMeta(topology.ConsumerFetcher) + `|` + regexp.QuoteMeta(topology.ConsumerParser) +
	`|scheduler-\d+(-outcomes)?)$`)

func (t *Tapper) durable(ctx context.Context, stream string, o Options, gaps *natsx.SeqGaps) (int, error) {
	if pipelineName.MatchString(o.Durable) {
		return 0, fmt.Errorf("%w: %q is a pipeline stage's consumer; a tap through it would take that stage's messages", ErrDurable, o.Durable)
	}
	policy, from := deliver(o.FromStart)
	cons, err := t.JS.Consumer(ctx, stream, o.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		ackWait := o.AckWait
		if ackWait <= 0 {
			ackWait = 30 * time.Second
		}
		cc := jetstream.ConsumerConfig{
			Durable:       o.Durable,
			Description:   "trawlctl tap",
			FilterSubject: o.Subject,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       ackWait,
			DeliverPolicy: policy,
			MaxAckPending: 1000,
		}
		if o.Register {
			cc = topology.RegisteredDocsConsumer(o.Durable, "trawlctl tap", ackWait, 1000)
			cc.DeliverPolicy = policy
		}
		cons, err = t.JS.CreateConsumer(ctx, stream, cc)
		if err != nil {
			return 0, fmt.Errorf("tap: create consumer %s on %s: %w", o.Durable, stream, err)
		}
		t.info(fmt.Sprintf("tapping %s on %s %s (durable consumer %s created%s; a later run with -durable %s resumes here)", o.Subject, stream, from, o.Durable, registeredNote(o.Register), o.Durable))
	case err != nil:
		return 0, fmt.Errorf("tap: consumer %s on %s: %w", o.Durable, stream, err)
	default:
		ci := cons.CachedInfo()
		if ci.Config.FilterSubject != o.Subject || len(ci.Config.FilterSubjects) > 0 || ci.Config.AckPolicy != jetstream.AckExplicitPolicy {
			return 0, fmt.Errorf("%w: consumer %s on %s exists with filter %q; choose another name or delete it", ErrDurable, o.Durable, stream, ci.Config.FilterSubject)
		}
		if o.Register && !topology.Registered(ci.Config) {
			cc := ci.Config
			cc.Metadata = topology.RegisteredDocsConsumer(o.Durable, "", 0, 0).Metadata
			if cons, err = t.JS.UpdateConsumer(ctx, stream, cc); err != nil {
				return 0, fmt.Errorf("tap: register consumer %s on %s: %w", o.Durable, stream, err)
			}
		}
		t.info(fmt.Sprintf("tapping %s on %s, resuming durable consumer %s%s (%d messages pending)", o.Subject, stream, o.Durable, registeredNote(topology.Registered(cons.CachedInfo().Config)), ci.NumPending))
		if gaps != nil {
			gaps.Resume(ci.AckFloor.Stream)
		}
	}

	n := 0
	for ctx.Err() == nil && (o.Count <= 0 || n < o.Count) {
		batch := 100
		if o.Count > 0 {
			batch = min(batch, o.Count-n)
		}
		// Nothing is pulled beyond what -n still wants, so what this run does not print
		// stays for the next. The pull ends when the server ends it (natsx.PullMaxWait), not
		// at a deadline of the client's: what the server delivers after ctx ends is handed
		// back below rather than left to wait out AckWait.
		mb, err := cons.Fetch(batch, jetstream.FetchMaxWait(natsx.PullMaxWait))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return n, fmt.Errorf("tap: fetch from %s: %w", o.Durable, err)
		}
		// Each message is acked once the next is printed, and the pull's last one is
		// confirmed: acks are processed in order, so that confirms them all, and the next
		// run starts exactly after the last message this one printed. An ack confirmed per
		// message would cost a round trip each.
		var (
			failed  error
			printed jetstream.Msg
		)
		for m := range mb.Messages() {
			if ctx.Err() != nil || failed != nil || o.Count > 0 && n >= o.Count {
				// Handed back at once rather than after AckWait, for the next run.
				_ = m.Nak()
				continue
			}
			t.missed(gaps, stream, m)
			lines, whole, err := t.print(m.Subject(), m.Headers(), m.Data(), o, left(o, n))
			n += lines
			if err != nil {
				_ = m.Nak()
				failed = err
				continue
			}
			if !whole {
				// -n ended inside a bundle: a bundle can only be acked whole, so it is
				// handed back and the next run prints it again from its first page.
				_ = m.Nak()
				continue
			}
			if printed != nil {
				if err := printed.Ack(); err != nil {
					failed = fmt.Errorf("tap: ack: %w", err)
				}
			}
			printed = m
		}
		if printed != nil {
			actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err := printed.DoubleAck(actx)
			acancel()
			if err != nil {
				failed = errors.Join(failed, fmt.Errorf("tap: ack: %w", err))
			}
		}
		if failed != nil {
			return n, failed
		}
		if err := natsx.PullError(mb); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return n, fmt.Errorf("tap: fetch from %s: %w", o.Durable, err)
		}
	}
	return n, nil
}

func registeredNote(registered bool) string {
	if registered {
		return ", registered: the crawl waits for it; delete it when done"
	}
	return ""
}

func (t *Tapper) peek(ctx context.Context, s jetstream.Stream, info *jetstream.StreamInfo, o Options) (int, error) {
	t.info(fmt.Sprintf("%s is a work queue: printing the %d messages waiting now without consuming them (a work queue cannot be followed)", info.Config.Name, info.State.Msgs))
	n := 0
	seq := info.State.FirstSeq
	last := info.State.LastSeq
	for ctx.Err() == nil && (o.Count <= 0 || n < o.Count) && seq <= last && seq > 0 {
		// "Next message for subject at or after seq" skips the gaps that acked (deleted)
		// work leaves, one request per message.
		raw, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(o.Subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return n, fmt.Errorf("tap: get %s #%d: %w", info.Config.Name, seq, err)
		}
		if raw.Sequence > last {
			break
		}
		lines, _, err := t.print(raw.Subject, raw.Header, raw.Data, o, left(o, n))
		if err != nil {
			return n, err
		}
		n += lines
		seq = raw.Sequence + 1
	}
	return n, nil
}

// pageLine is a crawl.pages message as printed: the metadata plus the body's length.
type pageLine struct {
	crawlmsg.PageMeta
	BodyLen int     `json:"body_len"`
	Body    *string `json:"body,omitempty"`
}

// print writes one JSON line, one per page of a bundle, no more than most (0: all), and
// says how many it wrote and whether they were all of the message's. A message that is
// not what its subject promises is reported on Warn and skipped (counted written), so
// stdout stays valid JSON lines.
func (t *Tapper) print(subject string, h nats.Header, data []byte, o Options, most int) (int, bool, error) {
	if crawlmsg.BundleParts(h) > 0 {
		parts, err := crawlmsg.Unbundle(h, data)
		if err != nil {
			t.warn(fmt.Sprintf("skipping a message on %s: %v", subject, err))
			return 1, true, nil
		}
		n := 0
		for _, p := range parts {
			if most > 0 && n == most {
				return n, false, nil
			}
			if err := t.printOne(subject, p.Header, p.Data, o); err != nil {
				return n, false, err
			}
			n++
		}
		return n, true, nil
	}
	return 1, true, t.printOne(subject, h, data, o)
}

// printOne writes one JSON line.
func (t *Tapper) printOne(subject string, h nats.Header, data []byte, o Options) error {
	var line []byte
	if h.Get(crawlmsg.MetaHeader) != "" || subject == topology.SubjectPages {
		p, err := crawlmsg.DecodePage(h, data)
		if err != nil {
			t.warn(fmt.Sprintf("skipping a message on %s: %v", subject, err))
			return nil
		}
		pl := pageLine{PageMeta: p.Meta, BodyLen: len(p.Body)}
		if o.Body {
			b := string(p.Body)
			pl.Body = &b
		}
		if line, err = json.Marshal(pl); err != nil {
			return fmt.Errorf("tap: encode page: %w", err)
		}
	} else {
		// Work messages are compact already; compacting keeps the one-line promise for any.
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil {
			t.warn(fmt.Sprintf("skipping a message on %s: not JSON (%d bytes): %v", subject, len(data), err))
			return nil
		}
		line = buf.Bytes()
	}
	line = append(line, '\n')
	if _, err := t.Out.Write(line); err != nil {
		return fmt.Errorf("tap: write: %w", err)
	}
	return nil
}
