package robots

import (
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
)

// One rule for every process: what the parser accepts, the fetcher and trawlctl accept.
func TestCheckAgent(t *testing.T) {
	for _, tc := range []struct {
		token string
		ok    bool
	}{
		{"trawl", true},
		{"Trawl-Bot_2x", false},
		{"trawl2", false},
		{"trawl/1.0", false},
		{"", false},
		{"my-crawler", true},
		{"a_b", true},
		{"tráwl", false},
	} {
		t.Run(tc.token, func(t *testing.T) {
			if err := CheckAgent(tc.token); (err == nil) != tc.ok {
				t.Fatalf("CheckAgent(%q) = %v, want ok=%v", tc.token, err, tc.ok)
			}
		})
	}
}

func TestLoadAgent(t *testing.T) {
	if got := LoadAgent(envconfig.FromMap(nil)); got != DefaultAgent {
		t.Errorf("unset: %q, want %q", got, DefaultAgent)
	}
	if got := LoadAgent(envconfig.FromMap(map[string]string{"TRAWL_ROBOTS_AGENT": "bot"})); got != "bot" {
		t.Errorf("set: %q", got)
	}
}

func TestCheckUserAgent(t *testing.T) {
	for _, tc := range []struct {
		ua string
		ok bool
	}{
		{DefaultUserAgent, true},
		{"ExampleBot/1.0 (+https://example.org/bot)", true},
		{"", false},
		{"a\r\nX-Injected: 1", false},
	} {
		t.Run(tc.ua, func(t *testing.T) {
			if err := CheckUserAgent(tc.ua); (err == nil) != tc.ok {
				t.Fatalf("CheckUserAgent(%q) = %v, want ok=%v", tc.ua, err, tc.ok)
			}
		})
	}
}
