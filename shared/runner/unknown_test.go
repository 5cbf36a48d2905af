package runner

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
)

// childEnv makes the test binary a service's main (Main) instead of the tests.
const childEnv = "TRAWL_TEST_RUNNER_MAIN"

type noService struct{}

func (noService) Run(context.Context) error { return nil }
func (noService) Close()                    {}

// TestMainWarnsOfUnknownSettings: a service binary (Main, in a process of its own with
// the environment given) logs one warning naming each TRAWL_* variable no Trawl program
// reads — before a bad configuration stops it, as the misspelling may be the cause — and
// not the settings of the other services, and never a value.
func TestMainWarnsOfUnknownSettings(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		// A bad configuration: Main exits with ExitConfig before it connects to anything.
		Main("probe", envconfig.Common{LogFormat: "json"}, errors.New("TRAWL_ARCHIVE_DIR: required"),
			func(context.Context, *slog.Logger) (noService, error) { return noService{}, nil })
		return
	}
	const secret = "s3cr3t-value"
	for _, tc := range []struct {
		name     string
		env      []string
		want     []string // in the one warning; nil: no warning
		wantNone []string // nowhere in the output
	}{
		{"misspelt settings", []string{"TRAWL_HOST_BUDGET=" + secret, "TRAWL_ARCHIVE_DRI=" + secret},
			[]string{"TRAWL_HOST_BUDGET", "TRAWL_ARCHIVE_DRI (did you mean TRAWL_ARCHIVE_DIR?)"}, []string{secret}},
		{"other services' settings", []string{"TRAWL_BLOOM_CAPACITY=5", "TRAWL_RENDER_TABS=2", "TRAWL_MAX_PAGES_PER_HOST=60", "TRAWL_NATS_PASSWORD=" + secret},
			nil, []string{secret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMainWarnsOfUnknownSettings$")
			cmd.Env = append([]string{childEnv + "=1"}, tc.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != ExitConfig {
				t.Fatalf("the service exited with %v, want status %d; stderr:\n%s", err, ExitConfig, stderr.String())
			}
			out := stderr.String()
			var warnings []string
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, `"level":"WARN"`) {
					warnings = append(warnings, line)
				}
			}
			switch {
			case tc.want == nil && len(warnings) > 0:
				t.Errorf("warnings %q, want none", warnings)
			case tc.want != nil && len(warnings) != 1:
				t.Fatalf("warnings %q, want one; stderr:\n%s", warnings, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(warnings[0], w) {
					t.Errorf("warning %s does not name %q", warnings[0], w)
				}
			}
			for _, s := range tc.wantNone {
				if strings.Contains(out, s) {
					t.Errorf("stderr shows %q:\n%s", s, out)
				}
			}
		})
	}
}
