package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// childEnv makes the test binary trawl-dev's main, which -install-redis ends once
// redis-server is there.
const childEnv = "TRAWL_TEST_DEV_MAIN"

// TestMainWarnsOfUnknownSettings: `make run` warns on its terminal of a TRAWL_* variable no
// Trawl program reads (the services it starts get the whole environment), not of the
// services' settings, and shows no value.
func TestMainWarnsOfUnknownSettings(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		os.Args = []string{"trawl-dev", "-install-redis"}
		main()
		return
	}
	const secret = "s3cr3t-value"
	for _, tc := range []struct {
		name string
		env  []string
		want string // the warning's end; "" for no warning
	}{
		{"a misspelt setting", []string{"TRAWL_MIN_DELAJ=" + secret}, "TRAWL_MIN_DELAJ (did you mean TRAWL_MIN_DELAY?)"},
		{"the services' settings", []string{"TRAWL_MIN_DELAY=2s", "TRAWL_BLOOM_CAPACITY=5", "TRAWL_REDIS_PASSWORD=" + secret}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMainWarnsOfUnknownSettings$")
			// The process's PATH finds redis-server; its own TRAWL_* variables are not the case's.
			cmd.Env = []string{childEnv + "=1"}
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "TRAWL_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, tc.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("trawl-dev -install-redis: %v\n%s", err, stderr.String())
			}
			var warnings []string
			for _, line := range strings.Split(stderr.String(), "\n") {
				if strings.HasPrefix(line, "trawl-dev: warning: ") {
					warnings = append(warnings, line)
				}
			}
			switch {
			case tc.want == "" && len(warnings) > 0:
				t.Errorf("warnings %q, want none", warnings)
			case tc.want != "" && (len(warnings) != 1 || !strings.HasSuffix(warnings[0], tc.want)):
				t.Errorf("warnings %q, want one ending %q", warnings, tc.want)
			}
			if strings.Contains(stderr.String(), secret) {
				t.Errorf("stderr shows a value:\n%s", stderr.String())
			}
		})
	}
}
