package config

import (
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/envconfig/envdoc"
)

// TestSettingsDocumented holds README.md's settings tables, compose.yaml's fallbacks and
// .env to every variable this service reads and the default it gives.
func TestSettingsDocumented(t *testing.T) {
	r := envconfig.FromMap(nil)
	if _, err := Load(r); err != nil {
		t.Fatalf("the defaults do not load: %v", err)
	}
	if len(r.Read()) < 10 {
		t.Fatalf("only %d settings read", len(r.Read()))
	}
	doc, err := envdoc.Read("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doc.Check(r.Read()) {
		t.Error(d)
	}
}
