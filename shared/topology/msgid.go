package topology

import "strconv"

// Message ids (Nats-Msg-Id) and object names, one place for every stage's. JetStream drops
// a message whose id it has stored within the duplicate window, so a stage that publishes
// again after a crash or a redelivery names its outputs by what it was given — a task's
// lease, a page's id, an input message's id — and the copy is dropped. The prefixes keep
// the kinds of one stream apart.

// TaskID is a task batch's id on crawl.fetch.<shard>: the lease of its first task.
func TaskID(lease string) string { return "task:" + lease }

// PageID is a fetched page's id on crawl.pages, and the name of its body in the bodies
// object store when the body travels by reference.
func PageID(lease string) string { return "page:" + lease }

// RawObject names a page's raw body (as received, before decoding) in the bodies store.
func RawObject(lease string) string { return "raw:" + lease }

// SitemapsID is the id of the sitemap URLs a robots.txt fetch publishes to crawl.discovered.
func SitemapsID(lease string) string { return "sitemaps:" + lease }

// OutcomesPrefix starts the ids of one fetcher process's outcome batches, "outs:<process>:",
// followed by a sequence number of that process.
func OutcomesPrefix(process string) string { return "outs:" + process + ":" }

// DocID is a document's id on crawl.docs, from its page's id.
func DocID(pageID string) string { return "doc:" + pageID }

// ScheduleID is a recrawl schedule message's id, from its page's id.
func ScheduleID(pageID string) string { return "sched:" + pageID }

// DiscoveredID is the id of a page's outlinks on crawl.discovered, from its page's id.
func DiscoveredID(pageID string) string { return "disc:" + pageID }

// DueID is the id of a due recrawl sent to the frontier, from the schedule message's id.
func DueID(scheduleID string) string { return "due:" + scheduleID }

// FrontierID is the id of the frontier batch dedup sends to shard for one input message.
func FrontierID(inputID string, shard int) string {
	return "front:" + inputID + ":" + strconv.Itoa(shard)
}

// SkippedID is the id of the skip log entry for one outcome message, from its id.
func SkippedID(outcomesID string) string { return "skip:" + outcomesID }
