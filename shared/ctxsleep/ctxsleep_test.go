package ctxsleep

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	tests := []struct {
		name   string
		cancel bool
		d      time.Duration
		want   bool
	}{
		{"waits out the duration", false, time.Millisecond, true},
		{"ends with the context", true, time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if tt.cancel {
				cancel()
			}
			defer cancel()
			if got := Sleep(ctx, tt.d); got != tt.want {
				t.Errorf("Sleep = %v, want %v", got, tt.want)
			}
		})
	}
}
