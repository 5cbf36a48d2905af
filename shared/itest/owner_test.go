package itest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// Each pipeline consumer takes its settings from one service, whichever starts last: a
// service whose TRAWL_LEASE_TTL or TRAWL_ACK_WAIT would change a consumer another service
// owns is refused, naming the variable and both values, and the consumer keeps its owner's.
func TestConsumerSettingsHaveOneOwner(t *testing.T) {
	t.Parallel()
	start := func(ns *natsembed.Server, name string, vars map[string]string) error {
		env := runnerEnv(ns, nil)
		for k, v := range vars {
			env[k] = v
		}
		ctx, cancel := context.WithTimeout(testwait.Context(t), 20*time.Second)
		defer cancel()
		r, err := runner.Start(ctx, name, envconfig.LoadCommon(envconfig.FromMap(env), "127.0.0.1:0"), slog.New(slog.DiscardHandler))
		if err == nil {
			r.Close()
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: start-up waited for its deadline: %v", name, err)
		}
		return err
	}
	ackWait := func(ns *natsembed.Server, stream, durable string) time.Duration {
		js := connectJS(t, ns)
		c, err := js.Consumer(testwait.Context(t), stream, durable)
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo().Config.AckWait
	}
	lease := func(d string) map[string]string {
		return map[string]string{"TRAWL_LEASE_TTL": d, "TRAWL_ACK_WAIT": "10s"}
	}

	t.Run("owner first", func(t *testing.T) {
		ns := natsembed.StartT(t)
		if err := start(ns, "scheduler", lease("2m")); err != nil {
			t.Fatal(err)
		}
		err := start(ns, "fetcher", lease("1m"))
		if !errors.Is(err, natsx.ErrSettingsDiffer) {
			t.Fatalf("fetcher with another TRAWL_LEASE_TTL: %v, want ErrSettingsDiffer", err)
		}
		t.Logf("refused: %v", err)
		for _, want := range []string{"TRAWL_LEASE_TTL=1m0s", "TRAWL_LEASE_TTL=2m0s", "scheduler"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if got := ackWait(ns, topology.StreamFetch, topology.ConsumerFetcher); got != 2*time.Minute+30*time.Second {
			t.Errorf("fetch consumer's ack wait %s after the fetcher started, want the scheduler's 2m30s", got)
		}
		if err := start(ns, "fetcher", lease("2m")); err != nil {
			t.Errorf("fetcher with the scheduler's TRAWL_LEASE_TTL: %v", err)
		}
	})
	t.Run("owner last", func(t *testing.T) {
		ns := natsembed.StartT(t)
		if err := start(ns, "fetcher", lease("1m")); err != nil {
			t.Fatal(err)
		}
		if err := start(ns, "scheduler", lease("2m")); err != nil {
			t.Fatal(err)
		}
		if got := ackWait(ns, topology.StreamFetch, topology.ConsumerFetcher); got != 2*time.Minute+30*time.Second {
			t.Errorf("fetch consumer's ack wait %s, want the scheduler's 2m30s", got)
		}
		js := connectJS(t, ns)
		c, err := js.Consumer(testwait.Context(t), topology.StreamFetch, topology.ConsumerFetcher)
		if err != nil {
			t.Fatal(err)
		}
		if got := topology.LeaseTTL(c.CachedInfo().Config); got != 2*time.Minute {
			t.Errorf("lease TTL in force %s, want the scheduler's 2m", got)
		}
		if err := start(ns, "parser", lease("1m")); !errors.Is(err, natsx.ErrSettingsDiffer) {
			t.Errorf("parser with another TRAWL_LEASE_TTL: %v, want ErrSettingsDiffer", err)
		}
	})
	t.Run("ack wait", func(t *testing.T) {
		ns := natsembed.StartT(t)
		if err := start(ns, "dedup", map[string]string{"TRAWL_ACK_WAIT": "10s"}); err != nil {
			t.Fatal(err)
		}
		err := start(ns, "scheduler", map[string]string{"TRAWL_ACK_WAIT": "20s"})
		if !errors.Is(err, natsx.ErrSettingsDiffer) || !strings.Contains(err.Error(), "TRAWL_ACK_WAIT=10s") || !strings.Contains(err.Error(), "TRAWL_ACK_WAIT=20s") {
			t.Fatalf("scheduler with another TRAWL_ACK_WAIT: %v, want ErrSettingsDiffer naming both values", err)
		}
		if got := ackWait(ns, topology.StreamDiscovered, topology.ConsumerDedup); got != 10*time.Second {
			t.Errorf("dedup consumer's ack wait %s, want dedup's 10s", got)
		}
	})
}

func connectJS(t *testing.T, ns *natsembed.Server) jetstream.JetStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
	defer cancel()
	nc, js, err := natsx.Connect(ctx, ns.URL(), "itest", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return js
}
