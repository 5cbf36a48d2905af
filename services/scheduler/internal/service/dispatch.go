package service

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// dispatchLoop hands out due hosts' tasks until ctx ends. After a full batch it goes again
// at once; otherwise it sleeps until the earliest next fetch time, a wake-up from the
// consumers, or maxIdle, whichever comes first.
//
// Nothing is leased while JetStream cannot take the tasks: a leased task that is not
// published holds its host for a lease TTL and then costs its URL an attempt, so a NATS
// outage longer than a few lease TTLs would otherwise end URLs as failed. Nor beyond what
// the gate allows: the fetchers' capacity and the later stages' backlogs.
func (s *shard) dispatchLoop(ctx context.Context) {
	batch := s.cfg.DispatchBatch
	failures, held := 0, 0
	jsDown := false
	for ctx.Err() == nil {
		if err := s.natsReady(ctx, jsDown); err != nil {
			if held%40 == 0 {
				s.log.Warn("dispatch held: JetStream unavailable; nothing is leased until it answers", "err", err)
			}
			held++
			s.m.dispatchHeld.WithLabelValues(s.label).Inc()
			s.sleep(ctx, errorPause)
			continue
		}
		if held > 0 {
			s.log.Info("dispatch resumed: JetStream answers", "held_steps", held)
			held = 0
		}
		jsDown = false
		n := s.gate.take(ctx, batch)
		if n == 0 {
			// Out of credit, the gate reads the fetchers again soon; held, it waits for
			// its next reading of the backlogs.
			wait := gateMinPoll
			if s.gate.holding() {
				wait = maxIdle
			}
			if !s.sleep(ctx, wait) {
				return
			}
			continue
		}
		start := s.now()
		tasks, err := s.f.Dispatch(ctx, n)
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
			// Tasks the failed step leased and the frontier found (a lost reply) are
			// published like any others, after their leases are on a replica; the rest are
			// recovered by the reaper.
			published := 0
			if len(tasks) > 0 {
				if werr := s.confirmLeases(ctx, tasks); werr != nil {
					s.log.Warn("dispatch: leases not confirmed on a replica; tasks held for the reaper", "tasks", len(tasks), "err", werr)
				} else {
					jsDown = !s.publish(ctx, tasks)
					published = len(tasks)
				}
			}
			s.gate.published(n, published)
			s.sleep(ctx, errorPause)
			continue
		}
		if failures > 0 {
			s.log.Info("dispatch recovered", "after_failures", failures)
			failures = 0
		}
		if s.rules != nil {
			kept, settled, err := s.f.ChargeDomains(ctx, s.rules(), tasks)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("dispatch: domain budgets not charged; the tasks go out", "tasks", len(tasks), "err", err)
			}
			if settled > 0 {
				s.log.Info("domain budget spent: tasks ended over budget", "tasks", settled)
			}
			tasks = kept
		}
		if err := s.confirmLeases(ctx, tasks); err != nil {
			// A lease lost with a Redis master would let its host be leased again while the
			// task is fetched; unpublished, the tasks come back through the reaper.
			s.log.Warn("dispatch: leases not confirmed on a replica; tasks held for the reaper", "tasks", len(tasks), "err", err)
			s.gate.published(n, 0)
			s.sleep(ctx, errorPause)
			continue
		}
		ok := s.publish(ctx, tasks)
		s.gate.published(n, len(tasks))
		if !ok {
			jsDown = true
			s.sleep(ctx, errorPause)
			continue
		}
		if len(tasks) >= n {
			continue
		}
		wait := maxIdle
		if next, ok, err := s.f.NextWake(ctx); err == nil && ok {
			// At least 1ms: a host due now but not dispatched means another process
			// took it or a step is racing; the wake-up channel covers the rest.
			wait = min(wait, max(next, time.Millisecond))
		}
		if !s.sleep(ctx, wait) {
			return
		}
	}
}

// natsReady reports whether tasks can be published: the connection is up and, after a
// failed publish (probe), the fetch stream answers.
func (s *shard) natsReady(ctx context.Context, probe bool) error {
	if nc := s.js.Conn(); nc != nil && !nc.IsConnected() {
		return fmt.Errorf("nats: %s", nc.Status())
	}
	if !probe {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, err := s.js.Stream(pctx, topology.StreamFetch); err != nil {
		return fmt.Errorf("stream %s: %w", topology.StreamFetch, err)
	}
	return nil
}

// publish sends tasks in messages of up to TRAWL_TASK_BATCH tasks (one message per task
// costs NATS, the fetcher and this loop as much as the task itself), each with Nats-Msg-Id
// "task:<lease of its first task>", and reports whether JetStream stored them. Once
// leased, a task is published even if ctx ends meanwhile; if publishing fails the lease
// expires and the reaper puts the URL back. A failed publish cannot release its leases at
// once: JetStream may have stored a task whose acknowledgement was lost.
func (s *shard) publish(ctx context.Context, tasks []crawlmsg.FetchTask) bool {
	if len(tasks) == 0 {
		return true
	}
	msgs := make([]*nats.Msg, 0, (len(tasks)+s.cfg.Common.TaskBatch-1)/s.cfg.Common.TaskBatch)
	for start := 0; start < len(tasks); start += s.cfg.Common.TaskBatch {
		chunk := tasks[start:min(start+s.cfg.Common.TaskBatch, len(tasks))]
		var data []byte
		var err error
		if len(chunk) == 1 {
			data, err = crawlmsg.Marshal(&chunk[0])
		} else {
			data, err = crawlmsg.Marshal(&crawlmsg.TaskBatch{Tasks: chunk})
		}
		if err != nil {
			s.log.Error("encode fetch tasks; their leases will expire", "tasks", len(chunk), "err", err)
			continue
		}
		m := natsx.NewMsg(s.subject, topology.TaskID(chunk[0].Lease), data)
		m.Header.Set(crawlmsg.TasksHeader, strconv.Itoa(len(chunk)))
		msgs = append(msgs, m)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := natsx.PublishBatch(pctx, s.js, msgs); err != nil {
		s.m.publishFailures.WithLabelValues(s.label).Add(float64(len(tasks)))
		s.log.Error("publish fetch tasks failed; their leases will expire and the reaper will requeue them",
			"tasks", len(tasks), "lease_ttl", s.cfg.Common.LeaseTTL, "err", err)
		return false
	}
	s.m.dispatched.WithLabelValues(s.label).Add(float64(len(tasks)))
	s.gate.perMessage(len(tasks), len(msgs))
	return true
}

// confirmLeases waits, when TRAWL_REDIS_WAIT is set and tasks were leased, until a Redis
// replica has their leases.
func (s *shard) confirmLeases(ctx context.Context, tasks []crawlmsg.FetchTask) error {
	if len(tasks) == 0 {
		return nil
	}
	return s.waitReplicated(ctx)
}
