package docscheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The two ways the tree cites a section of a document: the document's path then the
// heading in quotes (also with a comma or an opening parenthesis between), and the heading
// in quotes then "in" and the path. The file name
// must not follow a quote, so a Go string literal ("README.md") is not read as a citation.
var (
	fileThenHeading = regexp.MustCompile(`(?:^|[^"\w./-])((?:[\w.-]+/)*[\w.-]+\.md)(?:[ ,(]|, \()+"([^"]+)"`)
	headingThenFile = regexp.MustCompile(`"([^"]+)" in ((?:[\w.-]+/)*[\w.-]+\.md)`)
	commentMarker   = regexp.MustCompile(`\n[ \t]*(//|#|--)?[ \t]*`)
)

// self is this file, whose test cases cite documents that are not in the tree.
const self = "devstack/docscheck/refs_test.go"

// citation is one reference to a section: the file that makes it, the document and the
// heading it names.
type citation struct {
	from, doc, heading string
}

// citations reads every citation of a section in text (a file's contents), joining a
// citation split over lines of a comment or a paragraph.
func citations(from, text string) []citation {
	flat := commentMarker.ReplaceAllString(text, " ")
	var out []citation
	for _, m := range fileThenHeading.FindAllStringSubmatch(flat, -1) {
		out = append(out, citation{from, m[1], strings.TrimSpace(strings.TrimLeft(m[2], "#"))})
	}
	for _, m := range headingThenFile.FindAllStringSubmatch(flat, -1) {
		out = append(out, citation{from, m[2], strings.TrimSpace(strings.TrimLeft(m[1], "#"))})
	}
	return out
}

// headings reads the headings of a Markdown file (outside fenced blocks), without their #.
func headings(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced && strings.HasPrefix(line, "#") {
			out = append(out, strings.TrimSpace(strings.TrimLeft(line, "#")))
		}
	}
	return out, sc.Err()
}

// names says the heading h answers to the citation name: the same text, or the text
// followed by a parenthesis or a colon ("The frontier" names "The frontier (scheduler)",
// "Durability" names "Durability: one setting for both stores").
func names(h, name string) bool {
	return h == name || strings.HasPrefix(h, name+" (") || strings.HasPrefix(h, name+":")
}

// unresolved returns, for each citation, why it does not resolve ("" when it does): the
// document is looked for from the repository's root, then beside the citing file.
func unresolved(root string, c citation) string {
	path := filepath.Join(root, filepath.FromSlash(c.doc))
	if _, err := os.Stat(path); err != nil {
		path = filepath.Join(root, filepath.Dir(filepath.FromSlash(c.from)), filepath.FromSlash(c.doc))
	}
	hs, err := headings(path)
	if err != nil {
		return c.from + " cites " + c.doc + ", which is not in the tree"
	}
	for _, h := range hs {
		if names(h, c.heading) {
			return ""
		}
	}
	return c.from + ` cites ` + c.doc + ` "` + c.heading + `", which has no such heading`
}

// checkCitations returns one line per citation under root that names a document or a
// heading that does not exist, and how many citations it read.
func checkCitations(t *testing.T, root string) ([]string, int) {
	t.Helper()
	var bad []string
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".go", ".md", ".lua", ".yaml", ".yml":
		default:
			if name != "Makefile" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if filepath.ToSlash(rel) == self {
			return nil // its cases cite documents of their own trees
		}
		for _, c := range citations(filepath.ToSlash(rel), string(b)) {
			n++
			if why := unresolved(root, c); why != "" {
				bad = append(bad, why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bad, n
}

// TestCitedSectionsExist: a comment or a document that sends its reader to a section
// (`docs/architecture.md "Durability"`, `"Recrawl" in shared/recrawl/README.md`) names a
// document and a heading that exist, so moving or renaming a section breaks this test,
// not the reader's way to it.
func TestCitedSectionsExist(t *testing.T) {
	bad, n := checkCitations(t, repoRoot)
	for _, b := range bad {
		t.Error(b)
	}
	if n < 20 {
		t.Errorf("only %d citations read: the patterns no longer match the tree's", n)
	}
}

// TestCitationCheckFindsABrokenOne runs the check on a tree of its own whose one citation
// names a heading its document does not have, in a comment split over two lines.
func TestCitationCheckFindsABrokenOne(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		broken     bool
	}{
		{"resolves", "// see docs/a.md, \"The\n// frontier\".\npackage x\n", false},
		{"no such heading", "// see docs/a.md, \"Gone\n// section\".\npackage x\n", true},
		{"no such document", "// see docs/b.md (\"The frontier\").\npackage x\n", true},
		{"heading first", "// \"Gone\" in docs/a.md.\npackage x\n", true},
		{"a string literal is no citation", "package x\n\nvar _ = []string{\"docs/a.md\", \"Gone\"}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "docs"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "docs", "a.md"), []byte("# A\n\n## The frontier (scheduler)\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "x.go"), []byte(tc.code), 0o644); err != nil {
				t.Fatal(err)
			}
			bad, _ := checkCitations(t, root)
			if got := len(bad) > 0; got != tc.broken {
				t.Errorf("broken = %v, want %v (%q)", got, tc.broken, bad)
			}
		})
	}
}
