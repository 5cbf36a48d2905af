package natsx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/topology"
)

// DeadLetter parks the messages a consume loop gives up on in CRAWL_DEAD
// (topology.StreamDead), so that giving up loses nothing: a message failing with a
// permanent error, and one still failing with a temporary error after After deliveries.
// Each is kept there with its data, its headers and why it was given up, until an operator
// replays it to its subject or drops it (Replay, DropDead; trawlctl dead). A message that
// cannot be parked is not given up: it is retried, unless CRAWL_DEAD is full and the error
// permanent (then it is terminated as without a DeadLetter, logged).
type DeadLetter struct {
	JS jetstream.JetStream
	// After is the delivery count from which a message still failing with a temporary
	// error is parked (TRAWL_DEAD_LETTER_AFTER).
	After int
	// Settle is how long a parked message's terminate waits (durability.Level.Window):
	// until then the letter may be lost to an OS crash while the terminate survives it.
	// Kept, if set, is asked then whether NATS stayed in reach since the letter was
	// stored; if not, the message is handed back instead, to be parked again (same id).
	Settle time.Duration
	Kept   func(since time.Time) bool

	consumer string          // the loop's consumer (bindDead)
	pending  *sync.WaitGroup // terminates waiting out Settle (bindDead)
}

// bindDead gives the loop on cons its own DeadLetter, naming cons.
func (o *ConsumeOptions) bindDead(cons jetstream.Consumer) {
	if o.Dead != nil {
		d := *o.Dead
		_, d.consumer = consumerName(cons)
		d.pending = new(sync.WaitGroup)
		o.Dead = &d
	}
}

// settled terminates m, parked at parked, once Settle has passed and Kept agrees, or
// hands it back. It returns at once; wait returns when every such terminate is sent.
func (d *DeadLetter) settled(m jetstream.Msg, parked time.Time) {
	if d.Settle <= 0 {
		term(m, nil)
		return
	}
	d.pending.Add(1)
	time.AfterFunc(time.Until(parked.Add(d.Settle)), func() {
		defer d.pending.Done()
		if d.Kept != nil && !d.Kept(parked) {
			_ = m.Nak()
			return
		}
		term(m, nil)
	})
}

// wait returns once the terminates settled scheduled are sent: at most Settle.
func (d *DeadLetter) wait() {
	if d != nil && d.pending != nil {
		d.pending.Wait()
	}
}

// Headers of a dead letter. Besides them it keeps the message's own headers but those
// the server reads (Nats-*), its own Nats-Msg-Id under DeadMsgIDHdr.
const (
	DeadStreamHdr     = "Trawl-Dead-Stream"     // the stream it was taken from
	DeadSeqHdr        = "Trawl-Dead-Seq"        // its sequence there
	DeadSubjectHdr    = "Trawl-Dead-Subject"    // its subject, where Replay sends it
	DeadConsumerHdr   = "Trawl-Dead-Consumer"   // the consumer that gave up on it
	DeadDeliveriesHdr = "Trawl-Dead-Deliveries" // deliveries when it was given up
	DeadReasonHdr     = "Trawl-Dead-Reason"     // DeadPermanent or DeadExhausted
	DeadErrorHdr      = "Trawl-Dead-Error"      // the last error, cut to deadErrorMax octets
	DeadMsgIDHdr      = "Trawl-Dead-Msg-Id"     // its Nats-Msg-Id, restored by Replay
	// ReplayOfHdr marks a message Replay sent back: the id of the dead letter (StoredID of
	// CRAWL_DEAD). A stage whose redelivery rule rests on state kept under the input's
	// stream identity (dedup's memo) reads it: the replay has a new one.
	ReplayOfHdr = "Trawl-Replay-Of"
	// ReplayForHdr names the consumer a replay is for, the one that gave the message up.
	// On a stream with several consumers (crawl.pages: the parser, the archiver, taps)
	// every one is sent the replay; the others, which handled the message the first time,
	// ack it unhandled (the consume loops do; a tap should too).
	ReplayForHdr = "Trawl-Replay-For"
)

// Reasons a message is given up, the values of DeadReasonHdr and ConsumeOptions.OnTerm.
const (
	DeadPermanent = "permanent"
	DeadExhausted = "exhausted"
)

// The dead letter's own headers stay well inside topology.ExtraHeaderRoom, the room every
// publisher leaves besides its payload, so a message that fit its stream fits CRAWL_DEAD.
const deadErrorMax = 512

// parkTimeout bounds the publish of one dead letter.
const parkTimeout = 5 * time.Second

// Park stores m in CRAWL_DEAD with why it was given up (reason: DeadPermanent or
// DeadExhausted), and returns once the server has it. The caller terminates m after.
// Its own timeout bounds it, whatever ctx: a loop's context ending (a drain's) must not
// cost a letter.
func (d *DeadLetter) Park(ctx context.Context, m jetstream.Msg, cause error, reason string) error {
	md, err := m.Metadata()
	if err != nil {
		return fmt.Errorf("natsx: dead letter: %w", err)
	}
	dm := nats.NewMsg(topology.DeadSubject(md.Stream))
	dm.Data = m.Data()
	for k, vs := range m.Headers() {
		if !strings.HasPrefix(k, "Nats-") && !strings.HasPrefix(k, "Trawl-Dead-") {
			dm.Header[k] = vs
		}
	}
	if id := m.Headers().Get(nats.MsgIdHdr); id != "" {
		dm.Header.Set(DeadMsgIDHdr, id)
	}
	dm.Header.Set(DeadStreamHdr, md.Stream)
	dm.Header.Set(DeadSeqHdr, strconv.FormatUint(md.Sequence.Stream, 10))
	dm.Header.Set(DeadSubjectHdr, m.Subject())
	dm.Header.Set(DeadConsumerHdr, d.consumer)
	dm.Header.Set(DeadDeliveriesHdr, strconv.FormatUint(md.NumDelivered, 10))
	dm.Header.Set(DeadReasonHdr, reason)
	// A header value is one line.
	dm.Header.Set(DeadErrorHdr, strings.Join(strings.Fields(truncate(cause.Error(), deadErrorMax)), " "))
	// Parked again after a lost ack or term, it is the same dead letter.
	dm.Header.Set(nats.MsgIdHdr, "dead:"+MsgID(m))
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), parkTimeout)
	defer cancel()
	if _, err := d.JS.PublishMsg(pctx, dm); err != nil {
		return fmt.Errorf("natsx: park %s in %s: %w", MsgID(m), topology.StreamDead, err)
	}
	return nil
}

// Dead is a dead letter as read back from CRAWL_DEAD.
type Dead struct {
	Seq        uint64    `json:"seq"`    // its sequence in CRAWL_DEAD
	Parked     time.Time `json:"parked"` // when it was parked
	Stream     string    `json:"stream"`
	StreamSeq  uint64    `json:"stream_seq"`
	Subject    string    `json:"subject"`
	Consumer   string    `json:"consumer"`
	Deliveries uint64    `json:"deliveries"`
	Reason     string    `json:"reason"`
	Error      string    `json:"error"`
	Size       int       `json:"size"` // its data's octets
}

// ReadDead reads a dead letter's record from a message of CRAWL_DEAD.
func ReadDead(m *jetstream.RawStreamMsg) Dead {
	h := m.Header
	seq, _ := strconv.ParseUint(h.Get(DeadSeqHdr), 10, 64)
	n, _ := strconv.ParseUint(h.Get(DeadDeliveriesHdr), 10, 64)
	return Dead{
		Seq: m.Sequence, Parked: m.Time, Stream: h.Get(DeadStreamHdr), StreamSeq: seq,
		Subject: h.Get(DeadSubjectHdr), Consumer: h.Get(DeadConsumerHdr), Deliveries: n,
		Reason: h.Get(DeadReasonHdr), Error: h.Get(DeadErrorHdr), Size: len(m.Data),
	}
}

// ErrReplayTooSoon: the dead letter's Nats-Msg-Id is still in its stream's duplicate
// window (the message was given up within it), so a replay now would be dropped as a
// copy of the message itself. It stays in CRAWL_DEAD; replay it once the window passed.
var ErrReplayTooSoon = errors.New("natsx: the message's id is still in its stream's duplicate window")

// Replay sends the dead letter at seq of CRAWL_DEAD back to its subject, as it was (its
// data, headers and Nats-Msg-Id, which the stages read) marked with ReplayOfHdr, and
// deletes it from CRAWL_DEAD once its stream stored it. A message that had no Nats-Msg-Id
// gets one derived from the dead letter, so a replay cut between its two steps and run
// again stores it once while the duplicate window lasts; later, a second copy, which each
// stage takes as a redelivery.
func Replay(ctx context.Context, js jetstream.JetStream, seq uint64) error {
	dead, err := js.Stream(ctx, topology.StreamDead)
	if err != nil {
		return fmt.Errorf("natsx: stream %s: %w", topology.StreamDead, err)
	}
	raw, err := dead.GetMsg(ctx, seq)
	if err != nil {
		return fmt.Errorf("natsx: dead letter %d: %w", seq, err)
	}
	d := ReadDead(raw)
	if d.Subject == "" {
		return fmt.Errorf("natsx: dead letter %d names no subject", seq)
	}
	self := StoredID(topology.StreamDead, seq, raw.Time)
	m := nats.NewMsg(d.Subject)
	m.Data = raw.Data
	for k, vs := range raw.Header {
		if !strings.HasPrefix(k, "Nats-") && !strings.HasPrefix(k, "Trawl-Dead-") {
			m.Header[k] = vs
		}
	}
	m.Header.Set(ReplayOfHdr, self)
	if c := raw.Header.Get(DeadConsumerHdr); c != "" && c != "?" { // "?": a loop that did not know its name
		m.Header.Set(ReplayForHdr, c)
	}
	id := raw.Header.Get(DeadMsgIDHdr)
	if id == "" {
		id = "replay:" + self
	}
	m.Header.Set(nats.MsgIdHdr, id)
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("natsx: replay dead letter %d to %s: %w", seq, d.Subject, err)
	}
	if ack.Duplicate {
		// The stream holds a message with this id within its duplicate window, and the
		// pub-ack names its sequence. The message's own copy there means the replay was
		// dropped as a copy of it: the letter stays until the server forgets the id. Its
		// park time cannot tell: the server forgets an id on a timer of its own, which
		// may run late, and on its own clock. Another sequence is a later copy of the
		// message (this letter's replay, its delete lost; or its publisher's republish),
		// which carries the work: the letter may go.
		own := ack.Stream == d.Stream && d.StreamSeq != 0 && ack.Sequence == d.StreamSeq
		later := id == "replay:"+self || ack.Stream == d.Stream && d.StreamSeq != 0 && ack.Sequence != d.StreamSeq
		if !later {
			orig, err := js.Stream(ctx, ack.Stream)
			if err != nil {
				return fmt.Errorf("natsx: stream %s: %w", ack.Stream, err)
			}
			if !own {
				// A letter that does not name its sequence there, or a subject another
				// stream now holds: only a stored replay of this letter lets it go.
				stored, gerr := orig.GetMsg(ctx, ack.Sequence)
				later = gerr == nil && stored.Header.Get(ReplayOfHdr) == self
			}
			if !later {
				// The message was stored before it was parked, so its id's window ends
				// by the letter's time plus the window, give or take the server's timer.
				return fmt.Errorf("%w: dead letter %d (%s %s, held at %s sequence %d); replay it after %s", ErrReplayTooSoon,
					seq, nats.MsgIdHdr, id, ack.Stream, ack.Sequence, raw.Time.Add(orig.CachedInfo().Config.Duplicates).Format(time.RFC3339))
			}
		}
	}
	return DropDead(ctx, js, seq)
}

// DropDead deletes the dead letter at seq: the operator's decision that it is not work.
func DropDead(ctx context.Context, js jetstream.JetStream, seq uint64) error {
	dead, err := js.Stream(ctx, topology.StreamDead)
	if err != nil {
		return fmt.Errorf("natsx: stream %s: %w", topology.StreamDead, err)
	}
	// A sequence already gone is done; the delete's own error would not say so (the
	// client turns the server's "not found" into text).
	if _, err := dead.GetMsg(ctx, seq); errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err := dead.DeleteMsg(ctx, seq); err != nil {
		return fmt.Errorf("natsx: delete dead letter %d: %w", seq, err)
	}
	return nil
}

// DeadScan configures ScanDead.
type DeadScan struct {
	// Stream limits the scan to the letters parked from one stream ("": every stream's).
	Stream string
	// HeadersOnly leaves the letters' data on the server; their size is then in the
	// header nats.MsgSize the server adds.
	HeadersOnly bool
	// Batch is how many letters one fetch holds (default 256). A letter is as large as a
	// message of its stream, so a scan that reads the data asks for fewer.
	Batch int
	// Idle bounds the wait for a letter the consumer still counts as pending (default
	// 10s): a longer silence is a server gone.
	Idle time.Duration
}

// ScanDead calls each with every dead letter (of o.Stream, if set) stored when the scan
// began, oldest first: letters parked since are not read. It reads through an ordered
// consumer without acks; CRAWL_DEAD keeps its letters by limits, so the consumer holds
// nothing, and the server removes it once idle. A missing CRAWL_DEAD is
// jetstream.ErrStreamNotFound; an error of each ends the scan with it.
func ScanDead(ctx context.Context, js jetstream.JetStream, o DeadScan, each func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	filter := topology.DeadFilter
	if o.Stream != "" {
		filter = topology.DeadSubject(o.Stream)
	}
	if o.Batch <= 0 {
		o.Batch = 256
	}
	if o.Idle <= 0 {
		o.Idle = 10 * time.Second
	}
	st, err := js.Stream(ctx, topology.StreamDead)
	if err != nil {
		return fmt.Errorf("natsx: stream %s: %w", topology.StreamDead, err)
	}
	if st.CachedInfo().State.Msgs == 0 {
		return nil
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("natsx: stream %s: %w", topology.StreamDead, err)
	}
	var count uint64
	for _, n := range info.State.Subjects {
		count += n
	}
	if count == 0 {
		return nil
	}
	last := info.State.LastSeq
	cons, err := js.OrderedConsumer(ctx, topology.StreamDead, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy,
		HeadersOnly: o.HeadersOnly, InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("natsx: scan %s: %w", topology.StreamDead, err)
	}
	var seen, read uint64
	for {
		fctx, cancel := context.WithTimeout(ctx, o.Idle)
		batch, err := cons.Fetch(o.Batch, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			return fmt.Errorf("natsx: scan %s: %w", topology.StreamDead, err)
		}
		got, done := 0, false
		for m := range batch.Messages() {
			got++
			read++
			md, err := m.Metadata()
			if err != nil {
				cancel()
				return fmt.Errorf("natsx: scan %s: %w", topology.StreamDead, err)
			}
			if err := each(m, md); err != nil {
				cancel()
				return err
			}
			seen = md.Sequence.Stream
			if md.NumPending == 0 || seen >= last || read >= count {
				// The rest of the pull is not waited for: the consumer is left.
				done = true
				break
			}
		}
		berr := batch.Error()
		cancel()
		switch {
		case done:
			return nil
		case berr != nil && !errors.Is(berr, context.DeadlineExceeded) && !errors.Is(berr, nats.ErrTimeout):
			return fmt.Errorf("natsx: scan %s: %w", topology.StreamDead, berr)
		case got > 0:
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("natsx: scan %s: %d of %d read: %w", topology.StreamDead, read, count, err)
		}
		// Nothing came: the letters still counted may have been replayed or dropped since.
		ci, err := cons.Info(ctx)
		if err == nil && ci.NumPending == 0 {
			return nil
		}
		return fmt.Errorf("natsx: scan %s: nothing for %s after sequence %d of %d", topology.StreamDead, o.Idle, seen, last)
	}
}
