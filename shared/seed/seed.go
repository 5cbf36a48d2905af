// Package seed publishes seed URLs into a crawl: normalised, at depth 0, as discovered
// URLs, so they pass the seen test like any other. Publishing a seed twice is harmless.
package seed

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

// BatchSize is how many seeds travel in one crawl.discovered message.
const BatchSize = 1000

// Publisher is the part of jetstream.JetStream that seeding needs.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Publish normalises urls and publishes them to crawl.discovered at depth 0. Every URL is
// checked before anything is published, so a typo in a seed list publishes nothing and
// the error names the bad entry.
func Publish(ctx context.Context, js Publisher, urls []string, depth int) (int, error) {
	batches, err := Batches(urls, depth)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range batches {
		data, err := crawlmsg.Marshal(&b)
		if err != nil {
			return n, err
		}
		if _, err := js.PublishMsg(ctx, natsx.NewMsg(topology.SubjectDiscovered, "", data)); err != nil {
			return n, fmt.Errorf("seed: publish: %w", err)
		}
		n += len(b.URLs)
	}
	return n, nil
}

// Batches normalises urls into discovered batches of at most BatchSize.
func Batches(urls []string, depth int) ([]crawlmsg.DiscoveredBatch, error) {
	var out []crawlmsg.DiscoveredBatch
	var cur crawlmsg.DiscoveredBatch
	for _, raw := range urls {
		u, err := urlnorm.Normalize(raw)
		if err != nil {
			return nil, fmt.Errorf("seed %q: %w", raw, err)
		}
		cur.URLs = append(cur.URLs, crawlmsg.Discovered{URL: u, Depth: depth, Via: crawlmsg.ViaSeed})
		if len(cur.URLs) == BatchSize {
			out = append(out, cur)
			cur = crawlmsg.DiscoveredBatch{}
		}
	}
	if len(cur.URLs) > 0 {
		out = append(out, cur)
	}
	return out, nil
}
