package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
)

// Settings are the policy settings every service that follows the rules reads once.
type Settings struct {
	Poll       time.Duration // TRAWL_POLICY_POLL: how often a Watcher reads the store's version
	SecretsDir string        // TRAWL_SECRETS_DIR: the directory of secret files (DirSecrets)
}

// Defaults: a change reaches every process within half a second and a load; secrets where
// Docker Compose and Kubernetes mount them.
var Defaults = Settings{Poll: 500 * time.Millisecond, SecretsDir: "/run/secrets"}

// Load reads the settings; range checks are Validate's.
func Load(r *envconfig.Reader) Settings {
	return Settings{
		Poll:       r.Duration("POLICY_POLL", Defaults.Poll),
		SecretsDir: r.String("SECRETS_DIR", Defaults.SecretsDir),
	}
}

// Validate reports every setting out of range. The poll is at most 1.5 s so that a
// change is in force everywhere within 2 s.
func (s Settings) Validate() error {
	var errs []error
	if s.Poll < 10*time.Millisecond || s.Poll > 1500*time.Millisecond {
		errs = append(errs, fmt.Errorf("TRAWL_POLICY_POLL=%s: want 10ms..1.5s (a change must be in force within 2s)", s.Poll))
	}
	if s.SecretsDir == "" {
		errs = append(errs, errors.New("TRAWL_SECRETS_DIR is empty: want the directory of secret files"))
	}
	return errors.Join(errs...)
}
