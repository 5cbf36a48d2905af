// Package workspace checks the Go workspace as a whole: the layout keeps one module per
// service, and this keeps their dependencies from drifting apart.
package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/trawl/trawl/devstack/stack"
)

// own is the prefix of the workspace's own modules, which are replaced by their directories.
const own = "github.com/trawl/trawl"

// TestEveryDependencyAtOneVersion holds every module of go.work to one version of each
// dependency, direct or indirect: a service built alone (GOWORK=off, as its image is built)
// then runs the same code as the workspace's tests ran. To move a dependency, move it in
// every module (`make tidy` afterwards).
func TestEveryDependencyAtOneVersion(t *testing.T) {
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mods := workspaceModules(t, root)
	if len(mods) < 2 {
		t.Fatalf("go.work lists %d modules: expected the services and shared", len(mods))
	}
	drift := drifts(t, root, mods)
	for _, d := range drift {
		t.Error(d)
	}
}

func workspaceModules(t *testing.T, root string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatalf("parse go.work: %v", err)
	}
	var dirs []string
	for _, u := range wf.Use {
		dirs = append(dirs, u.Path)
	}
	return dirs
}

// drifts names each dependency required at more than one version, with the modules at each.
func drifts(t *testing.T, root string, dirs []string) []string {
	t.Helper()
	at := map[string]map[string][]string{} // dependency → version → modules
	for _, d := range dirs {
		p := filepath.Join(root, d, "go.mod")
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.ParseLax(p, data, nil)
		if err != nil {
			t.Fatalf("parse %s: %v", p, err)
		}
		for _, r := range f.Require {
			if strings.HasPrefix(r.Mod.Path, own+"/") {
				continue
			}
			if at[r.Mod.Path] == nil {
				at[r.Mod.Path] = map[string][]string{}
			}
			at[r.Mod.Path][r.Mod.Version] = append(at[r.Mod.Path][r.Mod.Version], d)
		}
	}
	var out []string
	for dep, vs := range at {
		if len(vs) < 2 {
			continue
		}
		var parts []string
		for v, ms := range vs {
			parts = append(parts, fmt.Sprintf("%s in %s", v, strings.Join(ms, ", ")))
		}
		sort.Strings(parts)
		out = append(out, fmt.Sprintf("%s is required at %d versions: %s", dep, len(vs), strings.Join(parts, "; ")))
	}
	slices.Sort(out)
	return out
}
