package crawlmsg

// Reasons a URL ended without being archived, as the frontier names them (SkippedURL.Reason;
// a failure is "failed(<outcome kind>)", FailedReason).
const (
	ReasonDisallowed = "robots-disallowed"
	ReasonOutOfScope = "out-of-scope" // outside a site rule's include/exclude, or no crawlable URL
	ReasonTooDeep    = "too-deep"     // deeper than TRAWL_MAX_DEPTH or a site rule's max depth
	ReasonOverBudget = "over-budget"  // its host's, domain's or the crawl's page budget spent
	// ReasonRetired: found after its host was retired (TRAWL_RETIRE_AFTER failures in a row).
	ReasonRetired = "failed(retired)"
)

// FailedReason is the reason of a URL that ended failed after an outcome of kind.
func FailedReason(kind OutcomeKind) string { return "failed(" + string(kind) + ")" }

// SkippedBatch is the payload on crawl.skipped.<shard>: the URLs one outcome message of
// that shard ended without archiving, with their reason (the skip log trawlctl report
// lists, as Heritrix's crawl.log records each URI's disposition).
type SkippedBatch struct {
	V    int          `json:"v"`
	URLs []SkippedURL `json:"urls"`
}

// SkippedURL is one URL of a SkippedBatch.
type SkippedURL struct {
	URL    string `json:"url"`
	Host   string `json:"host"`
	Reason string `json:"reason"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	At     int64  `json:"at"` // unix ms when the scheduler applied the outcome
}
