package service

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/runner"
)

// URL results, the label values of trawl_dedup_urls_total.
const (
	resultNew      = "new"
	resultSeen     = "seen"
	resultInvalid  = "invalid"
	resultTooDeep  = "too_deep"
	stageRedis     = "redis"
	stagePublish   = "publish"
	stageForget    = "forget"
	stageFillRatio = "fill_ratio"
	stageTrim      = "trim"
	stageLostCheck = "lost_check"
)

type metrics struct {
	urls       *prometheus.CounterVec
	batchSize  prometheus.Histogram
	redisDur   prometheus.Histogram
	terminated *prometheus.CounterVec
	published  prometheus.Counter
	failures   *prometheus.CounterVec
	fillRatio  prometheus.Gauge
	filterBits prometheus.Gauge
	layers     prometheus.Gauge
	bloomBytes prometheus.Gauge
	nextBytes  prometheus.Gauge
	memos      prometheus.Gauge
	recovered  prometheus.Counter

	cacheLookups prometheus.Counter
	cacheHits    prometheus.Counter
	cacheRatio   prometheus.Gauge
	cacheEntries prometheus.Gauge

	mu            sync.Mutex
	recentLookups float64 // exponentially decayed counts behind cacheRatio
	recentHits    float64
}

// ratioWindow is about how many recent lookups trawl_dedup_cache_hit_ratio reflects.
const ratioWindow = 100_000

// cacheLookup records one batch's cache lookups. The ratio gauge decays older lookups
// (weight e^(−n/window) after n newer ones), so it shows the current hit rate rather than
// the average since start; rate(hits)/rate(lookups) gives any other window.
func (m *metrics) cacheLookup(lookups, hits, entries int) {
	m.cacheEntries.Set(float64(entries))
	if lookups == 0 {
		return
	}
	m.cacheLookups.Add(float64(lookups))
	m.cacheHits.Add(float64(hits))
	m.mu.Lock()
	defer m.mu.Unlock()
	decay := math.Exp(-float64(lookups) / ratioWindow)
	m.recentLookups = m.recentLookups*decay + float64(lookups)
	m.recentHits = m.recentHits*decay + float64(hits)
	m.cacheRatio.Set(m.recentHits / m.recentLookups)
}

func newMetrics(om *obs.Metrics) *metrics {
	m := &metrics{
		urls:         om.CounterVec("urls_total", "URLs of acked input messages by seen-test result: new (sent to the frontier), seen, invalid (not a normalisable http(s) URL), too_deep (beyond TRAWL_MAX_DEPTH).", "result"),
		batchSize:    om.Histogram("batch_size", "Input messages handled per batch (one Redis call, one publish wave).", []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}),
		redisDur:     om.Histogram("redis_duration_seconds", "Duration of one batch's test-and-set call to Redis.", prometheus.ExponentialBuckets(0.0001, 2, 16)),
		terminated:   om.CounterVec("messages_terminated_total", runner.TerminatedHelp, "reason"),
		published:    om.Counter("frontier_messages_total", "FrontierBatch messages stored in CRAWL_FRONTIER (one per input message and shard)."),
		failures:     om.CounterVec("failures_total", "Failed steps by stage: redis (test-and-set; batch retried), publish (batch retried), forget (memo left for the trim), fill_ratio, trim (memo trim to the ack floor), lost_check (check at a NATS reconnect for input messages NATS lost; tried again a few times, then given up).", "stage"),
		fillRatio:    om.Gauge("bloom_fill_ratio", "Fraction of the newest Bloom filter layer's bits set, measured every TRAWL_BLOOM_FILL_INTERVAL; the layer's false-positive rate is about fill^k."),
		filterBits:   om.Gauge("bloom_size_bits", "Bits of all Bloom filter layers."),
		layers:       om.Gauge("bloom_layers", "Layers of the scalable Bloom filter; one is added each time the newest holds its capacity."),
		bloomBytes:   om.Gauge("bloom_bytes", "Redis memory of all Bloom filter layers."),
		nextBytes:    om.Gauge("bloom_next_layer_bytes", "Redis memory the next Bloom filter layer will take when the newest is full."),
		memos:        om.Gauge("memos", "Per-message seen-test memos in Redis after the last trim to the consumer's ack floor."),
		recovered:    om.Counter("recovered_total", "Input messages NATS lost after their seen test (an OS crash at TRAWL_FSYNC=1s) whose new URLs were published again from their memos, at start or at a NATS reconnect."),
		cacheLookups: om.Counter("cache_lookups_total", "URLs looked up in the in-process seen cache (first deliveries only; redelivered messages go to Redis for their memo)."),
		cacheHits:    om.Counter("cache_hits_total", "Cache lookups answered seen without asking Redis."),
		cacheRatio:   om.Gauge("cache_hit_ratio", "Fraction of recent cache lookups that hit, over roughly the last 100,000 lookups."),
		cacheEntries: om.Gauge("cache_entries", "URLs in the in-process seen cache (at most TRAWL_DEDUP_CACHE_SIZE)."),
	}
	// Zero series exist from the start, so rate() and alerts work before the first event.
	for _, r := range []string{resultNew, resultSeen, resultInvalid, resultTooDeep} {
		m.urls.WithLabelValues(r)
	}
	for _, r := range []string{"permanent"} {
		m.terminated.WithLabelValues(r)
	}
	for _, s := range []string{stageRedis, stagePublish, stageForget, stageFillRatio, stageTrim, stageLostCheck} {
		m.failures.WithLabelValues(s)
	}
	return m
}
