// Package conn opens trawlctl's connections. Unlike the services, which wait for NATS and
// Redis forever (natsx.Connect, redisx.Connect), a command-line tool must fail fast with
// one clear line when a server is not there.
package conn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// Timeout bounds connecting to either server.
const Timeout = 3 * time.Second

// ErrUnreachable marks a server that could not be reached.
var ErrUnreachable = errors.New("unreachable")

// NATS connects to url and returns the connection and its JetStream context.
func NATS(ctx context.Context, url string) (*nats.Conn, jetstream.JetStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(url, nats.Name("trawlctl"), nats.Timeout(Timeout),
		// A tool's session is short: give up on a lost server rather than hang.
		nats.MaxReconnects(5), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("NATS at %s %w: %v", url, ErrUnreachable, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// Redis connects to a redis:// URL and checks that the server answers.
func Redis(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis URL %q: %w", url, err)
	}
	opt.DialTimeout = Timeout
	opt.ReadTimeout = 10 * time.Second
	opt.WriteTimeout = 10 * time.Second
	opt.MaxRetries = 1
	c := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("Redis at %s %w: %v", opt.Addr, ErrUnreachable, err)
	}
	return c, nil
}
