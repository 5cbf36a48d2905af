package itest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// bundleOf is a bundle on subject of parts with these bodies, each part with its own id
// and a header naming it.
func bundleOf(t *testing.T, subject string, bodies ...string) *nats.Msg {
	t.Helper()
	parts := make([]*nats.Msg, len(bodies))
	for i, b := range bodies {
		parts[i] = natsx.NewMsg(subject, "part:"+b, []byte(b))
		parts[i].Header.Set("X-Part", b)
	}
	m, err := crawlmsg.Bundle(subject, parts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Parts of a bundle are handled as messages of their own: each with its headers, in
// batches no larger than Batch, a poison part parked alone, and the bundle handed back
// whole while a part fails, acked once every part is done. Acked hears of each acked part
// once, after the bundle's ack is sent, never of a part given up. A bundle that cannot be
// read is parked whole.
func TestConsumeBatchesBundles(t *testing.T) {
	for _, c := range []struct {
		name, stream string
		settle       time.Duration
	}{
		{"at once", "BU", 0},
		{"after the window", "BV", 300 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			js := connect(t)
			deadStream(t, js, 1<<20)
			cons := workStream(t, js, c.stream, -1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			subject := c.stream + ".p"
			for _, m := range []*nats.Msg{
				bundleOf(t, subject, "ok1", "poison", "flaky", "ok2"),
				natsx.NewMsg(subject, "plain", []byte("ok3")),
				bundleOf(t, subject, "ok4", "ok5"),
			} {
				if _, err := js.PublishMsg(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			junk := natsx.NewMsg(subject, "junk", []byte("junk"))
			junk.Header.Set(crawlmsg.BundleHdr, "2")
			if _, err := js.PublishMsg(ctx, junk); err != nil {
				t.Fatal(err)
			}
			const batch = 3
			var (
				mu      sync.Mutex
				calls   = map[string]int{}
				acked   []string
				bad     []string
				largest int
			)
			h := scripted(&mu, calls)
			opts := natsx.ConsumeOptions{
				Batch:       batch,
				Backoff:     func(uint64) time.Duration { return 20 * time.Millisecond },
				SettleAfter: c.settle,
				Dead:        &natsx.DeadLetter{JS: js, After: 100, Settle: c.settle},
				Acked: func(_ context.Context, msgs []jetstream.Msg) {
					mu.Lock()
					defer mu.Unlock()
					for _, m := range msgs {
						acked = append(acked, string(m.Data()))
						if err := m.Ack(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
							bad = append(bad, fmt.Sprintf("%s passed to Acked unsettled (a second ack: %v)", m.Data(), err))
						}
					}
				},
			}
			go func() {
				_ = natsx.ConsumeBatches(ctx, cons, opts, func(ctx context.Context, msgs []jetstream.Msg) []error {
					mu.Lock()
					largest = max(largest, len(msgs))
					for _, m := range msgs {
						if b := string(m.Data()); m.Headers().Get("X-Part") != b && b != "ok3" && b != "junk" {
							bad = append(bad, fmt.Sprintf("part %q has the headers %v", b, m.Headers()))
						}
					}
					mu.Unlock()
					return h(ctx, msgs)
				})
			}()
			testwait.EventuallyState(t, 15*time.Second, "every message settled", func() (bool, string) {
				info, err := cons.Info(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				return info.NumAckPending == 0 && info.NumPending == 0 && len(acked) >= 6,
					fmt.Sprintf("pending %d, ack pending %d, acked %v, calls %v", info.NumPending, info.NumAckPending, acked, calls)
			})
			mu.Lock()
			defer mu.Unlock()
			if len(bad) > 0 {
				t.Fatal(strings.Join(bad, "; "))
			}
			slices.Sort(acked)
			if want := []string{"flaky", "ok1", "ok2", "ok3", "ok4", "ok5"}; !slices.Equal(acked, want) {
				t.Errorf("Acked heard of %v, want each acked part once: %v", acked, want)
			}
			if largest > batch {
				t.Errorf("a handler call of %d messages, want at most Batch = %d", largest, batch)
			}
			// The flaky part's failure handed its bundle back whole.
			if calls["ok1"] != 2 || calls["ok2"] != 2 || calls["flaky"] != 2 || calls["ok4"] != 1 {
				t.Errorf("handled %v: want ok1, ok2 and flaky twice (their bundle handed back once), ok4 once", calls)
			}
			dead := deadLetters(t, js)
			if len(dead) != 2 {
				t.Fatalf("dead letters %v, want the poison part and the unreadable bundle", dead)
			}
			if _, ok := dead["junk"]; !ok {
				t.Errorf("no letter of the unreadable bundle: %v", dead)
			}
			d, ok := dead["poison"]
			if !ok {
				t.Fatalf("no letter of the poison part: %v", dead)
			}
			st, err := js.Stream(ctx, topology.StreamDead)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := st.GetMsg(ctx, d.Seq)
			if err != nil {
				t.Fatal(err)
			}
			if raw.Header.Get("X-Part") != "poison" || raw.Header.Get(crawlmsg.BundleHdr) != "" || raw.Header.Get(natsx.DeadMsgIDHdr) != "part:poison" {
				t.Errorf("the poison part's letter has the headers %v: want the part's own", raw.Header)
			}
		})
	}
}

// A bundle reads back as the parts it was made of; a message that is no bundle reads as
// itself; a damaged bundle is an error, never a short read.
func TestUnbundle(t *testing.T) {
	m := bundleOf(t, "x.p", "a", "", strings.Repeat("c", 300))
	parts, err := crawlmsg.Unbundle(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 3 || string(parts[2].Data) != strings.Repeat("c", 300) || parts[1].Header.Get(nats.MsgIdHdr) != "part:" || parts[0].Header.Get("X-Part") != "a" {
		t.Fatalf("parts %+v", parts)
	}
	again := bundleOf(t, "x.p", "a", "", strings.Repeat("c", 300))
	if m.Header.Get(nats.MsgIdHdr) != again.Header.Get(nats.MsgIdHdr) {
		t.Error("the same parts made two bundle ids")
	}
	plain := natsx.NewMsg("x.p", "", []byte("solo"))
	if ps, err := crawlmsg.Unbundle(plain.Header, plain.Data); err != nil || len(ps) != 1 || string(ps[0].Data) != "solo" {
		t.Errorf("a plain message unbundled as %v, %v", ps, err)
	}
	for _, tc := range []struct {
		name  string
		count string
		data  []byte
	}{
		{"truncated", "3", m.Data[:len(m.Data)-1]},
		{"trailing octets", "3", append(slices.Clone(m.Data), 0)},
		{"fewer parts than said", "4", m.Data},
		{"unknown layout", "3", append([]byte{9}, m.Data[1:]...)},
		{"bad count", "x", m.Data},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nats.Header{crawlmsg.BundleHdr: {tc.count}}
			if ps, err := crawlmsg.Unbundle(h, tc.data); !errors.Is(err, crawlmsg.ErrBundle) || !errors.Is(err, crawlmsg.ErrMalformed) {
				t.Errorf("got %d parts, %v; want ErrBundle, malformed", len(ps), err)
			}
		})
	}
}
