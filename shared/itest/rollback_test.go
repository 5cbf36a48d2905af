package itest

import (
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
)

// TestRollbackStanding: a message the stream holds is Held, one removed within the stream
// is Removed, one beyond its last or with another message at its sequence is Lost, and one
// stored before the last Refresh is found, not taken for lost. Only Refresh asks NATS for
// the stream's state: a walk down a log whose tail NATS lost must reach the sequences NATS
// gave again without a request per lost record.
func TestRollbackStanding(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t)
	nc, js, str := rollbackStream(t, "RB", "rb")
	// JetStream API requests are plain NATS messages: count the stream state reads.
	var infos atomic.Int64
	sub, err := nc.Subscribe("$JS.API.STREAM.INFO.RB", func(*nats.Msg) { infos.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	publish := func(id string) uint64 {
		t.Helper()
		ack, err := js.PublishMsg(ctx, natsx.NewMsg("rb", id, []byte(id)))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	for i := 1; i <= 3; i++ {
		publish(fmt.Sprintf("m%d", i))
	}
	if err := str.DeleteMsg(ctx, 2); err != nil {
		t.Fatal(err)
	}
	rb := natsx.NewRollback(js, "RB")
	is := func(id string) func(*jetstream.RawStreamMsg) bool {
		return func(m *jetstream.RawStreamMsg) bool { return m.Header.Get(nats.MsgIdHdr) == id }
	}
	if _, err := rb.Standing(ctx, 3, is("m3")); err == nil {
		t.Fatal("standing before the stream's state was read: no error")
	}
	refresh := func() {
		t.Helper()
		if err := rb.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	refresh()
	for _, tc := range []struct {
		name string
		seq  uint64
		id   string
		want natsx.Standing
	}{
		{"held", 3, "m3", natsx.Held},
		{"removed after its acknowledgement", 2, "m2", natsx.Removed},
		{"another message at its sequence", 1, "lost", natsx.Lost},
		{"beyond the last", 9, "m9", natsx.Lost},
		{"further beyond the last", 7, "m7", natsx.Lost},
		{"just beyond the last", 4, "m4", natsx.Lost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rb.Standing(ctx, tc.seq, is(tc.id))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("standing %d, want %d", got, tc.want)
			}
		})
	}
	if rb.Last() != 3 {
		t.Errorf("last %d, want 3", rb.Last())
	}
	seq := publish("m4")
	refresh()
	if got, err := rb.Standing(ctx, seq, is("m4")); err != nil || got != natsx.Held {
		t.Errorf("stored before the last refresh: standing %d (%v), want held", got, err)
	}
	// The subscription sees every request the client made before a round trip.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "both state reads seen", func() bool { return infos.Load() >= 2 })
	if n := infos.Load(); n != 2 {
		t.Errorf("%d reads of the stream's state for 2 refreshes and 8 standings, want 2", n)
	}
}

// TestRollbackJudge: the records logged under one sequence are judged together. All but
// the one the stream holds are lost; all when it holds another message or the sequence is
// beyond its last; and when the stream removed the sequence's message, one record is not
// lost but two or more all are, since which of them was acknowledged cannot be told, unless
// they say they were one message's, a bundle's.
func TestRollbackJudge(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t)
	_, js, str := rollbackStream(t, "RJ", "rj")
	for i := 1; i <= 2; i++ {
		if _, err := js.PublishMsg(ctx, natsx.NewMsg("rj", fmt.Sprintf("m%d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	// Two bundles of two, at 3 and 4; 4 is removed.
	for _, ids := range [][]string{{"b1", "b2"}, {"c1", "c2"}} {
		b, err := crawlmsg.Bundle("rj", []*nats.Msg{natsx.NewMsg("rj", ids[0], nil), natsx.NewMsg("rj", ids[1], nil)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []uint64{1, 4} {
		if err := str.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	rb := natsx.NewRollback(js, "RJ")
	if err := rb.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		seq   uint64
		ids   []string
		one   bool // the records say they are one message's
		want  natsx.Standing
		lost  []bool
		msgID string // of Verdict.Msg
	}{
		{"held, alone", 2, []string{"m2"}, false, natsx.Held, []bool{false}, "m2"},
		{"held, beside one NATS lost", 2, []string{"x", "m2"}, false, natsx.Held, []bool{true, false}, "m2"},
		{"another message there", 2, []string{"x", "y"}, false, natsx.Lost, []bool{true, true}, ""},
		{"removed, alone", 1, []string{"m1"}, false, natsx.Removed, []bool{false}, ""},
		{"removed, given twice", 1, []string{"m1", "x"}, false, natsx.Removed, []bool{true, true}, ""},
		{"beyond the last", 9, []string{"a", "b"}, false, natsx.Lost, []bool{true, true}, ""},
		{"held in a bundle, beside one NATS lost", 3, []string{"b2", "x", "b1"}, false, natsx.Held, []bool{false, true, false}, ""},
		{"removed, one bundle's", 4, []string{"c1", "c2"}, true, natsx.Removed, []bool{false, false}, ""},
		{"removed, two messages'", 4, []string{"c1", "c2", "x"}, false, natsx.Removed, []bool{true, true, true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := rb.Judge(ctx, tc.seq, len(tc.ids), tc.one, func(m *jetstream.RawStreamMsg, i int) bool {
				parts, err := crawlmsg.Unbundle(m.Header, m.Data)
				if err != nil {
					t.Fatal(err)
				}
				return slices.ContainsFunc(parts, func(p crawlmsg.Part) bool { return p.Header.Get(nats.MsgIdHdr) == tc.ids[i] })
			})
			if err != nil {
				t.Fatal(err)
			}
			if v.Standing != tc.want {
				t.Errorf("standing %d, want %d", v.Standing, tc.want)
			}
			for i, want := range tc.lost {
				if v.Lost(i) != want {
					t.Errorf("record %d (%s) lost %v, want %v", i, tc.ids[i], v.Lost(i), want)
				}
			}
			var held string
			if v.Msg != nil {
				held = v.Msg.Header.Get(nats.MsgIdHdr)
			}
			if (v.Msg != nil) != (tc.want == natsx.Held) || tc.msgID != "" && held != tc.msgID {
				t.Errorf("message held %q, want %q (standing %d)", held, tc.msgID, tc.want)
			}
		})
	}
}

// rollbackStream starts a NATS server with a stream of one subject.
func rollbackStream(t *testing.T, name, subject string) (*nats.Conn, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	srv := natsembed.StartT(t)
	ctx := testwait.Context(t)
	nc, js, err := natsx.Connect(ctx, srv.URL(), "itest", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	str, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, str
}
