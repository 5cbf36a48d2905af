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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
)

// Acked hears of a handled message only once its ack is sent — at once, or a window later
// when the stores said they kept its outputs — and never of one terminated, failed or
// handed back: the parser deletes a page's body there, and a page that comes back must
// still find it.
func TestConsumeBatchesAcked(t *testing.T) {
	for _, c := range []struct {
		name, stream string
		settle       time.Duration
	}{
		{"at once", "AK", 0},
		{"after the window", "AL", 300 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			js := connect(t)
			stream := c.stream
			cons := workStream(t, js, stream, -1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for _, body := range []string{"ok1", "poison", "flaky", "ok2"} {
				if _, err := js.Publish(ctx, stream+".m", []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			var (
				mu     sync.Mutex
				calls  = map[string]int{}
				acked  []string
				bad    []string
				asked  int
				handed int
			)
			opts := natsx.ConsumeOptions{
				Batch:       4,
				Backoff:     func(uint64) time.Duration { return 20 * time.Millisecond },
				SettleAfter: c.settle,
				Acked: func(_ context.Context, msgs []jetstream.Msg) {
					mu.Lock()
					defer mu.Unlock()
					for _, m := range msgs {
						acked = append(acked, string(m.Data()))
						// The client refuses a second ack of a message it sent one for.
						if err := m.Ack(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
							bad = append(bad, fmt.Sprintf("%s passed to Acked before its ack was sent (a second ack: %v)", m.Data(), err))
						}
					}
				},
			}
			if c.settle > 0 {
				// The first answer hands the first handled messages back: they come back,
				// and Acked hears of them only from their next delivery.
				opts.Kept = func(context.Context, time.Time, time.Time) bool {
					mu.Lock()
					defer mu.Unlock()
					asked++
					return asked > 1
				}
				opts.OnHandBack = func(n int) { mu.Lock(); handed += n; mu.Unlock() }
			}
			go func() {
				_ = natsx.ConsumeBatches(ctx, cons, opts, scripted(&mu, calls))
			}()
			testwait.EventuallyState(t, 15*time.Second, "every message settled", func() (bool, string) {
				info, err := cons.Info(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				return info.NumAckPending == 0 && info.NumPending == 0 && len(acked) >= 3,
					fmt.Sprintf("pending %d, ack pending %d, acked %v", info.NumPending, info.NumAckPending, acked)
			})
			mu.Lock()
			defer mu.Unlock()
			if len(bad) > 0 {
				t.Fatal(strings.Join(bad, "; "))
			}
			slices.Sort(acked)
			if want := []string{"flaky", "ok1", "ok2"}; !slices.Equal(acked, want) {
				t.Errorf("Acked heard of %v, want each acked message once: %v", acked, want)
			}
			if c.settle > 0 && handed == 0 {
				t.Error("no message was handed back: the test did not reach the case it is about")
			}
		})
	}
}
