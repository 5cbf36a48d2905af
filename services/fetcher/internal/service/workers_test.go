package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
)

type taskKey struct{}

// TestWorkersRunTasksOnLongLivedGoroutines: tasks handed over from many short-lived
// goroutines (as the consume loop starts them) all run on the n workers, and each caller
// gets its own task's result.
func TestWorkersRunTasksOnLongLivedGoroutines(t *testing.T) {
	const n, tasks = 3, 60
	var mu sync.Mutex
	ran := map[string]bool{} // goroutine ids the handler ran on
	w := startWorkers(n, func(ctx context.Context, task *crawlmsg.FetchTask) {
		mu.Lock()
		ran[goroutineID()] = true
		mu.Unlock()
		task.Lease = fmt.Sprintf("done %d", ctx.Value(taskKey{}))
	})
	// The consume loop never has more tasks running than workers: n slots.
	slots := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := range tasks {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			task := &crawlmsg.FetchTask{}
			w.run(context.WithValue(context.Background(), taskKey{}, i), task)
			if want := fmt.Sprintf("done %d", i); task.Lease != want {
				t.Errorf("caller of task %d: its task was run as %q", i, task.Lease)
			}
		}()
	}
	wg.Wait()
	w.stop()
	if len(ran) > n {
		t.Errorf("tasks ran on %d goroutines, want at most the %d workers", len(ran), n)
	}
	if len(ran) == 0 {
		t.Error("no task ran")
	}
}

// goroutineID reads the current goroutine's number from its stack header.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	if len(id) == 0 {
		panic(errors.New("no goroutine id in stack header"))
	}
	return string(id)
}

// TestWorkersRunAllAtOnce: the tasks of one batch run at the same time, one per worker
// (each handler waits, up to a bound, until all of them have started), and runAll returns
// only once every one has finished.
func TestWorkersRunAllAtOnce(t *testing.T) {
	const n = 4
	ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
	defer cancel()
	var started sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	go func() { started.Wait(); close(release) }()
	w := startWorkers(n, func(_ context.Context, task *crawlmsg.FetchTask) {
		started.Done()
		select {
		case <-release:
			task.Lease = "ran with the others"
		case <-ctx.Done():
			// Not all started: they are run one after the other.
			task.Lease = "ran alone"
		}
	})
	defer w.stop()
	tasks := make([]crawlmsg.FetchTask, n)
	w.runAll(context.Background(), tasks)
	for i, tk := range tasks {
		if tk.Lease != "ran with the others" {
			t.Errorf("task %d: %q when runAll returned", i, tk.Lease)
		}
	}
}
