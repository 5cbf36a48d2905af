package prioritize

import (
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
)

func TestBreadthFirst(t *testing.T) {
	for _, tc := range []struct {
		name          string
		depth, queues int
		want          int
	}{
		{"seed", 0, 8, 0},
		{"depth within queues", 3, 8, 3},
		{"last queue", 7, 8, 7},
		{"deeper than queues shares last", 20, 8, 7},
		{"one queue", 5, 1, 0},
		{"negative depth", -2, 8, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BreadthFirst{}.Priority(crawlmsg.Discovered{URL: "http://a/", Depth: tc.depth}, tc.queues)
			if got != tc.want {
				t.Fatalf("Priority(depth %d, %d queues) = %d, want %d", tc.depth, tc.queues, got, tc.want)
			}
		})
	}
}
