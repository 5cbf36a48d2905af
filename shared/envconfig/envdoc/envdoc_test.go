package envdoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
)

// TestCheckHoldsTheReference runs Check and Stray on a repository of their own: the
// reference must document every setting read exactly once with the code's default, and
// README.md's short table may only repeat what the reference says.
func TestCheckHoldsTheReference(t *testing.T) {
	const row = "| `TRAWL_MIN_DELAY` | `1s` | least gap |\n"
	for _, tc := range []struct {
		name, reference, readme string
		want                    string // a piece of the one complaint, "" for none
	}{
		{"documented once", row, "", ""},
		{"quick table agrees", row, row, ""},
		{"missing from the reference", "| `TRAWL_OTHER` | `1` | x |\n", "", "TRAWL_MIN_DELAY (default \"1s\") is read but has no row in docs/configuration.md"},
		{"documented twice", row + row, "", "TRAWL_MIN_DELAY has 2 rows in docs/configuration.md"},
		{"quick table disagrees", row, "| `TRAWL_MIN_DELAY` | `2s` | x |\n", "README.md's table says the default is `2s`"},
		{"wrong default", "| `TRAWL_MIN_DELAY` | `3s` | x |\n", "", "docs/configuration.md says the default is `3s`"},
		{"quick table names a setting gone", row, row + "| `TRAWL_GONE` | `1` | x |\n", "TRAWL_GONE is in README.md's table but has no row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, "docs", "configuration.md"), "| variable | default | meaning |\n|---|---|---|\n"+tc.reference)
			write(t, filepath.Join(root, "README.md"), "| variable | default | meaning |\n|---|---|---|\n"+tc.readme)
			write(t, filepath.Join(root, "compose.yaml"), "")
			write(t, filepath.Join(root, ".env"), "")
			doc, err := Read(root)
			if err != nil {
				t.Fatal(err)
			}
			r := envconfig.FromMap(nil)
			r.Duration("MIN_DELAY", time.Second)
			got := append(doc.Check(r.Read()), doc.Stray()...)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("complaints %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("complaints %q, want one containing %q", got, tc.want)
			}
		})
	}
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
