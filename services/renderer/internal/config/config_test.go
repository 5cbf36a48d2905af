package config

import (
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/polite/politetest"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // "" = valid; else a fragment of the error
	}{
		{"defaults", nil, ""},
		{"no tabs", map[string]string{"TRAWL_RENDER_TABS": "0"}, "TRAWL_RENDER_TABS=0"},
		{"tiny time cap", map[string]string{"TRAWL_RENDER_TIMEOUT": "1s"}, "TRAWL_RENDER_TIMEOUT=1s"},
		{"settle past the cap", map[string]string{"TRAWL_RENDER_TIMEOUT": "5s", "TRAWL_RENDER_SETTLE": "5s"}, "TRAWL_RENDER_SETTLE=5s"},
		{"request past the page", map[string]string{"TRAWL_RENDER_TIMEOUT": "5s", "TRAWL_RENDER_REQUEST_TIMEOUT": "6s"}, "TRAWL_RENDER_REQUEST_TIMEOUT=6s"},
		{"small heap", map[string]string{"TRAWL_RENDER_JS_HEAP": "1MiB"}, "TRAWL_RENDER_JS_HEAP"},
		{"no heap limit", map[string]string{"TRAWL_RENDER_JS_HEAP": "0"}, ""},
		{"no attempts", map[string]string{"TRAWL_RENDER_MAX_ATTEMPTS": "0"}, "TRAWL_RENDER_MAX_ATTEMPTS=0"},
		{"cache entry over the body cap", map[string]string{"TRAWL_RENDER_CACHE_MAX_ENTRY": "16MiB"}, "TRAWL_RENDER_CACHE_MAX_ENTRY"},
		{"loopback without allowing it", map[string]string{"TRAWL_RESOLVE": "a.test=127.0.0.1"}, "TRAWL_RESOLVE"},
		{"loopback allowed", map[string]string{"TRAWL_RESOLVE": "a.test=127.0.0.1", "TRAWL_ALLOW_CIDRS": "127.0.0.0/8"}, ""},
		{"bad exclude", map[string]string{"TRAWL_EXCLUDE": "("}, "TRAWL_EXCLUDE"},
		{"browser user", map[string]string{"TRAWL_RENDER_BROWSER_USER": "1000:1000"}, ""},
		{"browser user root", map[string]string{"TRAWL_RENDER_BROWSER_USER": "0:0"}, "TRAWL_RENDER_BROWSER_USER"},
		{"browser group root", map[string]string{"TRAWL_RENDER_BROWSER_USER": "1000:0"}, "TRAWL_RENDER_BROWSER_USER"},
		{"browser user by name", map[string]string{"TRAWL_RENDER_BROWSER_USER": "nobody"}, "TRAWL_RENDER_BROWSER_USER"},
		{"unsandboxed allowed", map[string]string{"TRAWL_RENDER_ALLOW_UNSANDBOXED": "true"}, ""},
	}
	if err := Defaults().Validate(); err != nil {
		t.Fatalf("Defaults: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(envconfig.FromMap(tc.env))
			if err == nil {
				err = c.Validate()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error naming %q, got %v", tc.want, err)
			}
		})
	}
}

// TestPoliteSuite: the renderer resolves a site policy's request settings and robots.txt
// limits from its configuration as the fetcher does (its config test runs the same suite),
// so a browser request to a host carries what a fetcher's request to it would.
func TestPoliteSuite(t *testing.T) {
	politetest.Run(t, func(r *envconfig.Reader) (polite.Settings, error) {
		c, err := Load(r)
		return c.Polite(), err
	})
}
