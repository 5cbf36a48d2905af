package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// MarshalJSON writes the duration as Go writes it ("1.5s").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "1.5s", or a plain number of seconds as the TRAWL_* durations take.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if err2 := json.Unmarshal(b, &secs); err2 != nil {
			return fmt.Errorf("a duration is a string such as \"1.5s\": %w", err)
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ParseDuration reads a duration as Go writes it ("1.5s", "2m").
func ParseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("duration %q: want a number with a unit, such as 1.5s or 2m", s)
	}
	return Duration(v), nil
}

// String is "exact" or the cap ("60s"): how rules files and trawlctl write it.
func (c CrawlDelay) String() string {
	if c.Exact {
		return "exact"
	}
	return c.Cap.String()
}

// ParseCrawlDelay reads "exact" (honour any Crawl-delay) or a cap such as "60s".
func ParseCrawlDelay(s string) (CrawlDelay, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "exact") {
		return CrawlDelay{Exact: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return CrawlDelay{}, fmt.Errorf("crawl_delay %q: want \"exact\" or a cap such as 60s", s)
	}
	return CrawlDelay{Cap: d}, nil
}

// MarshalJSON writes "exact" or the cap.
func (c CrawlDelay) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

// UnmarshalJSON reads "exact" or a cap.
func (c *CrawlDelay) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("crawl_delay is \"exact\" or a cap such as \"60s\": %w", err)
	}
	v, err := ParseCrawlDelay(s)
	if err != nil {
		return err
	}
	*c = v
	return nil
}
