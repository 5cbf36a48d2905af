package itest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// deadStream makes CRAWL_DEAD as the services declare it, capped at maxBytes.
func deadStream(t *testing.T, js jetstream.JetStream, maxBytes int64) {
	t.Helper()
	for _, sc := range topology.Streams(topology.DefaultOptions(1)) {
		if sc.Name == topology.StreamDead {
			sc.MaxBytes = maxBytes
			if _, err := js.CreateStream(context.Background(), sc); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("topology.Streams declares no %s", topology.StreamDead)
}

func deadLetters(t *testing.T, js jetstream.JetStream) map[string]natsx.Dead {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, topology.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]natsx.Dead{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[string(m.Data)] = natsx.ReadDead(m)
	}
	return out
}

// What a replay does when its stream's duplicate window still holds the message's id is
// decided by the sequence the pub-ack names, not by the letter's age: the server forgets an
// id on a timer of its own, which may run late under load, and on its own clock. Each case
// makes the window hold a copy of the message after the letter is older than the window,
// as a late timer leaves it.
func TestReplayDecidesByTheCopyTheWindowHolds(t *testing.T) {
	// Long enough that the copies made just before a replay are still in it on a busy
	// machine.
	const window = 3 * time.Second
	for _, tc := range []struct {
		name    string
		msgID   string // the message's own Nats-Msg-Id; "": it had none
		noSeq   bool   // the letter does not name the message's sequence
		held    string // the copy the window holds: "own" (the parked message), "republished", "replayed"
		tooSoon bool   // the replay must wait, the letter kept
		stored  uint64 // messages the stream holds after the replay
	}{
		// The message's own copy, parked and gone from its work queue: a replay now is
		// dropped as a copy of it, and deleting the letter would lose the message.
		{name: "its own copy", msgID: "m-1", held: "own", tooSoon: true},
		// The same, for a letter that does not say which sequence was its message's.
		{name: "its own copy, the letter naming no sequence", msgID: "m-1", noSeq: true, held: "own", tooSoon: true},
		// A later copy under the same id (its publisher sent it again once the window had
		// passed) carries the work: the letter goes.
		{name: "a copy republished later", msgID: "m-1", held: "republished", stored: 1},
		// This letter's own replay, stored before and its delete lost: the letter goes,
		// nothing is stored twice.
		{name: "its earlier replay", held: "replayed", stored: 1},
		{name: "its earlier replay, the letter naming no sequence", noSeq: true, held: "replayed", stored: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			js := connect(t)
			deadStream(t, js, 1<<20)
			ctx := testwait.Context(t)
			str, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RW", Subjects: []string{"RW.>"}, Retention: jetstream.WorkQueuePolicy, Duplicates: window})
			if err != nil {
				t.Fatal(err)
			}
			publish := func(m *nats.Msg) *jetstream.PubAck {
				t.Helper()
				ack, err := js.PublishMsg(ctx, m)
				if err != nil {
					t.Fatal(err)
				}
				return ack
			}
			// The letter of the stream's first message, parked as Park parks it.
			letter := nats.NewMsg(topology.DeadSubject("RW"))
			letter.Data = []byte("work")
			letter.Header.Set(natsx.DeadStreamHdr, "RW")
			if !tc.noSeq {
				letter.Header.Set(natsx.DeadSeqHdr, "1")
			}
			letter.Header.Set(natsx.DeadSubjectHdr, "RW.m")
			letter.Header.Set(natsx.DeadConsumerHdr, "w")
			letter.Header.Set(natsx.DeadReasonHdr, natsx.DeadExhausted)
			if tc.msgID != "" {
				letter.Header.Set(natsx.DeadMsgIDHdr, tc.msgID)
			}
			seq := publish(letter).Sequence
			dead, err := js.Stream(ctx, topology.StreamDead)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := dead.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			testwait.Eventually(t, 2*window, "the letter older than the duplicate window", func() bool {
				return time.Since(raw.Time) > window+100*time.Millisecond
			})
			// The copies, made now: the window holds the last one's id for a while yet.
			own := natsx.NewMsg("RW.m", "", []byte("work"))
			if tc.msgID != "" {
				own.Header.Set(nats.MsgIdHdr, tc.msgID)
			}
			if got := publish(own).Sequence; got != 1 {
				t.Fatalf("the message stored at %d, want 1 as its letter says", got)
			}
			if err := str.DeleteMsg(ctx, 1); err != nil { // given up: gone from its work queue
				t.Fatal(err)
			}
			switch tc.held {
			case "republished":
				testwait.Eventually(t, 3*window, "the publisher's copy stored once the window forgot the first", func() bool {
					return !publish(own).Duplicate
				})
			case "replayed":
				again := natsx.NewMsg("RW.m", "", []byte("work"))
				again.Header.Set(natsx.ReplayOfHdr, natsx.StoredID(topology.StreamDead, seq, raw.Time))
				again.Header.Set(nats.MsgIdHdr, "replay:"+natsx.StoredID(topology.StreamDead, seq, raw.Time))
				publish(again)
			}
			err = natsx.Replay(ctx, js, seq)
			if tc.tooSoon != errors.Is(err, natsx.ErrReplayTooSoon) || !tc.tooSoon && err != nil {
				t.Fatalf("Replay = %v, want ErrReplayTooSoon %v", err, tc.tooSoon)
			}
			if n, want := len(deadLetters(t, js)), map[bool]int{true: 1}[tc.tooSoon]; n != want {
				t.Errorf("%d letters left, want %d", n, want)
			}
			if n := streamMsgs(t, js, "RW"); n != tc.stored {
				t.Errorf("the stream holds %d messages, want %d", n, tc.stored)
			}
		})
	}
}

// A message the loop gives up on, a permanent failure at once and a temporary one after
// Dead.After deliveries, is parked in CRAWL_DEAD with its headers and why, and is gone from
// its stream; replayed, it comes back as it was and is handled.
func TestDeadLetterParksAndReplays(t *testing.T) {
	for _, tc := range []struct {
		name   string
		each   bool          // ConsumeEach instead of ConsumeBatches
		settle time.Duration // ConsumeBatches' SettleAfter, and the terminate's wait
	}{
		{name: "batches"},
		{name: "batches settling", settle: 200 * time.Millisecond},
		{name: "each", each: true},
		{name: "each settling", each: true, settle: 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			js := connect(t)
			deadStream(t, js, 1<<20)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// A short duplicate window, so that the poison message's own id leaves it
			// within the test.
			const window = 3 * time.Second
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DL", Subjects: []string{"DL.>"}, Retention: jetstream.WorkQueuePolicy, Duplicates: window}); err != nil {
				t.Fatal(err)
			}
			cons, err := js.CreateOrUpdateConsumer(ctx, "DL", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: -1})
			if err != nil {
				t.Fatal(err)
			}
			for _, body := range []string{"ok", "poison", "hopeless"} {
				m := natsx.NewMsg("DL."+body, "", []byte(body))
				m.Header.Set("X-Kept", body)
				if body == "poison" {
					m.Header.Set(nats.MsgIdHdr, "poison-1")
				}
				if _, err := js.PublishMsg(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			const after = 4
			var (
				mu       sync.Mutex
				calls    = map[string]int{}
				replayed = map[string]nats.Header{}
				terms    []string
				fixed    atomic.Bool
			)
			h := func(_ context.Context, m jetstream.Msg) error {
				mu.Lock()
				defer mu.Unlock()
				b := string(m.Data())
				calls[b]++
				if m.Headers().Get(natsx.ReplayOfHdr) != "" {
					replayed[b] = m.Headers()
				}
				switch {
				case fixed.Load() || b == "ok":
					return nil
				case b == "poison":
					return natsx.Permanent(errors.New("cannot parse\nline two"))
				default:
					return errors.New("OOM command not allowed when used memory > 'maxmemory'")
				}
			}
			opts := natsx.ConsumeOptions{
				Batch:       8,
				ErrorAfter:  2,
				Backoff:     func(uint64) time.Duration { return 10 * time.Millisecond },
				Dead:        &natsx.DeadLetter{JS: js, After: after, Settle: tc.settle},
				OnTerm:      func(r string) { mu.Lock(); terms = append(terms, r); mu.Unlock() },
				SettleAfter: tc.settle,
			}
			done := make(chan error, 1)
			go func() {
				if tc.each {
					done <- natsx.ConsumeEach(ctx, cons, opts, h)
					return
				}
				done <- natsx.ConsumeBatches(ctx, cons, opts, func(ctx context.Context, msgs []jetstream.Msg) []error {
					errs := make([]error, len(msgs))
					for i, m := range msgs {
						errs[i] = h(ctx, m)
					}
					return errs
				})
			}()
			testwait.Eventually(t, 15*time.Second, "both failing messages parked and gone from their stream", func() bool {
				return len(deadLetters(t, js)) == 2 && streamMsgs(t, js, "DL") == 0
			})
			dead := deadLetters(t, js)
			for _, want := range []struct {
				body, reason, err string
				deliveries        uint64
			}{
				{"poison", natsx.DeadPermanent, "cannot parse line two", 1},
				{"hopeless", natsx.DeadExhausted, "maxmemory", after},
			} {
				d := dead[want.body]
				if d.Stream != "DL" || d.Subject != "DL."+want.body || d.Consumer != "w" || d.Reason != want.reason ||
					d.Deliveries != want.deliveries || !strings.Contains(d.Error, want.err) || d.StreamSeq == 0 {
					t.Errorf("dead letter of %s: %+v, want stream DL, subject DL.%s, consumer w, reason %s after %d deliveries, error with %q",
						want.body, d, want.body, want.reason, want.deliveries, want.err)
				}
			}
			mu.Lock()
			if calls["hopeless"] != after || calls["poison"] != 1 || calls["ok"] != 1 {
				t.Errorf("handled %v, want ok and poison once, hopeless %d times", calls, after)
			}
			if strings.Join(terms, ",") != "permanent,exhausted" && strings.Join(terms, ",") != "exhausted,permanent" {
				t.Errorf("terminations %v, want one permanent and one exhausted", terms)
			}
			mu.Unlock()

			fixed.Store(true)
			// The poison message was given up within its stream's duplicate window: its
			// replay waits until its own id has left it, then goes.
			poison, hopeless := dead["poison"].Seq, dead["hopeless"].Seq
			if err := natsx.Replay(ctx, js, poison); !errors.Is(err, natsx.ErrReplayTooSoon) && time.Since(dead["poison"].Parked) < window/2 {
				t.Errorf("replay within the duplicate window: %v, want ErrReplayTooSoon", err)
			}
			if err := natsx.Replay(ctx, js, hopeless); err != nil {
				t.Fatal(err)
			}
			testwait.Eventually(t, 15*time.Second, "the poison message replayed once its id left the window", func() bool {
				err := natsx.Replay(ctx, js, poison)
				if err != nil && !errors.Is(err, natsx.ErrReplayTooSoon) {
					t.Fatal(err)
				}
				return err == nil
			})
			testwait.EventuallyState(t, 15*time.Second, "the replayed messages handled and acked", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				left, letters := streamMsgs(t, js, "DL"), deadLetters(t, js)
				return len(replayed) == 2 && left == 0 && len(letters) == 0,
					fmt.Sprintf("replays handled %v, calls %v, %d left in DL, dead letters %v", slices.Sorted(maps.Keys(replayed)), calls, left, slices.Sorted(maps.Keys(letters)))
			})
			mu.Lock()
			defer mu.Unlock()
			for body, hdr := range replayed {
				if hdr.Get("X-Kept") != body {
					t.Errorf("replayed %s lost its header X-Kept: %v", body, hdr)
				}
				if hdr.Get("Trawl-Dead-Reason") != "" {
					t.Errorf("replayed %s still carries the dead letter's headers: %v", body, hdr)
				}
			}
			if id := replayed["poison"].Get(nats.MsgIdHdr); id != "poison-1" {
				t.Errorf("replayed poison has Nats-Msg-Id %q, want its own, poison-1", id)
			}
			if calls["hopeless"] != after+1 || calls["poison"] != 2 {
				t.Errorf("handled %v, want hopeless %d times and poison twice", calls, after+1)
			}
		})
	}
}

// When CRAWL_DEAD cannot take a message, a temporary failure is not given up but retried,
// and stays in its stream; a permanent one is terminated as without a dead letter stream.
func TestDeadLetterFullKeepsTheMessage(t *testing.T) {
	t.Parallel()
	js := connect(t)
	deadStream(t, js, 1024)
	cons := workStream(t, js, "DF", -1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	big := strings.Repeat("x", 4096)
	for _, body := range []string{"poison" + big, "hopeless" + big} {
		if _, err := js.Publish(ctx, "DF.m", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	const after = 3
	var calls, poisoned atomic.Int32
	opts := natsx.ConsumeOptions{
		Batch:      8,
		ErrorAfter: 2,
		Backoff:    func(uint64) time.Duration { return 10 * time.Millisecond },
		Dead:       &natsx.DeadLetter{JS: js, After: after},
	}
	done := make(chan error, 1)
	go func() {
		done <- natsx.ConsumeEach(ctx, cons, opts, func(_ context.Context, m jetstream.Msg) error {
			if strings.HasPrefix(string(m.Data()), "poison") {
				poisoned.Add(1)
				return natsx.Permanent(errors.New("cannot parse"))
			}
			calls.Add(1)
			return errors.New("redis timeout")
		})
	}()
	testwait.Eventually(t, 15*time.Second, "the temporary failure retried past Dead.After", func() bool { return calls.Load() >= 3*after })
	if n := streamMsgs(t, js, "DF"); n != 1 {
		t.Errorf("stream holds %d messages, want the temporary failure kept (and the permanent one gone)", n)
	}
	if n := poisoned.Load(); n != 1 {
		t.Errorf("the permanent failure handled %d times, want once", n)
	}
	if n := len(deadLetters(t, js)); n != 0 {
		t.Errorf("%d dead letters in a stream too small for any", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A parked message is terminated only once its letter is past the TRAWL_FSYNC window and
// NATS stayed in reach since; when it did not, the message is handed back, and parked
// again under the same letter.
func TestDeadLetterHandedBackWhenNATSWasLost(t *testing.T) {
	t.Parallel()
	js := connect(t)
	deadStream(t, js, 1<<20)
	cons := workStream(t, js, "DH", -1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := js.Publish(ctx, "DH.m", []byte("poison")); err != nil {
		t.Fatal(err)
	}
	var calls, asked atomic.Int32
	opts := natsx.ConsumeOptions{
		Backoff: func(uint64) time.Duration { return 10 * time.Millisecond },
		Dead: &natsx.DeadLetter{JS: js, After: 5, Settle: 100 * time.Millisecond,
			Kept: func(time.Time) bool { return asked.Add(1) > 1 }},
	}
	done := make(chan error, 1)
	go func() {
		done <- natsx.ConsumeEach(ctx, cons, opts, func(context.Context, jetstream.Msg) error {
			calls.Add(1)
			return natsx.Permanent(errors.New("cannot parse"))
		})
	}()
	testwait.Eventually(t, 15*time.Second, "the message terminated after it was handed back once", func() bool {
		return streamMsgs(t, js, "DH") == 0
	})
	if n := calls.Load(); n != 2 {
		t.Errorf("handled %d times, want twice: handed back once", n)
	}
	if n := len(deadLetters(t, js)); n != 1 {
		t.Errorf("%d dead letters, want the one, parked twice", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// On a stream with several consumers a replay reaches each; only the one that gave the
// message up handles it, the others ack it unhandled.
func TestDeadLetterReplayGoesToItsConsumer(t *testing.T) {
	t.Parallel()
	js := connect(t)
	deadStream(t, js, 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DI", Subjects: []string{"DI.>"}, Retention: jetstream.InterestPolicy, Duplicates: time.Second}); err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	calls := map[string]*atomic.Int32{"a": {}, "b": {}}
	done := make(chan error, 2)
	for name, n := range calls {
		c, err := js.CreateOrUpdateConsumer(ctx, "DI", jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: -1})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			done <- natsx.ConsumeBatches(ctx, c, natsx.ConsumeOptions{Dead: &natsx.DeadLetter{JS: js, After: 3}},
				func(_ context.Context, msgs []jetstream.Msg) []error {
					errs := make([]error, len(msgs))
					for i := range msgs {
						n.Add(1)
						if name == "b" && !fixed.Load() {
							errs[i] = natsx.Permanent(errors.New("cannot parse"))
						}
					}
					return errs
				})
		}()
	}
	if _, err := js.Publish(ctx, "DI.m", []byte("m")); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 15*time.Second, "b's letter", func() bool { return len(deadLetters(t, js)) == 1 && streamMsgs(t, js, "DI") == 0 })
	fixed.Store(true)
	testwait.Eventually(t, 15*time.Second, "the replay stored", func() bool {
		err := natsx.Replay(ctx, js, deadLetters(t, js)["m"].Seq)
		if err != nil && !errors.Is(err, natsx.ErrReplayTooSoon) {
			t.Fatal(err)
		}
		return err == nil
	})
	testwait.Eventually(t, 15*time.Second, "the replay handled by b and settled by both", func() bool {
		return calls["b"].Load() == 2 && streamMsgs(t, js, "DI") == 0
	})
	if n := calls["a"].Load(); n != 1 {
		t.Errorf("a handled the message %d times, want once: the replay was b's", n)
	}
	cancel()
	for range calls {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// A full stream downstream is back-pressure: the message waits for room, past
// Dead.After deliveries, and is not parked for it.
func TestDeadLetterSparesBackPressure(t *testing.T) {
	t.Parallel()
	js := connect(t)
	deadStream(t, js, 1<<20)
	cons := workStream(t, js, "DP", -1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DPOUT", Subjects: []string{"dpout"}, MaxMsgs: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "dpout", []byte("fills it")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "DP.m", []byte("m")); err != nil {
		t.Fatal(err)
	}
	const after = 2
	var calls atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- natsx.ConsumeEach(ctx, cons, natsx.ConsumeOptions{
			Backoff: func(uint64) time.Duration { return 10 * time.Millisecond },
			Dead:    &natsx.DeadLetter{JS: js, After: after},
		}, func(ctx context.Context, m jetstream.Msg) error {
			calls.Add(1)
			_, err := js.Publish(ctx, "dpout", m.Data())
			return err
		})
	}()
	testwait.Eventually(t, 20*time.Second, "the message retried well past Dead.After", func() bool { return calls.Load() >= 3*after })
	if n := len(deadLetters(t, js)); n != 0 || streamMsgs(t, js, "DP") != 1 {
		t.Errorf("%d dead letters and %d messages in the stream, want none parked and the message kept", n, streamMsgs(t, js, "DP"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
