package service

import (
	"context"
	"sync"

	"github.com/trawl/trawl/shared/crawlmsg"
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
	task *crawlmsg.FetchTask
	done chan struct{}
}

// startWorkers starts n workers running h. n must be at least the tasks the consume loop
// holds at once, so a handed-over task never waits for a worker.
func startWorkers(n int, h func(context.Context, *crawlmsg.FetchTask)) *workers {
	w := &workers{jobs: make(chan *job)}
	w.pool.New = func() any { return &job{done: make(chan struct{}, 1)} }
	w.wg.Add(n)
	for range n {
		go func() {
			defer w.wg.Done()
			for j := range w.jobs {
				h(j.ctx, j.task)
				j.done <- struct{}{}
			}
		}()
	}
	return w
}

// run runs the task on a worker and returns when it is done.
func (w *workers) run(ctx context.Context, task *crawlmsg.FetchTask) {
	j := w.pool.Get().(*job)
	j.ctx, j.task = ctx, task
	w.jobs <- j
	<-j.done
	j.ctx, j.task = nil, nil
	w.pool.Put(j)
}

// stop ends the workers once no handle call is running (the consume loop returned).
func (w *workers) stop() {
	close(w.jobs)
	w.wg.Wait()
}
