package inproc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/trawl/trawl/devstack/inproc"
	"github.com/trawl/trawl/shared/envconfig"
)

// service runs until its context ends, then returns err.
type service struct {
	err    error
	closed bool
}

func (s *service) Run(ctx context.Context) error {
	<-ctx.Done()
	return s.err
}

func (s *service) Close() { s.closed = true }

func TestStopReturnsRunsError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"clean", nil},
		{"failed", errors.New("loop failed")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &service{err: tc.err}
			r := inproc.Start(t, slog.New(slog.DiscardHandler), func(context.Context) (*service, error) { return svc, nil })
			if r.Svc != svc {
				t.Fatal("Svc is not what New returned")
			}
			if err := r.Stop(); !errors.Is(err, tc.err) {
				t.Fatalf("Stop = %v, want %v", err, tc.err)
			}
			if err := r.Err(); !errors.Is(err, tc.err) {
				t.Fatalf("Err after Stop = %v, want %v", err, tc.err)
			}
			if !svc.closed {
				t.Fatal("the service was not closed after Run")
			}
		})
	}
}

type cfg struct {
	vars map[string]string
}

func (c cfg) Validate() error {
	if c.vars["A"] == "bad" {
		return errors.New("A is bad")
	}
	return nil
}

func TestConfigLaterMapsWin(t *testing.T) {
	load := func(r *envconfig.Reader) (cfg, error) {
		return cfg{vars: map[string]string{"A": r.String("A", "default"), "B": r.String("B", "default")}}, nil
	}
	got := inproc.Config(t, load, map[string]string{"TRAWL_A": "1", "TRAWL_B": "1"}, map[string]string{"TRAWL_B": "2"})
	if got.vars["A"] != "1" || got.vars["B"] != "2" {
		t.Fatalf("vars = %v, want A=1 B=2", got.vars)
	}
}

func TestLoggerTeesAndStopsAtTheTestsEnd(t *testing.T) {
	var also bytes.Buffer
	var log *slog.Logger
	t.Run("inner", func(t *testing.T) {
		log = inproc.Logger(t, slog.LevelInfo, &also)
		log.Info("during")
		log.Debug("below the level")
	})
	// The inner test has ended: a line now must not reach its t.Log (which panics).
	log.Info("after")
	if got := also.String(); !strings.Contains(got, "during") || strings.Contains(got, "below the level") || !strings.Contains(got, "after") {
		t.Fatalf("tee got %q", got)
	}
}
