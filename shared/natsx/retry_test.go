package natsx

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A bucket created by another service a moment ago may not have reached the server a
// probe asks, on a cluster: "stream not found" then is waited out like no responders,
// while an error that will not pass is returned at once.
func TestRetryUnanswered(t *testing.T) {
	notFound := &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}
	denied := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamNameInUse, Description: "stream name already in use"}
	tests := []struct {
		name      string
		fail      error
		wantCalls int
		wantErr   bool
	}{
		{"stream not found is waited out", notFound, 3, false},
		{"no responders is waited out", jetstream.ErrNoStreamResponse, 3, false},
		{"another error is returned", denied, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			v, err := retryUnanswered(context.Background(), "test bucket", func(context.Context) (int, error) {
				calls++
				if calls < 3 {
					return 0, tt.fail
				}
				return 7, nil
			})
			if calls != tt.wantCalls || (err != nil) != tt.wantErr {
				t.Fatalf("calls %d, err %v; want %d calls, error %v", calls, err, tt.wantCalls, tt.wantErr)
			}
			if err == nil && v != 7 {
				t.Fatalf("value %d", v)
			}
			if tt.wantErr && !errors.Is(err, tt.fail) {
				t.Fatalf("error %v, want %v", err, tt.fail)
			}
		})
	}
}
