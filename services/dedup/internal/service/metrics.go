package service

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
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

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		urls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_dedup_urls_total",
			Help: "URLs of acked input messages by seen-test result: new (sent to the frontier), seen, invalid (not a normalisable http(s) URL), too_deep (beyond TRAWL_MAX_DEPTH).",
		}, []string{"result"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trawl_dedup_batch_size",
			Help:    "Input messages handled per batch (one Redis call, one publish wave).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096},
		}),
		redisDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trawl_dedup_redis_duration_seconds",
			Help:    "Duration of one batch's test-and-set call to Redis.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_dedup_messages_terminated_total",
			Help: "Input messages terminated: permanent (malformed, unknown version); temporary failures are retried, never terminated.",
		}, []string{"reason"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_dedup_frontier_messages_total",
			Help: "FrontierBatch messages stored in CRAWL_FRONTIER (one per input message and shard).",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_dedup_failures_total",
			Help: "Failed steps by stage: redis (test-and-set; batch retried), publish (batch retried), forget (memo left for the trim), fill_ratio, trim (memo trim to the ack floor).",
		}, []string{"stage"}),
		fillRatio: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_dedup_bloom_fill_ratio",
			Help: "Fraction of the newest Bloom filter layer's bits set, measured every TRAWL_BLOOM_FILL_INTERVAL; the layer's false-positive rate is about fill^k.",
		}),
		filterBits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_dedup_bloom_size_bits",
			Help: "Bits of all Bloom filter layers.",
		}),
		layers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_dedup_bloom_layers",
			Help: "Layers of the scalable Bloom filter; one is added each time the newest holds its capacity.",
		}),
		bloomBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_dedup_bloom_bytes",
			Help: "Redis memory of all Bloom filter layers.",
		}),
		nextBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_dedup_bloom_next_layer_bytes",
			Help: "Redis memory the next Bloom filter layer will take when the newest is full.",
		}),
		memos: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_dedup_memos",
			Help: "Per-message seen-test memos in Redis after the last trim to the consumer's ack floor.",
		}),
		cacheLookups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_dedup_cache_lookups_total",
			Help: "URLs looked up in the in-process seen cache (first deliveries only; redelivered messages go to Redis for their memo).",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_dedup_cache_hits_total",
			Help: "Cache lookups answered seen without asking Redis.",
		}),
		cacheRatio: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_dedup_cache_hit_ratio",
			Help: "Fraction of recent cache lookups that hit, over roughly the last 100,000 lookups.",
		}),
		cacheEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_dedup_cache_entries",
			Help: "URLs in the in-process seen cache (at most TRAWL_DEDUP_CACHE_SIZE).",
		}),
	}
	reg.MustRegister(m.urls, m.batchSize, m.redisDur, m.terminated, m.published, m.failures, m.fillRatio, m.filterBits, m.layers, m.bloomBytes, m.nextBytes, m.memos,
		m.cacheLookups, m.cacheHits, m.cacheRatio, m.cacheEntries)
	// Zero series exist from the start, so rate() and alerts work before the first event.
	for _, r := range []string{resultNew, resultSeen, resultInvalid, resultTooDeep} {
		m.urls.WithLabelValues(r)
	}
	for _, r := range []string{"permanent"} {
		m.terminated.WithLabelValues(r)
	}
	for _, s := range []string{stageRedis, stagePublish, stageForget, stageFillRatio, stageTrim} {
		m.failures.WithLabelValues(s)
	}
	return m
}
