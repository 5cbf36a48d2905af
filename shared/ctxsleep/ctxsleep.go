// Package ctxsleep waits a while unless a context ends first: the pause of every retry and
// polling loop of Trawl.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d and reports true, or reports false as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
