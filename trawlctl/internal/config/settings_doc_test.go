package config

import (
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/envconfig/envdoc"
)

// TestSettingsDocumented holds README.md's settings tables to every variable trawlctl
// reads and the default it gives.
func TestSettingsDocumented(t *testing.T) {
	r := envconfig.FromMap(nil)
	Load(r)
	if len(r.Read()) < 5 {
		t.Fatalf("only %d settings read", len(r.Read()))
	}
	doc, err := envdoc.Read("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doc.Check(r.Read()) {
		t.Error(d)
	}
}
