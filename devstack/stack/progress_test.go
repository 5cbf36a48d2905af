package stack

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/testwait"
)

// A crawl is over after two readings in a row that say so: a reading that fails (Redis
// unreachable) between two quiet ones says nothing, so it does not end the wait.
func TestWaitIdleNeedsTwoReadingsInARow(t *testing.T) {
	quiet := Progress{Accepted: 3, Fetched: 3, Backlog: map[string]uint64{}, Seqs: map[string]uint64{"crawl.fetch": 3}}
	unreachable := errors.New("stack: progress: redis: dial tcp 127.0.0.1:6379: connect: connection refused")
	for _, tc := range []struct {
		name      string
		script    []error // nil: a quiet reading
		wantReads int
	}{
		{"two quiet readings", []error{nil, nil}, 2},
		{"a failed reading between them", []error{nil, unreachable, nil, nil}, 4},
		{"failed readings first", []error{unreachable, unreachable, nil, nil}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			read := func(context.Context) (Progress, error) {
				i := reads
				reads++
				if i >= len(tc.script) {
					return Progress{}, errors.New("read past the script: the wait should have ended")
				}
				if tc.script[i] != nil {
					return Progress{}, tc.script[i]
				}
				return quiet, nil
			}
			ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
			defer cancel()
			if _, _, err := WaitIdleOrParked(ctx, time.Millisecond, 0, read, nil); err != nil {
				t.Fatal(err)
			}
			if reads != tc.wantReads {
				t.Errorf("over after %d readings, want %d", reads, tc.wantReads)
			}
		})
	}
}
