//go:build compose

package composetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The metrics profile, started with the README's command on Compose v2 and on
// docker-compose 1.29: the crawl ends as in the default profile, and Prometheus finds every
// service through Compose's DNS and scrapes it.
func TestMetricsProfile(t *testing.T) {
	for _, tool := range tools {
		t.Run(tool.Name, func(t *testing.T) {
			port := freePort(t)
			s := newStack(t, tool, 20, "TRAWL_PROMETHEUS_PORT="+strconv.Itoa(port))
			s.up(readmeCommand(t, "the metrics profile", func(a []string) bool { return has(a, "metrics") }))
			st := s.waitDone(crawlTimeout)
			s.judge(st, 0)
			want := []string{"dedup", "fetcher", "parser", "scheduler"}
			s.eventually(2*time.Minute, "Prometheus to scrape "+strings.Join(want, ", "), func() (bool, string) {
				up, err := promUp(port)
				if err != nil {
					return false, err.Error()
				}
				return slices.Equal(up, want), fmt.Sprintf("services up: %v", up)
			})
		})
	}
}

// promUp asks the Prometheus published on port which services of the trawl job answered
// their last scrape.
func promUp(port int) ([]string, error) {
	q := url.Values{"query": {`up{job="trawl"} == 1`}}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/v1/query?%s", port, q.Encode()))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("prometheus answered %s: %w", resp.Status, err)
	}
	var up []string
	for _, m := range r.Data.Result {
		if svc := m.Metric["service"]; !slices.Contains(up, svc) {
			up = append(up, svc)
		}
	}
	slices.Sort(up)
	return up, nil
}
