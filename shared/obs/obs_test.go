package obs

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServer(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "trawl_test_things_total", Help: "x"})
	reg.MustRegister(c)
	c.Inc()
	var redisDown atomic.Bool
	s, err := NewServer("127.0.0.1:0", reg, map[string]Check{
		"redis": func(context.Context) error {
			if redisDown.Load() {
				return errors.New("connection refused")
			}
			return nil
		},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "trawl_test_things_total 1") {
		t.Fatalf("/metrics = %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz = %d", code)
	}
	if got := Probe(context.Background(), s.Addr(), io.Discard); got != 0 {
		t.Fatalf("Probe ready = %d", got)
	}
	redisDown.Store(true)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "redis: connection refused") {
		t.Fatalf("/readyz with redis down = %d %q", code, body)
	}
	if got := Probe(context.Background(), s.Addr(), io.Discard); got != 1 {
		t.Fatalf("Probe not ready = %d", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server did not shut down")
	}
}
