package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// BenchmarkPagesPerMessage measures what carrying k pages in one message of crawl.pages
// would save NATS and its clients, apart from the pipeline: the stream as topology declares
// it (interest retention, file storage, the duplicate window), trawl-nats as a process of
// its own at each TRAWL_FSYNC level, pages of 1.8 KB (the bench web's) published 40
// messages at a time with a Nats-Msg-Id each, and one pull consumer acking every message,
// as the parser does. It reports NATS's and this process's CPU per page: each page a
// message is what the pipeline does today; k > 1 is the wire change docs/cost-per-page.md
// weighs ("The pages' messages").
func BenchmarkPagesPerMessage(b *testing.B) {
	for _, level := range []durability.Level{durability.Default, durability.Always} {
		for _, k := range []int{1, 2, 4, 8, 16} {
			b.Run(fmt.Sprintf("fsync=%s/pages=%d", level, k), func(b *testing.B) { benchPagesPerMessage(b, level, k) })
		}
	}
}

func benchPagesPerMessage(b *testing.B, level durability.Level, k int) {
	const pageSize, inFlight = 1800, 40
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	url, pid := startNATSProc(b, ctx, level)
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	var cfg jetstream.StreamConfig
	for _, c := range topology.Streams(topology.DefaultOptions(1)) {
		if c.Name == topology.StreamPages {
			cfg = c
		}
	}
	st, err := js.CreateStream(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "parser", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000})
	if err != nil {
		b.Fatal(err)
	}
	msgs := (b.N + k - 1) / k
	body := []byte(strings.Repeat("<p>lorem ipsum dolor sit amet</p>\n", pageSize*k/34+1)[:pageSize*k])

	natsCPU0, err := stack.CPUTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	selfCPU0 := selfCPU(b)
	b.ResetTimer()
	consumed := make(chan error, 1)
	go func() {
		for got := 0; got < msgs; {
			batch, err := cons.Fetch(64, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				consumed <- err
				return
			}
			for m := range batch.Messages() {
				if err := m.Ack(); err != nil {
					consumed <- err
					return
				}
				got++
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				consumed <- err
				return
			}
			if ctx.Err() != nil {
				consumed <- fmt.Errorf("%d of %d messages consumed: %w", got, msgs, ctx.Err())
				return
			}
		}
		consumed <- nil
	}()
	pending := make([]jetstream.PubAckFuture, 0, inFlight)
	settle := func() {
		for _, f := range pending {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			case <-ctx.Done():
				b.Fatalf("waiting for a pub-ack: %v", ctx.Err())
			}
		}
		pending = pending[:0]
	}
	for i := range msgs {
		m := nats.NewMsg(topology.SubjectPages)
		m.Data = body
		m.Header.Set(nats.MsgIdHdr, "page-"+strconv.Itoa(i))
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		if pending = append(pending, f); len(pending) == inFlight {
			settle()
		}
	}
	settle()
	if err := <-consumed; err != nil {
		b.Fatal(err)
	}
	// Acks travel without a reply: the cost is counted once the server has them all.
	testwait.EventuallyState(b, 30*time.Second, "every page acked at the server", func() (bool, string) {
		ci, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return ci.NumAckPending == 0 && ci.NumPending == 0, fmt.Sprintf("ack pending %d, pending %d", ci.NumAckPending, ci.NumPending)
	})
	b.StopTimer()
	natsCPU1, err := stack.CPUTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	pages := float64(msgs * k)
	b.ReportMetric(float64((natsCPU1-natsCPU0).Microseconds())/pages, "nats-µs/page")
	b.ReportMetric(float64((selfCPU(b)-selfCPU0).Microseconds())/pages, "client-µs/page")
}

// startNATSProc starts trawl-nats at level with a store of the benchmark's own and returns
// its URL and process id; it is stopped when the benchmark ends.
func startNATSProc(b *testing.B, ctx context.Context, level durability.Level) (string, int) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, stack.NATSServer), "-store", b.TempDir(), "-port", "0", "-fsync", string(level))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", stack.NATSServer, err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	// trawl-nats prints its URL once it serves.
	url, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("%s printed no URL: %v", stack.NATSServer, err)
	}
	return strings.TrimSpace(url), cmd.Process.Pid
}

// selfCPU is this process's user and system time.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
