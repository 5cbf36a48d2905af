package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/runner"
)

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
	uploads    *prometheus.CounterVec // result: ok, failed
	uploaded   prometheus.Counter
	saved      prometheus.Counter
}

func newMetrics(om *obs.Metrics) *metrics {
	m := &metrics{
		records:    om.CounterVec("records_total", "WARC records written, by WARC-Type (warcinfo records are counted in files).", "type"),
		bytes:      om.Counter("bytes_total", "Compressed octets of records written to WARC files."),
		files:      om.Counter("files_total", "WARC files sealed (renamed from .open, CDXJ written beside them)."),
		revisits:   om.CounterVec("revisits_total", "Captures written as revisit records instead of a second copy, by profile.", "profile"),
		skipped:    om.Counter("redelivered_skipped_total", "Redelivered pages whose records were already whole in a file; acked without writing."),
		terminated: om.CounterVec("messages_terminated_total", runner.TerminatedHelp, "reason"),
		batch:      om.Histogram("batch_duration_seconds", "Time to write and fsync one batch of pages.", prometheus.ExponentialBuckets(0.0005, 4, 9)),
		failures:   om.CounterVec("failures_total", "Batches that failed and were redelivered, by stage: write, sync, lookup; digests counts revisit digests not stored (best effort).", "stage"),
		saved:      om.Counter("dedup_saved_bytes_total", "Payload octets not stored again: those of the 200s written as identical-payload-digest revisits."),
		recovered:  om.Counter("recovered_files_total", "Files left open by a stopped archiver, cut after their last whole record and sealed at start-up."),
		uploads:    om.CounterVec("uploads_total", "Sealed files uploaded to object storage and confirmed (result ok), or whose upload failed its tries (failed; tried again at the next seal or start).", "result"),
		uploaded:   om.Counter("uploaded_bytes_total", "Octets of files uploaded to object storage and confirmed."),
	}
	return m
}
