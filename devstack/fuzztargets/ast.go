package fuzztargets

import (
	"go/ast"
	"strings"
)

// fuzzFuncs are the names of f's fuzz targets: what `go test -fuzz` accepts, a top-level
// function named Fuzz… (not Fuzzy: the letter after Fuzz is not lower case) whose one
// parameter is a *testing.F.
func fuzzFuncs(f *ast.File) []string {
	var names []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !isFuzzName(fn.Name.Name) {
			continue
		}
		ps := fn.Type.Params.List
		if len(ps) != 1 || len(ps[0].Names) > 1 {
			continue
		}
		star, ok := ps[0].Type.(*ast.StarExpr)
		if !ok {
			continue
		}
		sel, ok := star.X.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "F" {
			continue
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "testing" {
			continue
		}
		names = append(names, fn.Name.Name)
	}
	return names
}

func isFuzzName(n string) bool {
	rest, ok := strings.CutPrefix(n, "Fuzz")
	if !ok {
		return false
	}
	return rest == "" || !(rest[0] >= 'a' && rest[0] <= 'z')
}
