package stack

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
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
	p, err := ReadProgress(ctx, js, rdb, "trawl", 1)
	if err != nil {
		t.Fatalf("without an archiver: %v", err)
	}
	if n, ok := p.Backlog["archiver"]; ok {
		t.Errorf("without an archiver's consumer: archiver backlog %d, want none", n)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, topology.StreamPages, topology.ArchiverConsumer(tm)); err != nil {
		t.Fatal(err)
	}
	p, err = ReadProgress(ctx, js, rdb, "trawl", 1)
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
