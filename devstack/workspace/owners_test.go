package workspace

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/trawl/trawl/devstack/stack"
)

// store is a part of Trawl's state in Redis with one owner: the package that holds its
// layout and offers a read-only API, and the writers that must build its keys. Every other
// package reads it through that API, so that its layout can change in one place.
type store struct {
	name string
	// layout is the import path of the package that owns the layout.
	layout string
	// builders are the layout's functions and types that name keys.
	builders []string
	// literal matches a string literal that spells a key of the store by hand.
	literal *regexp.Regexp
	// owners are the directories (slash-separated, from the repository root, with a
	// trailing slash) allowed to name keys: the layout's package and the writers.
	owners []string
}

var stores = []store{
	{
		name:     "frontier",
		layout:   own + "/shared/frontierkeys",
		builders: []string{"ForShard", "Shard", "Dispatch", "DomainPages", "FrontQueueName", "BackQueueName"},
		// "{s3}", ":{s", "fq:3", "bq:host", "<prefix>:dispatch", "}:stats" and the like.
		literal: regexp.MustCompile(`\{s\d|:\{s|^(fq|bq):|:dispatch$|\}:(stats|heap|hosts|inflight|lease|lasterr|parked|policy-stats)$`),
		owners: []string{
			"shared/frontierkeys/",
			// The scheduler's frontier: its Lua scripts and the Go that runs them.
			"services/scheduler/internal/frontier/",
			// The scheduler publishes the dispatch gate (gate.go) and reads it back.
			"services/scheduler/internal/service/",
			// The politeness module runs inside the frontier's scripts, and its claims
			// write a host's state.
			"shared/politeness/",
		},
	},
	{
		name:     "seen filter",
		layout:   own + "/shared/bloomhash",
		builders: []string{"MetaKey", "BitmapKey", "StatsKey", "LayerField", "CountField"},
		literal:  regexp.MustCompile(`:bloom:`),
		owners:   []string{"shared/bloomhash/", "services/dedup/internal/bloom/"},
	},
}

// TestStoresHaveOneOwner holds the frontier and the seen filter to one owner each: outside
// the owner's directories no Go source names one of their keys, by the layout's key
// builders or by a literal key, so trawlctl, the status page and devstack read them
// through frontierkeys.Reader and bloomhash.Reader. Tests are not checked: they lay out
// fixtures as the writers would.
func TestStoresHaveOneOwner(t *testing.T) {
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files++
		for _, v := range keyUses(t, path, filepath.ToSlash(rel)) {
			t.Error(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("checked %d Go files under %s: not the repository", files, root)
	}
}

// keyUses are the places where the file at path (rel from the root) names a key of a
// store it does not own.
func keyUses(t *testing.T, path, rel string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", rel, err)
	}
	var out []string
	for _, s := range stores {
		if slices.ContainsFunc(s.owners, func(o string) bool { return strings.HasPrefix(rel, o) }) {
			continue
		}
		local := ""
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); p == s.layout {
				local = p[strings.LastIndex(p, "/")+1:]
				if im.Name != nil {
					local = im.Name.Name
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && local != "" && x.Name == local && slices.Contains(s.builders, n.Sel.Name) {
					out = append(out, fset.Position(n.Pos()).String()+": names a key of the "+s.name+" ("+local+"."+n.Sel.Name+
						"); read it through the owner's read-only API ("+s.layout+")")
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				// A key has no space; a text with one (a command's help) only names it.
				if v, err := strconv.Unquote(n.Value); err == nil && !strings.ContainsAny(v, " \t\n") && s.literal.MatchString(v) {
					out = append(out, fset.Position(n.Pos()).String()+": spells a key of the "+s.name+" ("+n.Value+
						"); read it through the owner's read-only API ("+s.layout+")")
				}
			}
			return true
		})
	}
	return out
}
