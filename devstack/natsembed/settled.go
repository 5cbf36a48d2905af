package natsembed

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
)

// WaitSettled waits up to within until consumer has settled every message of stream
// (natsx.Settled), and fails the test with where it stands otherwise.
func WaitSettled(t testing.TB, js jetstream.JetStream, stream, consumer string, within time.Duration) {
	t.Helper()
	testwait.EventuallyState(t, within, consumer+" to settle every message of "+stream, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ok, state, err := natsx.Settled(ctx, js, stream, consumer)
		if err != nil {
			return false, err.Error()
		}
		return ok, state
	})
}
