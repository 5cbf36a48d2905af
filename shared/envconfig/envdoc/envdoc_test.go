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

// TestRegistry: what envconfig.Known knows is every name in the first cell of a table
// row of the reference, several names to a row too, and each reserved prefix.
func TestRegistry(t *testing.T) {
	for _, tc := range []struct {
		name, reference string
		names, prefixes string // comma-separated
	}{
		{"one row", "| `TRAWL_MIN_DELAY` | `1s` | x |\n", "TRAWL_MIN_DELAY", ""},
		{"two names in a row", "| `TRAWL_B_CERT`, `TRAWL_A_KEY` | empty | x |\n", "TRAWL_A_KEY,TRAWL_B_CERT", ""},
		{"a reserved prefix", "| `TRAWL_BENCH_*`, `TRAWL_TEST_*` | empty | x |\n", "", "TRAWL_BENCH_,TRAWL_TEST_"},
		{"a name in prose or a meaning is no row", "`TRAWL_PROSE` here\n| `TRAWL_A` | `1` | like `TRAWL_MEANT` |\n", "TRAWL_A", ""},
		{"not a setting of Trawl's", "| `GOGC` | `400` | x |\n", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, "docs", "configuration.md"), "| variable | default | meaning |\n|---|---|---|\n"+tc.reference)
			for _, f := range []string{"README.md", "compose.yaml", ".env"} {
				write(t, filepath.Join(root, f), "")
			}
			doc, err := Read(root)
			if err != nil {
				t.Fatal(err)
			}
			names, prefixes := doc.Registry()
			if got := strings.Join(names, ","); got != tc.names {
				t.Errorf("names %q, want %q", got, tc.names)
			}
			if got := strings.Join(prefixes, ","); got != tc.prefixes {
				t.Errorf("prefixes %q, want %q", got, tc.prefixes)
			}
		})
	}
}

// TestCheckComposeFallbacks: compose.yaml's fallbacks are the code's default, or the
// reference's Compose value where it states one; an empty fallback passes the setting
// through, which envconfig reads as unset (the code's default), so it is always right,
// but a stated Compose value must be given somewhere.
func TestCheckComposeFallbacks(t *testing.T) {
	const row, deployed = "| `TRAWL_MIN_DELAY` | `1s` | x |\n", "| `TRAWL_MIN_DELAY` | `1s` (Compose: `2s`) | x |\n"
	for _, tc := range []struct {
		name, reference, compose string
		want                     string // a piece of the one complaint, "" for none
	}{
		{"the code's default", row, "A: ${TRAWL_MIN_DELAY:-1s}\n", ""},
		{"another value", row, "A: ${TRAWL_MIN_DELAY:-2s}\n", `compose.yaml falls back to "2s", the code's default is "1s"`},
		{"passed through", row, "A: ${TRAWL_MIN_DELAY:-}\n", ""},
		{"the Compose value, passed through elsewhere", deployed, "A: ${TRAWL_MIN_DELAY:-2s}\nB: ${TRAWL_MIN_DELAY:-}\n", ""},
		{"the Compose value never given", deployed, "B: ${TRAWL_MIN_DELAY:-}\n", `compose.yaml never falls back to docs/configuration.md's Compose value "2s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, "docs", "configuration.md"), "| variable | default | meaning |\n|---|---|---|\n"+tc.reference)
			write(t, filepath.Join(root, "README.md"), "")
			write(t, filepath.Join(root, "compose.yaml"), tc.compose)
			write(t, filepath.Join(root, ".env"), "")
			doc, err := Read(root)
			if err != nil {
				t.Fatal(err)
			}
			r := envconfig.FromMap(nil)
			r.Duration("MIN_DELAY", time.Second)
			got := doc.Check(r.Read())
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("complaints %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("complaints %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// TestServiceSettings: what compose.yaml must pass to the services is every documented
// name but those of the images' and the tooling's tables, and without those two tables
// there is no telling the credentials from the settings.
func TestServiceSettings(t *testing.T) {
	const tooling = "## Images (compose.yaml)\n\n| variable | default | meaning |\n|---|---|---|\n| `TRAWL_GO_IMAGE` | `golang` | x |\n" +
		"## Compose and the tests\n\n| variable | default | meaning |\n|---|---|---|\n| `TRAWL_NATS_USER`, `TRAWL_NATS_PASSWORD` | empty | x |\n| `TRAWL_TEST_*` | empty | x |\n"
	const services = "## Every service\n\n| variable | default | meaning |\n|---|---|---|\n| `TRAWL_B` | `1` | x |\n| `GOGC` | `400` | x |\n" +
		"## fetcher\n\n| variable | default | meaning |\n|---|---|---|\n| `TRAWL_A_CERT`, `TRAWL_A_KEY` | empty | x |\n"
	for _, tc := range []struct {
		name, reference string
		want            string // comma-separated, or the error's piece
		fails           bool
	}{
		{"settings after the tooling", tooling + services, "TRAWL_A_CERT,TRAWL_A_KEY,TRAWL_B", false},
		{"settings before the tooling", services + tooling, "TRAWL_A_CERT,TRAWL_A_KEY,TRAWL_B", false},
		{"no tooling table", services, `under the heading "Images (compose.yaml)"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, "docs", "configuration.md"), tc.reference)
			for _, f := range []string{"README.md", "compose.yaml", ".env"} {
				write(t, filepath.Join(root, f), "")
			}
			doc, err := Read(root)
			if err != nil {
				t.Fatal(err)
			}
			names, err := doc.ServiceSettings()
			switch {
			case tc.fails && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			case !tc.fails && err != nil:
				t.Fatal(err)
			case !tc.fails && strings.Join(names, ",") != tc.want:
				t.Errorf("service settings %q, want %q", strings.Join(names, ","), tc.want)
			}
		})
	}
}

// TestKnownIsTheReference: shared/envconfig's known_gen.go, what every program knows at
// run time, is what go generate makes of today's reference: a setting documented since,
// or a row removed, fails here until it is generated again.
func TestKnownIsTheReference(t *testing.T) {
	doc, err := Read("../../..")
	if err != nil {
		t.Fatal(err)
	}
	want, err := doc.KnownSource()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../known_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("shared/envconfig/known_gen.go is not what %s documents: run go generate ./shared/envconfig", Reference)
	}
	names, _ := doc.Registry()
	for _, n := range names {
		if !envconfig.Known(n) {
			t.Errorf("%s is documented but envconfig.Known does not know it", n)
		}
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
