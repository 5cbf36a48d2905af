package crawlmsg

import (
	"fmt"
)

// The fetch task: one leased URL a scheduler hands to a fetcher (crawl.fetch.<shard>).

// FetchTask is one URL to fetch, holding its host's lease: alone on crawl.fetch.<shard>
// (version 1), or inside a TaskBatch, where it carries no version of its own.
type FetchTask struct {
	V       int    `json:"v,omitempty"`
	Shard   int    `json:"shard"`
	Host    string `json:"host"`    // politeness key: lowercased hostname without port
	URL     string `json:"url"`     // normalised absolute URL
	Depth   int    `json:"depth"`   // link hops from a seed
	Hops    int    `json:"hops"`    // redirect hops that led here
	Attempt int    `json:"attempt"` // 0 on the first try
	Kind    Kind   `json:"kind,omitempty"`
	Embeds  int    `json:"embeds,omitempty"`
	Lease   string `json:"lease"` // lease token; the outcome must echo it or it is ignored
	// Recrawl is the URL's state when it is fetched again (validators for a conditional
	// GET, the fingerprint to compare); nil on a first fetch.
	Recrawl *Recrawl `json:"recrawl,omitempty"`
	// Under is a sitemap's cross-submission prefix (Discovered.Under).
	Under string `json:"under,omitempty"`
	// Deadline is when the lease expires (unix milliseconds). A fetcher must not start a
	// request it cannot finish before the deadline: after it the scheduler may hand the
	// host to another fetcher.
	Deadline int64 `json:"deadline"`
	// Dispatched is when the scheduler leased the task (unix milliseconds, Redis's clock;
	// 0 from a scheduler before it). A fetcher checks the lease of a task dispatched before
	// its NATS session began, which JetStream may be handing out a second time.
	Dispatched int64 `json:"dispatched,omitempty"`
}

// TaskBatchVersion is the version of TaskBatch. Batches joined single tasks (version 1) on
// the same subjects, so they have their own number: a fetcher that knows only single tasks
// rejects a batch instead of misreading it.
const TaskBatchVersion = 2

// TaskBatch is a payload on crawl.fetch.<shard>: several tasks of one dispatch, of
// different hosts, in one stored message. Its TasksHeader says how many, so a fetcher can
// count them before it decodes the message.
type TaskBatch struct {
	V     int         `json:"v"`
	Tasks []FetchTask `json:"tasks"`
}

// TasksHeader is the NATS header with the number of tasks in a crawl.fetch message.
const TasksHeader = "Trawl-Tasks"

// DecodeTasks reads a message of crawl.fetch: a batch (version 2) gives its tasks, a single
// task (version 1) a batch of one. A message that does not decode, carries another
// version, holds no task or a task without url, host or lease wraps ErrMalformed or
// ErrVersion (permanent): its tasks come from one dispatch, and their leases bring their
// URLs back.
func DecodeTasks(data []byte) ([]FetchTask, error) {
	var m taskMsg
	if err := decode(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %T: %v", ErrMalformed, (*TaskBatch)(nil), err)
	}
	switch m.V {
	case TaskBatchVersion:
	case Version:
		if !m.FetchTask.valid() {
			return nil, fmt.Errorf("%w: fetch task lacks url, host or lease", ErrMalformed)
		}
		return []FetchTask{m.FetchTask}, nil
	default:
		return nil, fmt.Errorf("%w: task batch has v=%d, want %d", ErrVersion, m.V, TaskBatchVersion)
	}
	if len(m.Tasks) == 0 {
		return nil, fmt.Errorf("%w: task batch holds no task", ErrMalformed)
	}
	for i := range m.Tasks {
		if !m.Tasks[i].valid() {
			return nil, fmt.Errorf("%w: task %d of a batch lacks url, host or lease", ErrMalformed, i)
		}
		m.Tasks[i].V = Version
	}
	return m.Tasks, nil
}

// taskMsg reads either form of a crawl.fetch message in one pass: a single task's fields
// (version 1) or a batch's tasks (version 2); the two share only "v". Decoding a lone
// task as a batch first and then again as a task cost every lone task two decodes.
type taskMsg struct {
	FetchTask
	Tasks []FetchTask `json:"tasks"`
}

func (t *FetchTask) valid() bool { return t.URL != "" && t.Host != "" && t.Lease != "" }
