package natsembed

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/topology"
)

// BenchmarkDuplicateWindowMemory measures what the NATS server holds in memory for each
// Nats-Msg-Id within a stream's duplicate window: the Go heap of an in-process server after
// n messages published with ids (as the pipeline's, "task:" and a lease) to a work-queue
// stream and consumed, less the same without ids. The messages are gone from the stream,
// so what stays is the duplicate window's. The server's memory for ids is then the message
// rate × topology.Options.DuplicateWindow × this (docs/cost-per-page.md, "Scale"), and its
// resident memory up to 1 + GOGC/100 times that. Run with -benchtime 1x.
func BenchmarkDuplicateWindowMemory(b *testing.B) {
	const n = 200_000
	for b.Loop() {
		heap := map[bool]float64{}
		for _, ids := range []bool{false, true} {
			heap[ids] = serverHeapAfter(b, n, ids)
		}
		b.ReportMetric((heap[true]-heap[false])/n, "B/id")
	}
}

// serverHeapAfter is the process's live heap after n messages went through a stream of a
// fresh server (with ids or without) and were consumed.
func serverHeapAfter(b *testing.B, n int, ids bool) float64 {
	s, err := Start(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: topology.DefaultOptions(1).DuplicateWindow})
	if err != nil {
		b.Fatal(err)
	}
	for start := 0; start < n; start += 1000 {
		futures := make([]jetstream.PubAckFuture, 0, 1000)
		for i := start; i < start+1000; i++ {
			m := nats.NewMsg("w")
			m.Data = []byte("x")
			if ids {
				m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("task:%016x%016x", i, i*7919))
			}
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				b.Fatal(err)
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			case <-ctx.Done():
				b.Fatal(ctx.Err())
			}
		}
	}
	// Consumed: the work queue drops each message as it is acked, so the stream holds none.
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000})
	if err != nil {
		b.Fatal(err)
	}
	for got := 0; got < n; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		var last jetstream.Msg
		for m := range batch.Messages() {
			if last != nil {
				if err := last.Ack(); err != nil {
					b.Fatal(err)
				}
			}
			last = m
			got++
		}
		if err := batch.Error(); err != nil {
			b.Fatal(err)
		}
		if last == nil {
			b.Fatalf("%d of %d messages consumed, then none", got, n)
		}
		if err := last.DoubleAck(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
		b.Fatalf("stream after consuming: %+v, %v", info, err)
	}
	nc.Close()
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc)
}
