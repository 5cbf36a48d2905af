package config

import (
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/envconfig/envdoc"
)

// TestSettingsDocumented holds the settings reference (docs/configuration.md), compose.yaml's fallbacks and
// .env to every variable this service reads and the default it gives.
func TestSettingsDocumented(t *testing.T) {
	envdoc.Test(t, "../../../..", func(r *envconfig.Reader) error { _, err := Load(r); return err })
}
