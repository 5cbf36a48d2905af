package itest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/testwait"
)

// A frontier step whose reply is lost (the connection drops after Redis ran it) runs
// once: the client does not send it again, which for a dispatch would lease a host a
// second time for a task nobody receives (and for an outcome would find its own lease
// consumed, the outcome stale). The lost run's lease is found by its call's nonce and its
// task returned with the error. The connection runs through a proxy that drops the reply
// of one script call.
func TestStepRunsOnceWhenItsReplyIsLost(t *testing.T) {
	t.Parallel()
	srv := redisproc.StartT(t, redisproc.Options{Ephemeral: true})
	px := startReplyDropper(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: px.addr, MaxRetries: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := testwait.Context(t)
	f := newTF(t, rdb, testOptions(0))
	var us []string
	for _, h := range manyHosts(10) {
		us = append(us, "http://"+h+"/")
	}
	if n := f.add("b1", urls(0, us...)...); n != 10 {
		t.Fatalf("queued %d of 10", n)
	}

	// Paused, a dispatch leases nothing and leaves its script cached in Redis, so that the
	// call whose reply is lost runs it.
	must(t, f.Pause(ctx))
	if tasks := f.dispatch(t0, 1); len(tasks) != 0 {
		t.Fatalf("dispatched %d tasks while paused", len(tasks))
	}
	must(t, f.Resume(ctx))

	px.armed.Store(true)
	*f.now = t0
	tasks, err := f.Dispatch(ctx, 1)
	if px.armed.Load() {
		t.Fatal("the proxy dropped no reply")
	}
	leases, lerr := rdb.HLen(ctx, f.Keyspace().Key("lease")).Result()
	if lerr != nil {
		t.Fatal(lerr)
	}
	t.Logf("dispatch of 1: %d tasks, err %v; %d leases in Redis", len(tasks), err, leases)
	if leases > 1 {
		t.Fatalf("a dispatch of at most 1 task whose reply was lost left %d leases: the step ran %d times", leases, leases)
	}
	// The lease of the run whose reply was lost is found and its task returned with the
	// error, so the caller publishes it instead of leaving the host to the reaper.
	if int64(len(tasks)) != leases {
		t.Fatalf("dispatch returned %d tasks (err %v), Redis holds %d leases: a lease nobody receives", len(tasks), err, leases)
	}
	f.check()
}

// replyDropper is a TCP proxy to Redis that, while armed, lets one script call (EVAL or
// EVALSHA) through and closes the client's connection instead of passing the reply back.
type replyDropper struct {
	addr  string
	armed atomic.Bool
}

func startReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			var drop atomic.Bool
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer s.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if bytes.Contains(bytes.ToLower(buf[:n]), []byte("eval")) && p.armed.Load() {
							drop.Store(true)
						}
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && drop.Load() && p.armed.CompareAndSwap(true, false) {
						// Redis ran the call; its client never hears of it.
						s.Close()
						return
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}
