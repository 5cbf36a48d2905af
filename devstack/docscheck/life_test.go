package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLifeOfAFetchTaskNamesRealFunctions holds the "Life of a fetch task" section of
// docs/architecture.md to the code: each function it names (backquoted as `name()`) must
// be declared in the Go file named last before it (backquoted as `path/file.go`), so a
// rename or a move breaks this test, not a reader's trust in the section.
func TestLifeOfAFetchTaskNamesRealFunctions(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "\n## Life of a fetch task\n")
	if i < 0 {
		t.Fatal(`docs/architecture.md has no "## Life of a fetch task" section`)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	// The hops are the numbered list; the introduction above it shows the notation.
	if k := strings.Index(s, "\n1. "); k >= 0 {
		s = s[k:]
	}
	code := regexp.MustCompile("`([^`]+)`")
	fn := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\(\)$`)
	file, src := "", ""
	checked := 0
	for _, m := range code.FindAllStringSubmatch(s, -1) {
		w := m[1]
		switch {
		case strings.HasSuffix(w, ".go"):
			b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(w)))
			if err != nil {
				t.Errorf("the section names %s, which is not in the tree", w)
				file, src = "", ""
				continue
			}
			file, src = w, string(b)
		case fn.MatchString(w):
			if file == "" {
				t.Errorf("the section names %s before any Go file", w)
				continue
			}
			w = fn.FindStringSubmatch(w)[1]
			decl := regexp.MustCompile(`(?m)^func (\([^)]*\) )?` + regexp.QuoteMeta(w) + `\(`)
			if !decl.MatchString(src) {
				t.Errorf("the section names %s in %s, which declares no such function", w, file)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Errorf("only %d functions named: the section lost its file and function names", checked)
	}
}
