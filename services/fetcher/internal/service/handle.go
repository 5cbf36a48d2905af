package service

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/natsx"
)

const (
	// deadlineSlack is added to the fetch timeout when deciding whether a task can still be
	// served: the request must end, and its outcome be published, before the lease does.
	// It is also the margin by which every request's context deadline precedes the lease
	// deadline, whatever time the robots lookup took: the slack is left for publishing.
	deadlineSlack = 2 * time.Second
	// minRequestTime: a request that would have less than this before its cut-off is not
	// started (the task is reported expired, no attempt counted).
	minRequestTime = time.Second
	// publishTimeout bounds waiting for JetStream to store a task's messages.
	publishTimeout = 5 * time.Second
)

// handle serves one crawl.fetch message: a task, or a batch of tasks of different hosts
// run at once on the workers (natsx.ConsumeEach gave it a slot per task: taskCount). It
// returns once every task has ended, with its outcome stored or given up (its lease then
// brings the URL back), so the message is acked; only one that cannot be read is
// terminated. A message is never nak'ed: a temporary failure is retried in place. So it is
// delivered again only after AckWait, which exceeds the lease, when each of its tasks is
// answered expired without a request, or after a NATS restart lost its delivery, when a
// task whose lease has ended is answered without one too (mayBeRedelivered): a request
// that was made is never made again for the same lease.
func (s *Service) handle(ctx context.Context, msg jetstream.Msg) error {
	tasks, err := crawlmsg.DecodeTasks(msg.Data())
	if err != nil {
		return err // ErrMalformed / ErrVersion: permanent, terminated by natsx
	}
	s.work.runAll(ctx, tasks)
	return nil
}

// taskCount is how many tasks a crawl.fetch message holds, from its header (1 without
// one: a single task).
func taskCount(m jetstream.Msg) int {
	if n, err := strconv.Atoi(m.Headers().Get(crawlmsg.TasksHeader)); err == nil && n > 0 {
		return n
	}
	return 1
}

// handleTask serves one fetch task on a worker.
func (s *Service) handleTask(ctx context.Context, task *crawlmsg.FetchTask) {
	s.m.inflight.Inc()
	defer s.m.inflight.Dec()
	s.outcomes.begin()
	defer s.outcomes.end()

	// A task in hand is finished on shutdown: its request is owed to the host's politeness
	// accounting and its lease blocks the host until then. Bound it by its own budget
	// rather than by the consume loop's drain.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.taskBudget())
	defer cancel()

	out, page, err := s.process(ctx, task)
	// An error comes before any request (Redis failed for robots.txt): the task is tried
	// again in place, and past its deadline process answers expired.
	for try := uint64(1); err != nil; try++ {
		s.noteError(task, "task", err)
		if v := errclass.Of(err); v.Class == errclass.Permanent {
			s.m.permanentErrors.WithLabelValues("task", v.Reason).Inc()
			s.log.Error("task failed for good before its request; its lease will bring the URL back, counting an attempt", "url", task.URL, "reason", v.Reason, "err", err)
			return
		}
		if !ctxsleep.Sleep(ctx, natsx.DefaultBackoff(try)) {
			s.log.Error("task given up before its request; its lease will bring the URL back", "url", task.URL, "err", err)
			return
		}
		s.log.Warn("task failed before its request; retrying", "url", task.URL, "try", try, "err", err)
		out, page, err = s.process(ctx, task)
	}
	if err := s.deliver(task, out, page); err != nil {
		// The request was made, so it is never tried again: its lease expires and the
		// scheduler re-queues the URL after the host's delay (a duplicate fetch the design
		// allows).
		s.m.publishFailures.Inc()
		s.log.Error("results not published before the lease deadline; the lease will expire and the URL be retried", "url", task.URL, "err", err)
		return
	}
	if page != nil && page.reusable {
		page.resp.Release()
	}
	s.m.outcomes.WithLabelValues(string(out.Kind)).Inc()
	if s.log.Enabled(ctx, slog.LevelDebug) {
		// Checked first: the arguments alone would cost every page four allocations.
		s.log.Debug("task done", "url", task.URL, "kind", out.Kind, "status", out.Status, "ms", out.DurationMs)
	}
}

// taskBudget bounds one task: a robots lookup, one request and publishing.
func (s *Service) taskBudget() time.Duration {
	return s.cfg.FetchTimeout + publishTimeout + deadlineSlack
}
