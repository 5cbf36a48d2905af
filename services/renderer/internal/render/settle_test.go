package render

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
)

// A request the page began holds the page until Trawl has answered it, though its pause
// has not come yet; one that never comes holds it only for announceGrace, never to the
// time cap; a data: URL, never paused, does not hold it.
func TestSettleWaitsForBegunRequests(t *testing.T) {
	const settle = 100 * time.Millisecond
	for _, tc := range []struct {
		name     string
		url      string
		pausedAt time.Duration // 0: never paused
		answered time.Duration // how long Trawl takes to answer it
		atLeast  time.Duration
		under    time.Duration
	}{
		{"paused late, then answered", "http://a.test/api", 300 * time.Millisecond, 200 * time.Millisecond, 500*time.Millisecond + settle, announceGrace},
		{"never paused: held for the grace only", "http://a.test/never", 0, 0, announceGrace, 4 * time.Second},
		{"data URL: not held", "data:,x", 0, 0, settle, announceGrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st := &pageState{r: New(nil, Options{Settle: settle}), ctx: ctx, refused: map[string]int{}, announced: map[network.RequestID]time.Time{}}
			start := time.Now()
			st.announce("1", tc.url)
			if tc.pausedAt > 0 {
				go func() {
					time.Sleep(tc.pausedAt) // the browser's pause event, late
					st.inflight.Add(1)
					st.wg.Add(1)
					st.forget("1")
					time.Sleep(tc.answered) // Trawl answering it
					st.done()
				}()
			}
			if err := st.settle(); err != nil {
				t.Fatalf("settle: %v", err)
			}
			took := time.Since(start)
			if took < tc.atLeast || took >= tc.under {
				t.Errorf("page taken after %s, want at least %s and under %s", took.Round(time.Millisecond), tc.atLeast, tc.under)
			}
		})
	}
}
