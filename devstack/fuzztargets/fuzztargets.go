// Package fuzztargets finds every fuzz target of a source tree by reading its test files,
// so `make fuzz` runs the targets that exist rather than a list kept by hand that falls
// behind them.
package fuzztargets

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// Target is one fuzz function and the directory of its package.
type Target struct {
	Dir  string // package directory, relative to the root it was found under, "./"-prefixed
	Name string // FuzzXxx
}

// Find walks root and returns every top-level func FuzzXxx(*testing.F) in a _test.go
// file, sorted by directory then name. Directories named testdata, vendor or starting with
// "." or "_" are skipped, as the go command skips them.
func Find(root string) ([]Target, error) {
	var out []Target
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("fuzztargets: %w", err)
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return fmt.Errorf("fuzztargets: %w", err)
		}
		for _, n := range fuzzFuncs(f) {
			out = append(out, Target{Dir: "./" + filepath.ToSlash(rel), Name: n})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Dir != out[j].Dir {
			return out[i].Dir < out[j].Dir
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
