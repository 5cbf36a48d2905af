package config

import (
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/envconfig/envdoc"
)

// TestSettingsDocumented holds the settings reference (docs/configuration.md) to every variable trawlctl
// reads and the default it gives.
func TestSettingsDocumented(t *testing.T) {
	envdoc.Test(t, "../../..", func(r *envconfig.Reader) error { Load(r); return nil })
}
