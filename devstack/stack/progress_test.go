package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// A page the archiver has not written keeps the crawl from being over: without an
// archiver's consumer there is no archiver backlog; with one, each page it has not acked
// counts, so `make run` does not stop the archiver before the pages the crawl fetched.
func TestProgressCountsTheArchiversBacklog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := natsembed.StartT(t)
	nc, js, err := natsx.Connect(ctx, ns.URL(), "progress-test", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tm := topology.StageTimings{AckWait: 30 * time.Second, FetchAckWait: 150 * time.Second, MaxDeliver: 20}
	if err := natsx.Ensure(ctx, js, topology.DefaultOptions(1), tm, slog.Default()); err != nil {
		t.Fatal(err)
	}
	rs, err := redisproc.Start(ctx, redisproc.Options{})
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	defer rs.Stop()
	rdb, err := redisx.Open(rs.URL(), redisx.Timeouts{Dial: 2 * time.Second, Read: 5 * time.Second, Write: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()

	if _, err := js.Publish(ctx, topology.SubjectPages, []byte("page")); err != nil {
		t.Fatal(err)
	}
	p, err := ReadProgress(ctx, js, rdb, "trawl", 1, time.Minute)
	if err != nil {
		t.Fatalf("without an archiver: %v", err)
	}
	if n, ok := p.Backlog["archiver"]; ok {
		t.Errorf("without an archiver's consumer: archiver backlog %d, want none", n)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, topology.StreamPages, topology.ArchiverConsumer(tm)); err != nil {
		t.Fatal(err)
	}
	p, err = ReadProgress(ctx, js, rdb, "trawl", 1, time.Minute)
	if err != nil {
		t.Fatalf("with an archiver: %v", err)
	}
	if n := p.Backlog["archiver"]; n != 1 {
		t.Errorf("archiver backlog %d, want 1: the page it has not written", n)
	}
	if p.Backlog["parser"] != 1 {
		t.Errorf("parser backlog %d, want 1", p.Backlog["parser"])
	}
}

// A crawl is over after two readings in a row that say so: a reading that fails (Redis
// unreachable) between two quiet ones says nothing, so it does not end the wait.
func TestWaitIdleNeedsTwoReadingsInARow(t *testing.T) {
	quiet := Progress{Accepted: 3, Fetched: 3, Backlog: map[string]uint64{}, Seqs: map[string]uint64{"crawl.fetch": 3}}
	unreachable := errors.New("stack: progress: redis: dial tcp 127.0.0.1:6379: connect: connection refused")
	for _, tc := range []struct {
		name      string
		script    []error // nil: a quiet reading
		wantReads int
	}{
		{"two quiet readings", []error{nil, nil}, 2},
		{"a failed reading between them", []error{nil, unreachable, nil, nil}, 4},
		{"failed readings first", []error{unreachable, unreachable, nil, nil}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			read := func(context.Context) (Progress, error) {
				i := reads
				reads++
				if i >= len(tc.script) {
					return Progress{}, errors.New("read past the script: the wait should have ended")
				}
				if tc.script[i] != nil {
					return Progress{}, tc.script[i]
				}
				return quiet, nil
			}
			ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
			defer cancel()
			if _, _, err := WaitIdleOrParked(ctx, time.Millisecond, 0, read, nil); err != nil {
				t.Fatal(err)
			}
			if reads != tc.wantReads {
				t.Errorf("over after %d readings, want %d", reads, tc.wantReads)
			}
		})
	}
}

// A wait cut by a time limit (trawl-dev -timeout) says so and what was left queued, from the
// last reading it has, even when the limit fell during a reading that it cut short (before,
// the error was that reading's: "bucket TRAWL_CRAWL: context deadline exceeded").
func TestWaitIdleTimeLimitSaysWhatIsLeft(t *testing.T) {
	busy := Progress{At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Accepted: 40, Queued: 12, InFlight: 2, Hosts: 3,
		Fetched: 26, Backlog: map[string]uint64{}, Seqs: map[string]uint64{"crawl.fetch": 7}}
	busy.Waits.Waiting = 2
	reads := 0
	read := func(ctx context.Context) (Progress, error) {
		reads++
		if reads <= 2 {
			return busy, nil
		}
		// The reading in progress when the limit comes fails with it, as a KV read does.
		<-ctx.Done()
		return Progress{}, fmt.Errorf("stack: progress: bucket TRAWL_CRAWL: %w", ctx.Err())
	}
	ctx, cancel := context.WithTimeout(testwait.Context(t), 200*time.Millisecond)
	defer cancel()
	_, _, err := WaitIdleOrParked(ctx, time.Millisecond, 0, read, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want one wrapping context.DeadlineExceeded", err)
	}
	for _, want := range []string{"time limit reached", "12 URL(s) left queued on 3 active host(s) (2 waiting), 2 in flight", "as of 03:04:05"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "bucket") {
		t.Errorf("err %q names the reading the limit cut short", err)
	}
}
