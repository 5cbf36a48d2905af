package redisx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// LastError remembers why a client's last command or connection failed to reach Redis: a
// network error, not a reply (Redis answered) and not the caller's own deadline. go-redis
// retries a failed dial until the caller's deadline, which then is all the caller sees;
// Explain adds the reason.
type LastError struct {
	// err is nil while Redis answers; set on every command, so a load is the common path.
	err atomic.Pointer[error]
}

// TrackErrors adds a LastError to c. Call it before c is used by more than one goroutine.
func TrackErrors(c redis.UniversalClient) *LastError {
	l := &LastError{}
	c.AddHook(l)
	return l
}

// Explain returns err with the reason Redis was last unreachable when err is a deadline
// that cut a call short while Redis was unreachable; otherwise err as it is.
func (l *LastError) Explain(err error) error {
	if l == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	last := l.err.Load()
	if last == nil {
		return err
	}
	return fmt.Errorf("%w (Redis unreachable: %v)", err, *last)
}

func (l *LastError) note(err error) {
	var reply redis.Error
	switch {
	case err == nil, errors.As(err, &reply): // Redis answered
		if l.err.Load() != nil {
			l.err.Store(nil)
		}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller gave up; that says nothing about Redis.
	default:
		l.err.Store(&err)
	}
}

// DialHook implements redis.Hook.
func (l *LastError) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		l.note(err)
		return conn, err
	}
}

// ProcessHook implements redis.Hook.
func (l *LastError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		l.note(err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (l *LastError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		l.note(err)
		return err
	}
}
