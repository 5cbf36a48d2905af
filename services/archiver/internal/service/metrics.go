package service

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	records    *prometheus.CounterVec // type: request, response, revisit
	bytes      prometheus.Counter
	files      prometheus.Counter
	revisits   *prometheus.CounterVec // profile: identical-payload-digest, server-not-modified
	skipped    prometheus.Counter
	terminated *prometheus.CounterVec
	batch      prometheus.Histogram
	failures   *prometheus.CounterVec // stage: write, sync, digests
	recovered  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_archiver_records_total",
			Help: "WARC records written, by WARC-Type (warcinfo records are counted in files).",
		}, []string{"type"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_archiver_bytes_total",
			Help: "Compressed octets of records written to WARC files.",
		}),
		files: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_archiver_files_total",
			Help: "WARC files sealed (renamed from .open, CDXJ written beside them).",
		}),
		revisits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_archiver_revisits_total",
			Help: "Captures written as revisit records instead of a second copy, by profile.",
		}, []string{"profile"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_archiver_redelivered_skipped_total",
			Help: "Redelivered pages whose records were already whole in a file; acked without writing.",
		}),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_archiver_terminated_total",
			Help: "Pages terminated as permanent failures (malformed, unknown version, body gone).",
		}, []string{"reason"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trawl_archiver_batch_duration_seconds",
			Help:    "Time to write and fsync one batch of pages.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9),
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_archiver_failures_total",
			Help: "Batches that failed and were redelivered, by stage: write, sync, lookup; digests counts revisit digests not stored (best effort).",
		}, []string{"stage"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_archiver_recovered_files_total",
			Help: "Files left open by a stopped archiver, cut after their last whole record and sealed at start-up.",
		}),
	}
	reg.MustRegister(m.records, m.bytes, m.files, m.revisits, m.skipped, m.terminated, m.batch, m.failures, m.recovered)
	return m
}
