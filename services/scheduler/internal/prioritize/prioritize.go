// Package prioritize maps discovered URLs to the frontier's front queues.
package prioritize

import "github.com/trawl/trawl/shared/crawlmsg"

// BreadthFirst puts a URL in the queue of its depth, the deepest ones sharing the last
// queue: seeds first, then their links, and so on (min(depth, F-1)).
type BreadthFirst struct{}

// Priority implements frontier.Prioritizer.
func (BreadthFirst) Priority(u crawlmsg.Discovered, queues int) int {
	if queues <= 1 || u.Depth <= 0 {
		return 0
	}
	return min(u.Depth, queues-1)
}
