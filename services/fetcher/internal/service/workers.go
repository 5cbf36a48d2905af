package service

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/natsx"
)

// workers runs a handler on a fixed set of long-lived goroutines, one per concurrent
// task. The consume loop starts a goroutine per message; a task run there would grow that
// fresh stack again inside the JSON decoder and the HTTP client every time, while a
// long-lived worker keeps the stack it grew. The consume loop's goroutine only hands the
// task over and waits for its result, so acking, naking, draining and gating stay the
// loop's.
type workers struct {
	jobs chan *job
	wg   sync.WaitGroup
	pool sync.Pool // *job, each with its own result channel
}

type job struct {
	ctx  context.Context
	msg  jetstream.Msg
	done chan error
}

// startWorkers starts n workers running h. n must be at least the consume loop's
// concurrency, so a handed-over task never waits for a worker.
func startWorkers(n int, h natsx.Handler) *workers {
	w := &workers{jobs: make(chan *job)}
	w.pool.New = func() any { return &job{done: make(chan error, 1)} }
	w.wg.Add(n)
	for range n {
		go func() {
			defer w.wg.Done()
			for j := range w.jobs {
				j.done <- h(j.ctx, j.msg)
			}
		}()
	}
	return w
}

// handle is a natsx.Handler that runs the task on a worker.
func (w *workers) handle(ctx context.Context, msg jetstream.Msg) error {
	j := w.pool.Get().(*job)
	j.ctx, j.msg = ctx, msg
	w.jobs <- j
	err := <-j.done
	j.ctx, j.msg = nil, nil
	w.pool.Put(j)
	return err
}

// stop ends the workers once no handle call is running (the consume loop returned).
func (w *workers) stop() {
	close(w.jobs)
	w.wg.Wait()
}
