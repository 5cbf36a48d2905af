package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestUnknownSettingsWarned: trawlctl, given the environment the services get, warns once
// of each TRAWL_* variable no Trawl program reads — with the setting it most likely
// misspells — not of the services' own settings, and shows no value; the command still
// runs.
func TestUnknownSettingsWarned(t *testing.T) {
	const secret = "s3cr3t-value"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // in the one warning line; "" for none
	}{
		{"a misspelt setting", map[string]string{"TRAWL_MAX_PAGE_PER_HOST": secret, "TRAWL_HOST_BUDGET": secret},
			"TRAWL_HOST_BUDGET, TRAWL_MAX_PAGE_PER_HOST (did you mean TRAWL_MAX_PAGES_PER_HOST?)"},
		{"the services' settings", map[string]string{"TRAWL_BLOOM_CAPACITY": "5", "TRAWL_FETCH_CONCURRENCY": "8", "TRAWL_NATS_PASSWORD": secret}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var environ []string
			for k, v := range tc.env {
				environ = append(environ, k+"="+v)
			}
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), []string{"url", "normalize", "http://a.test"}, IO{
				Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
				Lookup:  func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok },
				Environ: func() []string { return environ },
			})
			if code != ExitOK || stdout.String() != "http://a.test/\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
			}
			got := lines(stderr.String())
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("stderr %q, want nothing", got)
			case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], "trawlctl: warning: ") || !strings.HasSuffix(got[0], tc.want)):
				t.Errorf("stderr %q, want one warning ending %q", got, tc.want)
			}
			if strings.Contains(stderr.String(), secret) {
				t.Errorf("stderr shows a value: %q", stderr.String())
			}
		})
	}
}
