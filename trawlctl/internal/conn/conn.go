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

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/redact"
	"github.com/trawl/trawl/shared/redisx"
)

// Timeout bounds connecting to either server.
const Timeout = 3 * time.Second

// ErrUnreachable marks a server that could not be reached.
var ErrUnreachable = errors.New("unreachable")

// NATS connects to c's TRAWL_NATS_URL, with its credentials, and returns the connection
// and its JetStream context.
func NATS(ctx context.Context, c envconfig.Conn) (*nats.Conn, jetstream.JetStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	auth, err := c.NATSOptions()
	if err != nil {
		return nil, nil, err
	}
	url := c.NATSURL
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("trawlctl"), nats.Timeout(Timeout),
		// A tool's session is short: give up on a lost server rather than hang.
		nats.MaxReconnects(5), nats.ReconnectWait(250 * time.Millisecond)}, auth...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("NATS at %s %w: %v", redact.URL(url), ErrUnreachable, redact.Error(err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// Redis connects to c's TRAWL_REDIS_URL (one server or a cluster, redisx.Open), with its
// TLS files, and checks that the server answers.
func Redis(ctx context.Context, cc envconfig.Conn) (redis.UniversalClient, error) {
	url := cc.RedisURL
	c, err := redisx.Open(url, redisx.Timeouts{Dial: Timeout, Read: 10 * time.Second, Write: 10 * time.Second, Retries: 1}, cc.RedisOptions()...)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("Redis at %s %w: %v", redisx.Addrs(url), ErrUnreachable, redact.Error(err))
	}
	return c, nil
}
