package itest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/scrape"
	"github.com/trawl/trawl/devstack/storecopy"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// ackedButHeld leaves stream holding the messages ack acknowledges, as an OS crash may
// leave a server: the consumer's state on disk has the acknowledgements, the stream's
// files not the removals. nc must reconnect on its own.
func ackedButHeld(t *testing.T, ns *natsembed.Server, nc *nats.Conn, stream string, ack func()) {
	t.Helper()
	dir := filepath.Join(ns.StoreDir(), "jetstream", "$G", "streams", stream, "msgs")
	held := filepath.Join(t.TempDir(), "msgs")
	restart := func() {
		t.Helper()
		if err := ns.Restart(); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, 10*time.Second, "the client back on NATS", nc.IsConnected)
	}
	ns.StopKeepingStore()
	if err := storecopy.Copy(dir, held); err != nil {
		t.Fatal(err)
	}
	restart()
	ack()
	ns.StopKeepingStore()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(held, dir); err != nil {
		t.Fatal(err)
	}
	restart()
}

// ackAll takes n messages of cons and acknowledges each, waiting for the server's word.
func ackAll(t *testing.T, cons jetstream.Consumer, n int) {
	t.Helper()
	ctx := testwait.Context(t)
	got := 0
	testwait.Eventually(t, 10*time.Second, fmt.Sprintf("%d messages taken and acknowledged", n), func() bool {
		b, err := cons.Fetch(n-got, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return false
		}
		for m := range b.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			got++
		}
		return got == n
	})
}

// held reads how many messages stream holds.
func held(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	str, err := js.Stream(testwait.Context(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	return str.CachedInfo().State.Msgs
}

// A work queue back from a crash with messages its consumer acknowledged still held keeps
// them for ever (nats-server removes such messages at start on interest streams only);
// RemoveAcked removes them, and only them: another consumer's message waiting in the same
// stream is still delivered, and a stream kept by limits is not touched.
func TestRemoveAcked(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t)
	ctx := testwait.Context(t)
	nc, js, err := natsx.Connect(ctx, ns.URL(), "itest", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	for _, tc := range []struct {
		name      string
		retention jetstream.RetentionPolicy
		removed   int
		left      uint64 // messages the stream holds after the removal
	}{
		{"work queue", jetstream.WorkQueuePolicy, 3, 1},
		{"kept by limits", jetstream.LimitsPolicy, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ToUpper(strings.ReplaceAll(tc.name, " ", "_"))
			str, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Retention: tc.retention, Storage: jetstream.FileStorage})
			if err != nil {
				t.Fatal(err)
			}
			consumer := func(durable, filter string) jetstream.Consumer {
				c, err := str.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: durable, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			a, b := consumer("a", name+".a"), consumer("b", name+".b")
			for _, subj := range []string{".a", ".b", ".a", ".a"} {
				if _, err := js.Publish(ctx, name+subj, []byte(subj)); err != nil {
					t.Fatal(err)
				}
			}
			ackedButHeld(t, ns, nc, name, func() { ackAll(t, a, 3) })
			if tc.retention == jetstream.WorkQueuePolicy {
				info, err := a.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// The state this repairs; should a server remove them itself, it is not needed.
				if n := held(t, js, name); n != 4 || info.NumPending != 0 || info.AckFloor.Stream != 4 {
					t.Fatalf("the server took back from a crash holds %d messages, consumer a has %d pending and its ack floor at %d: want 4, 0 and 4 (acknowledged messages kept, never delivered)",
						n, info.NumPending, info.AckFloor.Stream)
				}
			}
			removed, err := natsx.RemoveAcked(ctx, js, name, "a")
			if err != nil {
				t.Fatal(err)
			}
			if removed != tc.removed {
				t.Errorf("removed %d, want %d", removed, tc.removed)
			}
			if n := held(t, js, name); n != tc.left {
				t.Errorf("stream holds %d messages, want %d", n, tc.left)
			}
			if again, err := natsx.RemoveAcked(ctx, js, name, "b"); err != nil || again != 0 {
				t.Errorf("consumer b, which acknowledged nothing: removed %d (%v), want 0", again, err)
			}
			mb, err := b.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for m := range mb.Messages() {
				if string(m.Data()) != ".b" {
					t.Errorf("consumer b got %q, want its own message", m.Data())
				}
				_ = m.Ack()
				return
			}
			t.Errorf("consumer b's message not delivered: %v", mb.Error())
		})
	}
}

// A service removes what the work-queue consumers it owns acknowledged and NATS still
// holds, when it starts and when NATS is back under it: here the fetch tasks of a crawl,
// whose backlog would otherwise never drain.
func TestRunnerRemovesAckedMessages(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"at start", "after a reconnect"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			ns := natsembed.StartT(t)
			env := runnerEnv(ns, nil)
			env["TRAWL_STREAM_MEMORY"] = "false"
			ctx := testwait.Context(t)
			nc, js := ownConnection(t, ns)
			t.Cleanup(nc.Close)
			common := envconfig.LoadCommon(envconfig.FromMap(env), "127.0.0.1:0")
			timings := common.Timings()
			if err := natsx.Ensure(ctx, js, common.Topology(), timings, slog.Default()); err != nil {
				t.Fatal(err)
			}
			tasks := func() {
				t.Helper()
				for i := range 3 {
					if _, err := js.Publish(ctx, fmt.Sprintf("crawl.fetch.%d", i), []byte("task")); err != nil {
						t.Fatal(err)
					}
				}
			}
			fetcher, err := js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
			if err != nil {
				t.Fatal(err)
			}
			var r *runner.Runner
			running := func() {
				stop := runInBackground(t, r)
				t.Cleanup(func() { _ = stop() })
			}
			if when == "at start" {
				tasks()
				ackedButHeld(t, ns, nc, topology.StreamFetch, func() { ackAll(t, fetcher, 3) })
				if n := held(t, js, topology.StreamFetch); n != 3 {
					t.Fatalf("CRAWL_FETCH holds %d messages before the service starts, want the 3 acknowledged", n)
				}
				r = startOwner(t, env)
				if n := held(t, js, topology.StreamFetch); n != 0 {
					t.Errorf("CRAWL_FETCH holds %d messages once the service started, want none", n)
				}
				running()
			}
			if when == "after a reconnect" {
				r = startOwner(t, env)
				running()
				tasks()
				ackedButHeld(t, ns, nc, topology.StreamFetch, func() { ackAll(t, fetcher, 3) })
			}
			// The count is added once the sweep returns, after its last removal: polled with it.
			const removed = `trawl_nats_acked_removed_total{stream="CRAWL_FETCH"}`
			testwait.EventuallyState(t, 15*time.Second, "CRAWL_FETCH emptied of what the fetcher acknowledged, and the 3 counted", func() (bool, string) {
				n := held(t, js, topology.StreamFetch)
				v, found, err := scrape.Read(ctx, r.Addr(), removed)
				if err != nil {
					t.Fatal(err)
				}
				return n == 0 && found && v == 3, fmt.Sprintf("%d held; %s = %v (exported: %v)", n, removed, v, found)
			})
		})
	}
}

// startOwner starts a runner as the scheduler, the owner of CRAWL_FETCH's consumer.
func startOwner(t *testing.T, env map[string]string) *runner.Runner {
	t.Helper()
	ctx, cancel := context.WithTimeout(testwait.Context(t), 15*time.Second)
	defer cancel()
	r, err := runner.Start(ctx, topology.ServiceScheduler, envconfig.LoadCommon(envconfig.FromMap(env), "127.0.0.1:0"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}
