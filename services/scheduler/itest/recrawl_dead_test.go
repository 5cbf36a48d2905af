package itest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// A due recrawl the intake gives up on is the URL's only way back into the crawl (its
// schedule was purged when it fired), so it is parked in CRAWL_DEAD before it leaves its
// stream: a malformed one at once, one whose frontier publish keeps failing after
// TRAWL_DEAD_LETTER_AFTER deliveries.
func TestRecrawlIntakeParksWhatItGivesUp(t *testing.T) {
	entry, err := crawlmsg.EncodeRecrawl(&crawlmsg.RecrawlEntry{URL: "http://stuck.test/page", Depth: 1,
		State: crawlmsg.Recrawl{Interval: 5000, Due: time.Now().UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		url    string
		data   []byte
		frozen bool // the frontier stream refuses the intake's publishes
		reason string
		// deliveries the letter records
		deliveries uint64
	}{
		{name: "malformed", url: "http://broken.test/page", data: []byte("{not a recrawl entry"),
			reason: natsx.DeadPermanent, deliveries: 1},
		{name: "publish keeps failing", url: "http://stuck.test/page", data: entry, frozen: true,
			reason: natsx.DeadExhausted, deliveries: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_RECRAWL": "adaptive",
				"TRAWL_LOG_ERROR_AFTER": "2", "TRAWL_DEAD_LETTER_AFTER": "3"})
			ctx := testwait.Context(t)
			if tc.frozen {
				// Smaller than any frontier message: every publish fails, and the stream
				// is not full, which would be back-pressure and park nothing.
				st, err := s.js.Stream(ctx, topology.StreamFrontier)
				if err != nil {
					t.Fatal(err)
				}
				cfg := st.CachedInfo().Config
				cfg.MaxMsgSize = 16
				if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
					t.Fatal(err)
				}
			}
			stream := topology.RecrawlStreamOf(0, s.cfg.Common.Topology())
			subject := topology.DueSubject(0, tc.url)
			s.publish(subject, tc.data)

			var got natsx.Dead
			testwait.EventuallyState(t, 20*time.Second, "a letter in "+topology.StreamDead, func() (bool, string) {
				letters := s.deadLetters(ctx)
				if len(letters) == 0 {
					return false, "none"
				}
				got = letters[0]
				return true, ""
			})
			if got.Subject != subject || got.Stream != stream || got.Reason != tc.reason || got.Deliveries != tc.deliveries {
				t.Errorf("letter %+v; want subject %s of %s, reason %s, after %d deliveries", got, subject, stream, tc.reason, tc.deliveries)
			}
			testwait.Eventually(t, 10*time.Second, "the due message gone from "+stream, func() bool {
				return s.streamMsgs(stream) == 0
			})
			if n := len(s.deadLetters(ctx)); n != 1 {
				t.Errorf("%d letters, want 1", n)
			}
			terms := map[string]string{"consumer": "recrawl", "reason": tc.reason}
			if n := s.metric("trawl_scheduler_messages_terminated_total", terms); n != 1 {
				t.Errorf("messages_terminated_total%v = %v, want 1", terms, n)
			}
			if tc.frozen && s.logs.count("message keeps failing; retrying", "deliveries=2") != 1 {
				t.Errorf("no error line at TRAWL_LOG_ERROR_AFTER deliveries before the park")
			}
		})
	}
}

// deadLetters reads every letter of CRAWL_DEAD.
func (s *stack) deadLetters(ctx context.Context) []natsx.Dead {
	s.t.Helper()
	st, err := s.js.Stream(ctx, topology.StreamDead)
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	var out []natsx.Dead
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			s.t.Fatal(fmt.Errorf("letter %d: %w", seq, err))
		}
		out = append(out, natsx.ReadDead(m))
	}
	return out
}
