package service

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
)

// dispatchLoop hands out due hosts' tasks until ctx ends. After a full batch it goes again
// at once; otherwise it sleeps until the earliest next fetch time, a wake-up from the
// consumers, or maxIdle, whichever comes first.
func (s *shard) dispatchLoop(ctx context.Context) {
	batch := s.cfg.DispatchBatch
	failures := 0
	for ctx.Err() == nil {
		start := time.Now()
		tasks, err := s.f.Dispatch(ctx, start, batch)
		s.observe("dispatch", start, err)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Once per ~10s during an outage, not four times a second.
			if failures%40 == 0 {
				s.log.Warn("dispatch failed", "err", err, "consecutive", failures+1)
			}
			failures++
			// Tasks already leased in a failed step are recovered by the reaper.
			s.publish(ctx, tasks)
			s.sleep(ctx, errorPause)
			continue
		}
		if failures > 0 {
			s.log.Info("dispatch recovered", "after_failures", failures)
			failures = 0
		}
		s.publish(ctx, tasks)
		if len(tasks) >= batch {
			continue
		}
		wait := maxIdle
		if next, ok, err := s.f.NextWake(ctx); err == nil && ok {
			// At least 1ms: a host due now but not dispatched means another process
			// took it or a step is racing; the wake-up channel covers the rest.
			wait = min(wait, max(time.Until(next), time.Millisecond))
		}
		if !s.sleep(ctx, wait) {
			return
		}
	}
}

// publish sends tasks with Nats-Msg-Id "task:<lease>". Once leased, a task is published
// even if ctx ends meanwhile; if publishing fails the lease expires and the reaper puts
// the URL back.
func (s *shard) publish(ctx context.Context, tasks []crawlmsg.FetchTask) {
	if len(tasks) == 0 {
		return
	}
	msgs := make([]*nats.Msg, 0, len(tasks))
	for i := range tasks {
		data, err := crawlmsg.Marshal(&tasks[i])
		if err != nil {
			s.log.Error("encode fetch task; lease will expire", "host", tasks[i].Host, "err", err)
			continue
		}
		msgs = append(msgs, natsx.NewMsg(s.subject, "task:"+tasks[i].Lease, data))
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := natsx.PublishBatch(pctx, s.js, msgs); err != nil {
		s.m.publishFailures.WithLabelValues(s.label).Add(float64(len(msgs)))
		s.log.Error("publish fetch tasks failed; their leases will expire and the reaper will requeue them",
			"tasks", len(msgs), "lease_ttl", s.cfg.LeaseTTL, "err", err)
		return
	}
	s.m.dispatched.WithLabelValues(s.label).Add(float64(len(msgs)))
}
