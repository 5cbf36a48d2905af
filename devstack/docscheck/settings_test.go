package docscheck

import (
	"regexp"
	"testing"
)

// TestSettingsReadOneWay: every TRAWL_* variable is read through shared/envconfig's Reader,
// which records it for the tests that hold the settings reference (docs/configuration.md) to the code
// (shared/envconfig/envdoc); a direct os.Getenv would be a setting no test sees.
func TestSettingsReadOneWay(t *testing.T) {
	forbidInCode(t, regexp.MustCompile(`os\.(Getenv|LookupEnv)\("TRAWL_`), "shared/envconfig",
		"reads a TRAWL_ variable directly; read it with an envconfig.Reader (envconfig.Overlay for a program that starts services)")
}
