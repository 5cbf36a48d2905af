//go:build compose

package composetest

import (
	"testing"
)

func defaultCmd(t *testing.T) string {
	return readmeCommand(t, "the default profile", func(a []string) bool {
		return has(a, "up") && has(a, "--build") && !has(a, "--profile") && !has(a, "--scale")
	})
}

// The default profile, started with the README's command on Compose v2 and on
// docker-compose 1.29: the crawl ends with every page requested once, one request per host
// at a time, never below the delay.
func TestDefaultProfile(t *testing.T) {
	for _, tool := range tools {
		t.Run(tool.Name, func(t *testing.T) {
			s := newStack(t, tool, 30)
			s.up(defaultCmd(t))
			st := s.waitDone(crawlTimeout)
			s.judge(st, 0)
		})
	}
}
