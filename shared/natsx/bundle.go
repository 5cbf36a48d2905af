package natsx

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
)

// The consume loops hand each part of a bundle (crawlmsg.Bundle) to their handler as a
// message of its own, and settle the bundle once every part is settled.

// bundled is a delivered bundle whose parts are being handled.
type bundled struct {
	jetstream.Msg
	// acked, if set, hears of the parts acked (not given up) once the bundle's ack is
	// sent: ConsumeOptions.Acked.
	acked func(parts []jetstream.Msg)

	mu   sync.Mutex
	left int             // parts not settled yet
	back bool            // a part was handed back, and the bundle with it
	done []jetstream.Msg // the parts acked
}

// partMsg is one part of a delivered bundle, handled as a message of its own: its
// headers and data are the part's; its metadata, subject and reply the bundle's. Settling
// it settles the bundle once every part is settled.
type partMsg struct {
	b       *bundled
	i       int
	hdr     nats.Header
	data    []byte
	settled bool // under b.mu
}

func (p *partMsg) Data() []byte                              { return p.data }
func (p *partMsg) Headers() nats.Header                      { return p.hdr }
func (p *partMsg) Metadata() (*jetstream.MsgMetadata, error) { return p.b.Metadata() }
func (p *partMsg) Subject() string                           { return p.b.Subject() }
func (p *partMsg) Reply() string                             { return p.b.Reply() }
func (p *partMsg) InProgress() error                         { return p.b.InProgress() }

// Ack settles the part as done; the bundle is acked with its last part.
func (p *partMsg) Ack() error { return p.settle(true, p.b.Msg.Ack) }

// DoubleAck is Ack, the bundle's ack confirmed by the server.
func (p *partMsg) DoubleAck(ctx context.Context) error {
	return p.settle(true, func() error { return p.b.Msg.DoubleAck(ctx) })
}

// Term and TermWithReason settle the part as given up (parked, or dropped as poison); the
// other parts still decide the bundle's fate.
func (p *partMsg) Term() error                 { return p.settle(false, p.b.Msg.Ack) }
func (p *partMsg) TermWithReason(string) error { return p.settle(false, p.b.Msg.Ack) }
func (p *partMsg) Nak() error                  { return p.handBack(p.b.Msg.Nak) }
func (p *partMsg) NakWithDelay(d time.Duration) error {
	return p.handBack(func() error { return p.b.Msg.NakWithDelay(d) })
}

// settle settles the part, acked or given up, and with the last part sends the bundle's
// ack (ack) and tells the acked hook.
func (p *partMsg) settle(acked bool, ack func() error) error {
	last, _, err := p.mark(acked, false)
	if err != nil || !last {
		return err
	}
	if err := ack(); err != nil {
		return err
	}
	if b := p.b; b.acked != nil && len(b.done) > 0 {
		b.acked(b.done)
	}
	return nil
}

// handBack naks the bundle with its first part nak'ed: every part comes back with it, so
// a stage's handling of a part must hold against being done twice.
func (p *partMsg) handBack(nak func() error) error {
	_, first, err := p.mark(false, true)
	if err != nil || !first {
		return err
	}
	return nak()
}

// mark records the part settled (acked, or handed back) and says whether it was the
// bundle's last to settle with none handed back, and whether it hands the bundle back
// first.
func (p *partMsg) mark(acked, back bool) (last, firstBack bool, err error) {
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.settled {
		return false, false, jetstream.ErrMsgAlreadyAckd
	}
	p.settled = true
	b.left--
	if acked {
		b.done = append(b.done, p)
	}
	if back {
		firstBack, b.back = !b.back, true
	}
	return b.left == 0 && !b.back, firstBack, nil
}

// whole leaves out the parts of bundles: their bundle tells the acked hook of them.
func whole(msgs []jetstream.Msg) []jetstream.Msg {
	return slices.DeleteFunc(msgs, func(m jetstream.Msg) bool {
		_, part := m.(*partMsg)
		return part
	})
}

// partID is MsgID of a part: its bundle's, and its place in it.
func partID(m jetstream.Msg) (string, bool) {
	p, ok := m.(*partMsg)
	if !ok {
		return "", false
	}
	id := MsgID(p.b.Msg)
	if id == "" {
		return "", true
	}
	return id + "/" + strconv.Itoa(p.i), true
}

// unbundle replaces each bundle of msgs by its parts, whose bundle tells acked of those
// acked once its own ack is sent. A bundle that cannot be read is returned in bad, to be
// settled as poison whole.
func unbundle(msgs []jetstream.Msg, acked func([]jetstream.Msg)) (out []jetstream.Msg, bad []jetstream.Msg, errs []error) {
	found := false
	for _, m := range msgs {
		if m.Headers().Get(crawlmsg.BundleHdr) != "" {
			found = true
			break
		}
	}
	if !found {
		return msgs, nil, nil
	}
	out = make([]jetstream.Msg, 0, len(msgs))
	for _, m := range msgs {
		if m.Headers().Get(crawlmsg.BundleHdr) == "" {
			out = append(out, m)
			continue
		}
		parts, err := crawlmsg.Unbundle(m.Headers(), m.Data())
		if err != nil {
			bad, errs = append(bad, m), append(errs, Permanent(err))
			continue
		}
		b := &bundled{Msg: m, acked: acked, left: len(parts)}
		for i, p := range parts {
			out = append(out, &partMsg{b: b, i: i, hdr: p.Header, data: p.Data})
		}
	}
	return out, bad, errs
}
