package itest

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
)

// TestRollbackStanding: a message the stream holds is Held, one removed within the stream
// is Removed, one beyond its last or with another message at its sequence is Lost, and one
// stored after the last sequence was read is found, not taken for lost.
func TestRollbackStanding(t *testing.T) {
	t.Parallel()
	srv := natsembed.StartT(t)
	ctx := testwait.Context(t)
	nc, js, err := natsx.Connect(ctx, srv.URL(), "itest", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	str, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RB", Subjects: []string{"rb"}})
	if err != nil {
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
	rb, err := natsx.NewRollback(ctx, js, "RB")
	if err != nil {
		t.Fatal(err)
	}
	is := func(id string) func(*jetstream.RawStreamMsg) bool {
		return func(m *jetstream.RawStreamMsg) bool { return m.Header.Get(nats.MsgIdHdr) == id }
	}
	check := func(name string, seq uint64, id string, want natsx.Standing) {
		t.Helper()
		got, err := rb.Standing(ctx, seq, is(id))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: standing %d, want %d", name, got, want)
		}
	}
	check("held", 3, "m3", natsx.Held)
	check("removed after its acknowledgement", 2, "m2", natsx.Removed)
	check("another message at its sequence", 1, "lost", natsx.Lost)
	check("beyond the last", 9, "m9", natsx.Lost)
	if rb.Last() != 3 {
		t.Errorf("last %d, want 3", rb.Last())
	}
	seq := publish("m4")
	check("stored since the last read", seq, "m4", natsx.Held)
}
