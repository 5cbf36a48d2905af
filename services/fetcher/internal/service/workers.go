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
// message's tasks over, one after the other, and waits for them all, so acking, naking,
// draining and gating stay the loop's, and a batch of tasks costs no goroutine of its own.
type workers struct {
	jobs chan *job
	wg   sync.WaitGroup
	pool sync.Pool // *job
}

type job struct {
	ctx  context.Context
	task *crawlmsg.FetchTask
	done *sync.WaitGroup // the handing-over call's
}

// startWorkers starts n workers running h. n must be at least the tasks the consume loop
// holds at once, so a handed-over task never waits for a worker.
func startWorkers(n int, h func(context.Context, *crawlmsg.FetchTask)) *workers {
	w := &workers{jobs: make(chan *job)}
	w.pool.New = func() any { return new(job) }
	w.wg.Add(n)
	for range n {
		go func() {
			defer w.wg.Done()
			for j := range w.jobs {
				h(j.ctx, j.task)
				j.done.Done()
			}
		}()
	}
	return w
}

// run runs the task on a worker and returns when it is done.
func (w *workers) run(ctx context.Context, task *crawlmsg.FetchTask) {
	var done sync.WaitGroup
	done.Add(1)
	j := w.hand(ctx, task, &done)
	done.Wait()
	w.put(j)
}

// runAll runs every task at once, each on a worker, and returns when all are done. The
// caller holds no more tasks than there are idle workers (the consume loop's slots), so
// each hand-over is taken at once.
func (w *workers) runAll(ctx context.Context, tasks []crawlmsg.FetchTask) {
	var done sync.WaitGroup
	done.Add(len(tasks))
	var small [8]*job
	js := small[:0]
	for i := range tasks {
		js = append(js, w.hand(ctx, &tasks[i], &done))
	}
	done.Wait()
	for _, j := range js {
		w.put(j)
	}
}

// hand gives task to a worker, which marks done when it has run it.
func (w *workers) hand(ctx context.Context, task *crawlmsg.FetchTask, done *sync.WaitGroup) *job {
	j := w.pool.Get().(*job)
	j.ctx, j.task, j.done = ctx, task, done
	w.jobs <- j
	return j
}

func (w *workers) put(j *job) {
	*j = job{}
	w.pool.Put(j)
}

// stop ends the workers once no handle call is running (the consume loop returned).
func (w *workers) stop() {
	close(w.jobs)
	w.wg.Wait()
}
