// Package topology names Trawl's JetStream streams, subjects and durable consumers, and maps
// hosts to scheduler shards. It is the one place that knows the wiring; every service and
// tool builds its subjects here.
package topology

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream names.
const (
	StreamDiscovered = "CRAWL_DISCOVERED"
	StreamFrontier   = "CRAWL_FRONTIER"
	StreamFetch      = "CRAWL_FETCH"
	StreamFetched    = "CRAWL_FETCHED"
	StreamPages      = "CRAWL_PAGES"
	StreamDocs       = "CRAWL_DOCS"
	// StreamRecrawl holds one schedule message per known URL in adaptive recrawl mode
	// (declared only then; see Options.Recrawl and Recrawl). Split into several streams
	// (Options.RecrawlStreams) it is their name's stem: RecrawlStreamName.
	StreamRecrawl = "CRAWL_RECRAWL"
	// StreamRender holds render tasks (crawlmsg.RenderTask): fetched pages the parser
	// sends to a browser. A work queue: a task is gone once a renderer acked it.
	StreamRender = "CRAWL_RENDER"
	// StreamSkipped is the skip log: the URLs each scheduler shard ended without archiving
	// (robots-disallowed, out of scope, failed), with their reason, for trawlctl report.
	// Kept by limits on disk, capped by SkippedMaxBytes, so the frontier's Redis holds
	// nothing per skipped URL.
	StreamSkipped = "CRAWL_SKIPPED"
	// StreamDead holds the messages a stage gave up on (natsx.DeadLetter): a permanent
	// error, or a temporary one still failing after TRAWL_DEAD_LETTER_AFTER deliveries.
	// Each is kept with its stream, subject, headers and last error until an operator
	// replays or drops it (trawlctl dead); kept by limits on disk, capped by DeadMaxBytes,
	// and when full it refuses new ones, so nothing in it is ever dropped for room.
	StreamDead = "CRAWL_DEAD"
)

// BodiesBucket is the JetStream object store holding page bodies too large to travel
// inline on crawl.pages (its stream is OBJ_CRAWL_BODIES). A page names its object in
// crawlmsg.PageMeta.BodyRef.
const BodiesBucket = "CRAWL_BODIES"

// RenderCacheBucket is the JetStream object store of subresources the renderers fetched
// (scripts, styles, JSON a page loads), shared by every renderer so that a bundle every
// page uses is fetched once per TTL (RenderCache).
const RenderCacheBucket = "CRAWL_RENDER_CACHE"

// RenderCache is RenderCacheBucket's configuration: entries expire after ttl, and the
// store refuses new ones past maxBytes.
func RenderCache(o Options, ttl time.Duration, maxBytes int64) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      RenderCacheBucket,
		Description: "subresources fetched for rendered pages",
		TTL:         ttl,
		MaxBytes:    maxBytes,
		Storage:     o.Storage,
		Replicas:    o.Replicas,
	}
}

// BodiesStream is the stream behind BodiesBucket (the object store's own naming).
const BodiesStream = "OBJ_" + BodiesBucket

// Subjects. Sharded subjects end in the shard number.
const (
	SubjectDiscovered = "crawl.discovered"
	SubjectPages      = "crawl.pages"
	SubjectDocs       = "crawl.docs"
	SubjectRender     = "crawl.render"
	frontierPrefix    = "crawl.frontier."
	fetchPrefix       = "crawl.fetch."
	fetchedPrefix     = "crawl.fetched."
	schedPrefix       = "crawl.recrawl.sched."
	duePrefix         = "crawl.recrawl.due."
	skippedPrefix     = "crawl.skipped."
	deadPrefix        = "crawl.dead."
)

// DeadFilter matches every dead letter; DeadSubject(stream) those of one stream.
const DeadFilter = deadPrefix + ">"

// DeadSubject is the subject of the dead letters taken from stream.
func DeadSubject(stream string) string { return deadPrefix + stream }

// Durable consumer names of the pipeline's own stages.
const (
	ConsumerDedup   = "dedup"
	ConsumerFetcher = "fetcher"
	ConsumerParser  = "parser"
	// ConsumerRenderer is the renderers' shared consumer on CRAWL_RENDER. Its ack wait is
	// TRAWL_ACK_WAIT like the fast stages': a renderer marks a task in progress every third
	// of it while the page renders (bounded by TRAWL_RENDER_TIMEOUT), so a task of a
	// renderer that died comes back within one ack wait, whatever the page's time cap.
	ConsumerRenderer = "renderer"
)

// ConsumerArchiver is the archiver's durable consumer on CRAWL_PAGES. Unlike the
// pipeline's own consumers it is declared by the archiver alone (ArchiverConsumer), not by
// every service: CRAWL_PAGES keeps each page until every consumer acked it, so a consumer
// nobody reads would stall the crawl.
const ConsumerArchiver = "archiver"

// ArchiverConsumer is ConsumerArchiver's configuration.
func ArchiverConsumer(t StageTimings) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerArchiver,
		FilterSubject: SubjectPages,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    t.MaxDeliver,
		MaxAckPending: SettlingMaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// SettlingMaxAckPending is the MaxAckPending of the consumers whose stages ack a window
// after handling (natsx.ConsumeOptions.SettleAfter): what a stage has handled but not yet
// acked waits there, a few seconds of the crawl's rate (3 s at 10,000 messages a second is
// 30,000), besides what it holds.
const SettlingMaxAckPending = 65536

// RegisteredMeta is the consumer metadata key that registers a durable consumer of
// CRAWL_DOCS as an indexer (value "true"). CRAWL_DOCS is kept by limits, so a consumer
// falling behind would lose the oldest documents; the scheduler's dispatch gate counts
// every registered consumer's lag and holds the crawl before the stream's byte limit drops
// a document the consumer has not acked. An unregistered consumer (an ad-hoc tap) costs
// the crawl nothing and may miss documents. Registering is a promise to keep up: an
// abandoned registered consumer holds the crawl until it is deleted.
const RegisteredMeta = "trawl.registered"

// RegisteredDocsConsumer is the configuration of a registered indexer's durable consumer on
// CRAWL_DOCS: explicit acks, starting at the oldest document kept, marked RegisteredMeta.
func RegisteredDocsConsumer(name, description string, ackWait time.Duration, maxAckPending int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   description,
		FilterSubject: SubjectDocs,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: maxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Metadata:      map[string]string{RegisteredMeta: "true"},
	}
}

// Registered reports whether a consumer of CRAWL_DOCS is a registered indexer.
func Registered(c jetstream.ConsumerConfig) bool {
	return c.Durable != "" && c.Metadata[RegisteredMeta] == "true"
}

// FrontierSubject is where dedup sends new URLs of shard's hosts.
func FrontierSubject(shard int) string { return fmt.Sprintf("%s%d", frontierPrefix, shard) }

// FetchSubject is where scheduler shard dispatches fetch tasks.
func FetchSubject(shard int) string { return fmt.Sprintf("%s%d", fetchPrefix, shard) }

// FetchedSubject is where fetchers report outcomes of shard's tasks.
func FetchedSubject(shard int) string { return fmt.Sprintf("%s%d", fetchedPrefix, shard) }

// SkippedSubject is where scheduler shard logs the URLs it ended without archiving.
func SkippedSubject(shard int) string { return fmt.Sprintf("%s%d", skippedPrefix, shard) }

// SkippedFilter matches every shard's skipped subject.
const SkippedFilter = skippedPrefix + "*"

// SchedulerFrontierConsumer is shard's durable consumer on the frontier stream.
func SchedulerFrontierConsumer(shard int) string { return fmt.Sprintf("scheduler-%d", shard) }

// SchedulerFetchedConsumer is shard's durable consumer on the fetched stream.
func SchedulerFetchedConsumer(shard int) string { return fmt.Sprintf("scheduler-%d-outcomes", shard) }

// SchedulerRecrawlConsumer is shard's durable consumer of due recrawls.
func SchedulerRecrawlConsumer(shard int) string { return fmt.Sprintf("scheduler-%d-recrawl", shard) }

// RecrawlKey names a URL's subjects in CRAWL_RECRAWL: the 64-bit xxhash of the normalised
// URL, 16 hex digits. Two URLs of one shard whose keys collide share one schedule (the
// later replaces the earlier); at 10^8 URLs the chance that any pair collides is 3·10^-4.
func RecrawlKey(url string) string { return fmt.Sprintf("%016x", xxhash.Sum64String(url)) }

// ScheduleSubject holds the one schedule message of url (a URL of shard's hosts).
func ScheduleSubject(shard int, url string) string {
	return fmt.Sprintf("%s%d.%s", schedPrefix, shard, RecrawlKey(url))
}

// DueSubject is where the server puts url's schedule message when it is due.
func DueSubject(shard int, url string) string {
	return fmt.Sprintf("%s%d.%s", duePrefix, shard, RecrawlKey(url))
}

// DueFilter matches every due subject of shard.
func DueFilter(shard int) string { return fmt.Sprintf("%s%d.*", duePrefix, shard) }

// ScheduleFilter matches every schedule subject of every shard.
const ScheduleFilter = schedPrefix + "*.*"

// ShardOf maps a host (lowercased hostname, no port) to one of n shards. The hash is
// FNV-1a, fixed forever: changing it would move hosts between shards mid-crawl.
func ShardOf(host string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(host))
	return int(h.Sum32() % uint32(n))
}

// Options size the streams. The zero value is not useful; start from DefaultOptions.
type Options struct {
	Shards int
	// Replicas of every stream (1 for a single server; 3 in a cluster).
	Replicas int
	// Storage of every stream; file storage is what makes the crawl survive a NATS restart.
	Storage jetstream.StorageType
	// DuplicateWindow is how long JetStream remembers Nats-Msg-Id headers, the services'
	// DuplicateWindowFor(their timings); DefaultOptions has the one of the default timings.
	// The server keeps every id of the window in memory, so what it holds is the message
	// rate times this window (docs/cost-per-page.md, "Scale").
	DuplicateWindow time.Duration
	// TapMaxAge bounds the docs stream, kept by limits so late consumers can replay
	// (default 72h). DocsMaxBytes caps it (2 GiB).
	TapMaxAge time.Duration
	// PagesMaxBytes caps the pages stream and, separately, the bodies object store
	// (default 8 GiB each). Pages are kept until every consumer acked them (interest), so
	// a full stream refuses new pages instead of dropping unparsed ones.
	PagesMaxBytes int64
	DocsMaxBytes  int64
	// SkippedMaxBytes caps the skip log (CRAWL_SKIPPED; default 256 MiB, about a million
	// skipped URLs); past it the oldest entries go.
	SkippedMaxBytes int64
	// DeadMaxBytes caps the dead letters (CRAWL_DEAD; default 256 MiB). Past it new ones
	// are refused: the message stays where it was (natsx.DeadLetter).
	DeadMaxBytes     int64
	FetchedMaxAge    time.Duration // fetch log kept for taps; default 24h
	MaxMsgSize       int32         // largest message (a page with headers); default 8 MiB
	WorkMaxBytes     int64         // cap of each work stream; -1 = unlimited (default)
	DiscardNewOnFull bool
	// Recrawl declares CRAWL_RECRAWL and the schedulers' due consumers (TRAWL_RECRAWL=
	// adaptive). Message schedules need nats-server 2.12 or later; the one-shot crawl does
	// not, so the stream exists only in adaptive mode.
	Recrawl bool
	// RecrawlStreams splits the schedules over this many streams (TRAWL_RECRAWL_STREAMS;
	// 0 or 1: one, CRAWL_RECRAWL): shard s's are in stream s mod RecrawlStreams. The NATS
	// server keeps a stream's per-subject index and schedule timers in memory, one entry
	// per known URL, so one stream puts them all on one server. A cluster places each
	// stream on a server of its own choosing, which may put two on one server (seen with
	// three streams on three servers); RecrawlPlacement pins them.
	RecrawlStreams int
	// RecrawlPlacement (TRAWL_RECRAWL_PLACEMENT) are NATS server tags: recrawl stream g is
	// placed on a server tagged RecrawlPlacement[g mod len]; none leaves it to the cluster.
	RecrawlPlacement []string
}

// Room left for headers when a payload is sized to fit a message: the server's
// max_payload and a stream's MaxMsgSize both count the headers with the payload.
const (
	// ExtraHeaderRoom is room for the headers a page message carries besides Trawl-Meta,
	// which its publisher counts apart (measured, or budgeted on its own): the NATS/1.0
	// line and a Nats-Msg-Id of a lease (under 200 octets). An object store chunk, sized
	// against max_payload, carries fewer.
	ExtraHeaderRoom = 4 << 10
	// MaxHeaderBlock is room for any header block JetStream stores: it refuses a message
	// whose headers exceed 65535 octets (nats-server's "header size exceeds maximum"),
	// whatever MaxMsgSize. A payload of MaxMsgSize less this fits beside every header a
	// stored message can have, a render task's Trawl-Meta included, without measuring it.
	MaxHeaderBlock = 64 << 10
)

// RecrawlStreamName is recrawl stream g of n: CRAWL_RECRAWL when there is one (the name
// before the split existed), else CRAWL_RECRAWL_<g>.
func RecrawlStreamName(g, n int) string {
	if n <= 1 {
		return StreamRecrawl
	}
	return fmt.Sprintf("%s_%d", StreamRecrawl, g)
}

// RecrawlStreamOf is the recrawl stream holding shard's schedules.
func RecrawlStreamOf(shard int, o Options) string {
	n := max(o.RecrawlStreams, 1)
	return RecrawlStreamName(shard%n, n)
}

// DefaultOptions returns the production sizing for n shards.
func DefaultOptions(shards int) Options {
	return Options{
		Shards:          shards,
		Replicas:        1,
		Storage:         jetstream.FileStorage,
		DuplicateWindow: 3 * time.Minute, // DuplicateWindowFor TRAWL_LEASE_TTL 2m, TRAWL_ACK_WAIT 30s
		TapMaxAge:       72 * time.Hour,
		PagesMaxBytes:   8 << 30,
		DocsMaxBytes:    2 << 30,
		SkippedMaxBytes: 256 << 20,
		DeadMaxBytes:    256 << 20,
		FetchedMaxAge:   24 * time.Hour,
		MaxMsgSize:      8 << 20,
		WorkMaxBytes:    -1,
	}
}

// DuplicateWindowFor is the duplicate window the pipeline needs with timings t: longer than
// any gap between a stage storing an output and publishing it again under the same id.
// The outputs of a fetch task (its page, redirect, sitemaps, outcome batch) are published
// again only until the task's deadline, one lease after its dispatch: a fetcher retries a
// failed publish until then, and a task redelivered after t.FetchAckWait (the lease and a
// quarter) is past it and dropped. A fast stage (dedup, parser, scheduler) publishes again
// when its input comes back, t.AckWait after a delivery whose ack was lost (acks wait out
// the TRAWL_FSYNC window, which t.AckWait exceeds), and the renderer after t.AckWait plus
// its render. Task batches are never published twice: a failed publish leaves the leases
// to expire and be dispatched anew. So t.FetchAckWait + t.AckWait covers each with a fast
// stage's ack wait to spare. A copy published later than that is not lost work done
// twice in the crawl's result (dedup's seen filter, the scheduler's lease tokens, the
// parser's exact index absorb it), only work done again.
func DuplicateWindowFor(t StageTimings) time.Duration { return t.FetchAckWait + t.AckWait }

// Streams returns every stream's configuration.
//
// The work streams (discovered, frontier, fetch, render) use WorkQueue retention: a message is gone
// once its stage acks it. The fetched stream uses Interest retention so that it behaves as
// a work queue for the scheduler (deleted once every consumer acked) while an operator can
// still attach a durable tap to the fetch log; its shard consumers are created up front by
// Ensure so no outcome is published before anyone is interested. The pages stream uses
// Interest retention too: a page is kept until the parser and every durable tap acked it,
// with no age limit, and when full it refuses new pages (DiscardNew) rather than dropping
// unparsed ones; the fetcher retries a refused publish until its task's deadline. An
// existing limits-kept pages stream is changed in place (JetStream allows limits ↔
// interest). Docs form a tap stream kept by limits.
func Streams(o Options) []jetstream.StreamConfig {
	work := func(name string, subjects ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:       name,
			Subjects:   subjects,
			Retention:  jetstream.WorkQueuePolicy,
			Storage:    o.Storage,
			Replicas:   o.Replicas,
			Duplicates: o.DuplicateWindow,
			MaxBytes:   o.WorkMaxBytes,
			MaxMsgSize: o.MaxMsgSize,
			Discard:    jetstream.DiscardOld,
		}
	}
	streams := []jetstream.StreamConfig{
		work(StreamDiscovered, SubjectDiscovered),
		work(StreamFrontier, frontierPrefix+"*"),
		work(StreamFetch, fetchPrefix+"*"),
		work(StreamRender, SubjectRender),
		{
			Name:       StreamFetched,
			Subjects:   []string{fetchedPrefix + "*"},
			Retention:  jetstream.InterestPolicy,
			Storage:    o.Storage,
			Replicas:   o.Replicas,
			Duplicates: o.DuplicateWindow,
			MaxAge:     o.FetchedMaxAge,
			MaxMsgSize: o.MaxMsgSize,
		},
		{
			Name:       StreamPages,
			Subjects:   []string{SubjectPages},
			Retention:  jetstream.InterestPolicy,
			Storage:    o.Storage,
			Replicas:   o.Replicas,
			Duplicates: o.DuplicateWindow,
			MaxBytes:   o.PagesMaxBytes,
			MaxMsgSize: o.MaxMsgSize,
			Discard:    jetstream.DiscardNew,
		},
		{
			Name:       StreamDocs,
			Subjects:   []string{SubjectDocs},
			Retention:  jetstream.LimitsPolicy,
			Storage:    o.Storage,
			Replicas:   o.Replicas,
			Duplicates: o.DuplicateWindow,
			MaxAge:     o.TapMaxAge,
			MaxBytes:   o.DocsMaxBytes,
			MaxMsgSize: o.MaxMsgSize,
			Discard:    jetstream.DiscardOld,
		},
		{
			Name:       StreamSkipped,
			Subjects:   []string{SkippedFilter},
			Retention:  jetstream.LimitsPolicy,
			Storage:    o.Storage,
			Replicas:   o.Replicas,
			Duplicates: o.DuplicateWindow,
			MaxBytes:   o.SkippedMaxBytes,
			MaxMsgSize: o.MaxMsgSize,
			Discard:    jetstream.DiscardOld,
		},
		{
			Name:       StreamDead,
			Subjects:   []string{DeadFilter},
			Retention:  jetstream.LimitsPolicy,
			Storage:    o.Storage,
			Replicas:   o.Replicas,
			Duplicates: o.DuplicateWindow,
			MaxBytes:   o.DeadMaxBytes,
			MaxMsgSize: o.MaxMsgSize,
			Discard:    jetstream.DiscardNew,
		},
	}
	// These streams take atomic batches (natsx.PublishBatch, AtomicGroup): at
	// TRAWL_FSYNC=always a batch costs the server one fsync instead of one per message.
	// Declared at every start, the setting reaches streams an older release made.
	for i := range streams {
		streams[i].AllowAtomicPublish = true
	}
	if o.Recrawl {
		for g := range max(o.RecrawlStreams, 1) {
			streams = append(streams, Recrawl(o, g))
		}
	}
	return streams
}

// AtomicGroup says which messages may share one atomic batch (natsx.PublishBatch): those
// of one group go to one stream whatever the Options. "" keeps a message out of batches:
// recrawl schedules, whose streams follow TRAWL_RECRAWL_STREAMS and do not take atomic
// batches, and subjects this package does not know.
func AtomicGroup(subject string) string {
	for _, prefix := range []string{frontierPrefix, fetchPrefix, fetchedPrefix, skippedPrefix} {
		if strings.HasPrefix(subject, prefix) {
			return prefix
		}
	}
	switch subject {
	case SubjectDiscovered, SubjectPages, SubjectDocs, SubjectRender:
		return subject
	}
	return ""
}

// Recrawl is CRAWL_RECRAWL: a message schedule per known URL (crawl.recrawl.sched.<shard>.
// <key>, header Nats-Schedule "@at <due>", target crawl.recrawl.due.<shard>.<key>). One
// message per subject, so a URL's newer schedule replaces its older one, and at most one
// due message per URL waits for its scheduler. Work-queue retention: a due message is gone
// once its scheduler acked it (the server purged the schedule when it fired), and schedule
// subjects, which no consumer reads, stay until replaced. No age or byte limit: dropping a
// schedule would forget the URL. Recrawl(o, g) is stream g of o.RecrawlStreams: all the
// subjects when there is one, else those of the shards s with s mod RecrawlStreams = g.
func Recrawl(o Options, g int) jetstream.StreamConfig {
	n := max(o.RecrawlStreams, 1)
	subjects := []string{schedPrefix + ">", duePrefix + ">"}
	if n > 1 {
		subjects = nil
		for s := g; s < o.Shards; s += n {
			subjects = append(subjects, fmt.Sprintf("%s%d.*", schedPrefix, s), DueFilter(s))
		}
	}
	var place *jetstream.Placement
	if len(o.RecrawlPlacement) > 0 {
		place = &jetstream.Placement{Tags: []string{o.RecrawlPlacement[g%len(o.RecrawlPlacement)]}}
	}
	return jetstream.StreamConfig{
		Name:              RecrawlStreamName(g, n),
		Placement:         place,
		Subjects:          subjects,
		Retention:         jetstream.WorkQueuePolicy,
		Storage:           o.Storage,
		Replicas:          o.Replicas,
		Duplicates:        o.DuplicateWindow,
		MaxMsgsPerSubject: 1,
		MaxMsgSize:        o.MaxMsgSize,
		Discard:           jetstream.DiscardOld,
		AllowRollup:       true, // the server requires it of a stream with schedules
		AllowMsgSchedules: true,
	}
}

// Bodies returns the object store configuration for page bodies sent by reference. Like
// the pages stream it has no age limit (a body stays until its page is gone, see the
// parser's sweeper) and refuses new objects when full.
func Bodies(o Options) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      BodiesBucket,
		Description: "page bodies too large for one crawl.pages message",
		MaxBytes:    o.PagesMaxBytes,
		Storage:     o.Storage,
		Replicas:    o.Replicas,
	}
}

// ConsumerSpec pairs a durable consumer with its stream.
type ConsumerSpec struct {
	Stream string
	Config jetstream.ConsumerConfig
	// Owner is the service whose settings the consumer takes: the one that reads it, or
	// for the fetch tasks the scheduler, whose TRAWL_LEASE_TTL the ack wait must exceed.
	// Every service creates a consumer that is missing (a stream may keep messages only
	// for consumers that exist), but only the owner changes one that exists (natsx.Ensure).
	Owner string
	// Setting is the variable the consumer's AckWait comes from, and Value its value in the
	// service that declares it; both are also kept in the consumer's metadata.
	Setting, Value string
}

// Metadata keys of a pipeline consumer: the variable its ack wait comes from, that
// variable's value, and the service that made or last changed it.
const (
	MetaSetting = "trawl_setting"
	MetaValue   = "trawl_value"
	MetaSetBy   = "trawl_set_by"
)

// LeaseTTL is the fetch tasks' lease TTL in force: the TRAWL_LEASE_TTL of the scheduler,
// read from the metadata of the fetch consumer it owns (fetch), or that consumer's ack
// wait, which exceeds it, when the metadata does not hold it. A service that needs the
// lease TTL takes it from here, not from its own TRAWL_LEASE_TTL, which may differ.
func LeaseTTL(fetch jetstream.ConsumerConfig) time.Duration {
	if fetch.Metadata[MetaSetting] == "TRAWL_LEASE_TTL" {
		if d, err := time.ParseDuration(fetch.Metadata[MetaValue]); err == nil && d > 0 {
			return d
		}
	}
	return fetch.AckWait
}

// Services that own consumers (ConsumerSpec.Owner).
const (
	ServiceScheduler = "scheduler"
	ServiceDedup     = "dedup"
	ServiceParser    = "parser"
	ServiceRenderer  = "renderer"
)

// StageTimings are the redelivery settings of the pipeline's consumers.
type StageTimings struct {
	// AckWait of the fast stages (dedup, scheduler, parser). Default 30s.
	AckWait time.Duration
	// FetchAckWait must exceed the scheduler's lease TTL: a fetch task redelivered before
	// its lease expired could reach a second fetcher while the first is still talking to
	// the host. Redelivered after expiry, the fetcher sees the deadline passed and drops it.
	FetchAckWait time.Duration
	// MaxDeliver is the server-side delivery limit of every consumer: -1 (unlimited),
	// because a temporary error must never end a message; the consume loops terminate only
	// permanent errors (envconfig.Common.Timings).
	MaxDeliver int
	// LeaseTTL is TRAWL_LEASE_TTL, which FetchAckWait derives from; recorded in the fetch
	// consumer's metadata so that a mismatch names it (0 = not recorded).
	LeaseTTL time.Duration
	// As is the service declaring the consumers: those another service owns are used as
	// they are when they exist. "" declares every consumer as its owner (tests, tools).
	As string
}

// Consumers returns the durable consumers the pipeline needs for o.Shards shards.
func Consumers(o Options, t StageTimings) []ConsumerSpec {
	spec := func(stream, owner, name, filter string, maxAck int) ConsumerSpec {
		setting, value, ackWait := "TRAWL_ACK_WAIT", t.AckWait.String(), t.AckWait
		if name == ConsumerFetcher {
			setting, value, ackWait = "TRAWL_LEASE_TTL", t.LeaseTTL.String(), t.FetchAckWait
		}
		meta := map[string]string{MetaSetting: setting, MetaValue: value, MetaSetBy: t.As}
		if t.As == "" {
			meta[MetaSetBy] = owner
		}
		return ConsumerSpec{Stream: stream, Owner: owner, Setting: setting, Value: value, Config: jetstream.ConsumerConfig{
			Durable:       name,
			FilterSubject: filter,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       ackWait,
			MaxDeliver:    t.MaxDeliver,
			MaxAckPending: maxAck,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			Metadata:      meta,
		}}
	}
	specs := []ConsumerSpec{
		spec(StreamDiscovered, ServiceDedup, ConsumerDedup, SubjectDiscovered, SettlingMaxAckPending),
		spec(StreamFetch, ServiceScheduler, ConsumerFetcher, fetchPrefix+">", 10000),
		spec(StreamPages, ServiceParser, ConsumerParser, SubjectPages, SettlingMaxAckPending),
		spec(StreamRender, ServiceRenderer, ConsumerRenderer, SubjectRender, 1024),
	}
	for s := 0; s < o.Shards; s++ {
		specs = append(specs,
			spec(StreamFrontier, ServiceScheduler, SchedulerFrontierConsumer(s), FrontierSubject(s), SettlingMaxAckPending),
			spec(StreamFetched, ServiceScheduler, SchedulerFetchedConsumer(s), FetchedSubject(s), SettlingMaxAckPending),
		)
		if o.Recrawl {
			specs = append(specs, spec(RecrawlStreamOf(s, o), ServiceScheduler, SchedulerRecrawlConsumer(s), DueFilter(s), SettlingMaxAckPending))
		}
	}
	return specs
}
