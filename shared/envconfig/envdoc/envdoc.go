// Package envdoc holds the documentation of the settings to the code: every TRAWL_*
// variable a program reads (envconfig.Reader.Read) must have exactly one row in the
// reference's tables (docs/configuration.md), with the default the code gives, and the
// fallbacks compose.yaml writes (${TRAWL_X:-v}) and the values .env sets must be that
// default too, unless the table says the deployment sets its own: a default cell with
// "(Compose: `v`)" holds compose.yaml and .env to v instead; an empty fallback
// (${TRAWL_X:-}, a setting compose.yaml passes through) is the code's default, as
// envconfig reads an empty variable as unset. README.md's short table of the settings to
// start with repeats some rows; each must say what the reference says.
package envdoc

import (
	"bufio"
	"bytes"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
)

// Reference is the settings reference, relative to the repository's root; Quick is the
// document that opens with the settings to start with.
const (
	Reference = "docs/configuration.md"
	Quick     = "README.md"
)

// The headings of the reference's tables of variables no Trawl program reads: the images
// compose.yaml builds and runs from, and what Compose and the tests read (credentials
// that compose.yaml folds into the services' URLs among them).
const (
	ImagesTable  = "Images (compose.yaml)"
	ToolingTable = "Compose and the tests"
)

// Doc is what the repository's documentation says of the settings.
type Doc struct {
	// Rows: variable → its default cell in the reference, as written. A row of a prefix
	// the reference reserves ("`TRAWL_TEST_*`") is keyed by the prefix and its star.
	Rows map[string]string
	// Count: variable → how many rows of the reference name it.
	Count map[string]int
	// Table: variable → the heading of the reference's section its row is in.
	Table map[string]string
	// Quick: variable → its default cell in README.md's short table.
	Quick map[string]string
	// Compose: variable → the fallbacks compose.yaml gives it (${VAR:-fallback}).
	Compose map[string][]string
	// DotEnv: variable → its value in .env.
	DotEnv map[string]string
}

// Read reads the documentation under the repository root.
func Read(root string) (Doc, error) {
	d := Doc{Rows: map[string]string{}, Count: map[string]int{}, Table: map[string]string{},
		Quick: map[string]string{}, Compose: map[string][]string{}, DotEnv: map[string]string{}}
	if err := eachRow(filepath.Join(root, filepath.FromSlash(Reference)), func(heading, name, cell string) {
		d.Rows[name] = cell
		d.Count[name]++
		d.Table[name] = heading
	}); err != nil {
		return d, err
	}
	if err := eachRow(filepath.Join(root, Quick), func(_, name, cell string) {
		d.Quick[name] = cell
	}); err != nil {
		return d, err
	}
	if err := eachLine(filepath.Join(root, "compose.yaml"), func(line string) {
		for _, m := range fallback.FindAllStringSubmatch(line, -1) {
			d.Compose[m[1]] = append(d.Compose[m[1]], m[2])
		}
	}); err != nil {
		return d, err
	}
	err := eachLine(filepath.Join(root, ".env"), func(line string) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.HasPrefix(k, envconfig.Prefix) {
			d.DotEnv[k] = v
		}
	})
	return d, err
}

var (
	varName  = regexp.MustCompile("`(" + envconfig.Prefix + "[A-Z0-9_]+(?:_\\*)?)`")
	fallback = regexp.MustCompile(`\$\{(` + envconfig.Prefix + `[A-Z0-9_]+):-([^}]*)\}`)
	literal  = regexp.MustCompile("^`([^`]*)`(?:\\s*\\(.*\\))?$")
	deployed = regexp.MustCompile("\\(Compose: `([^`]*)`\\)")
)

// Registry is every name the reference documents, sorted, and apart the prefixes it
// reserves (without their star): what envconfig.Known knows.
func (d Doc) Registry() (names, prefixes []string) {
	for name := range d.Rows {
		if p, ok := strings.CutSuffix(name, "*"); ok {
			prefixes = append(prefixes, p)
		} else {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	sort.Strings(prefixes)
	return names, prefixes
}

// ServiceSettings is every setting the reference documents for the Trawl programs, sorted:
// its names outside the ImagesTable and ToolingTable sections. compose.yaml passes each of
// them to every service it runs (devstack/composecheck holds it to this list), so a
// setting documented here reaches a service from .env or the shell without a second list
// to keep. It fails when either section is missing: renamed, the tooling's variables
// (passwords among them) would be taken for services' settings.
func (d Doc) ServiceSettings() ([]string, error) {
	seen := map[string]bool{}
	for _, h := range d.Table {
		seen[h] = true
	}
	for _, h := range []string{ImagesTable, ToolingTable} {
		if !seen[h] {
			return nil, fmt.Errorf("envdoc: %s has no settings under the heading %q", Reference, h)
		}
	}
	names, _ := d.Registry()
	var out []string
	for _, n := range names {
		if h := d.Table[n]; h != ImagesTable && h != ToolingTable {
			out = append(out, n)
		}
	}
	return out, nil
}

// KnownSource is shared/envconfig's known_gen.go for the reference's Registry: go
// generate writes it (shared/envconfig/gen_known.go), and TestKnownIsTheReference fails
// when the file in the tree is not it.
func (d Doc) KnownSource() ([]byte, error) {
	names, prefixes := d.Registry()
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by gen_known.go from %s; DO NOT EDIT.\n\npackage envconfig\n\n", Reference)
	fmt.Fprintf(&b, "// knownNames is every variable %s documents, sorted.\nvar knownNames = [...]string{\n", Reference)
	for _, n := range names {
		fmt.Fprintf(&b, "\t%q,\n", n)
	}
	fmt.Fprintf(&b, "}\n\n// knownPrefixes are the prefixes %s reserves for the tests and benchmarks.\nvar knownPrefixes = [...]string{\n", Reference)
	for _, p := range prefixes {
		fmt.Fprintf(&b, "\t%q,\n", p)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

// eachRow calls f with each variable a settings table of the file names in its first
// cell, the row's default cell, and the heading (##) of the section it is in.
func eachRow(path string, f func(heading, name, cell string)) error {
	heading := ""
	return eachLine(path, func(line string) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			heading = strings.TrimSpace(h)
			return
		}
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			return
		}
		for _, m := range varName.FindAllStringSubmatch(cells[1], -1) {
			f(heading, m[1], strings.TrimSpace(cells[2]))
		}
	})
}

func eachLine(path string, f func(string)) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("envdoc: %w", err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f(sc.Text())
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("envdoc: %s: %w", path, err)
	}
	return nil
}

// Check returns one line per disagreement between the settings read and the documentation.
// A default cell that is prose rather than one value ("all", "`:9101`…`:9105`") is not
// compared; "empty" is the empty value.
func (d Doc) Check(read []envconfig.Setting) []string {
	var out []string
	for _, s := range read {
		cell, ok := d.Rows[s.Name]
		if !ok {
			out = append(out, fmt.Sprintf("%s (default %q) is read but has no row in %s", s.Name, s.Default, Reference))
			continue
		}
		if n := d.Count[s.Name]; n > 1 {
			out = append(out, fmt.Sprintf("%s has %d rows in %s: document it once", s.Name, n, Reference))
		}
		if q, ok := d.Quick[s.Name]; ok && q != cell {
			out = append(out, fmt.Sprintf("%s: %s's table says the default is %s, %s says %s", s.Name, Quick, q, Reference, cell))
		}
		if s.IfSet {
			continue
		}
		if doc, ok := docDefault(cell); ok && !same(s, doc) {
			out = append(out, fmt.Sprintf("%s: %s says the default is %s, the code gives %q", s.Name, Reference, cell, s.Default))
		}
		want, whose := s, "the code's default"
		if m := deployed.FindStringSubmatch(cell); m != nil {
			want.Default, whose = m[1], Reference+"'s Compose value"
			// Empty fallbacks pass the setting through at the code's default: one must
			// give the Compose value, or the reference's claim is not true.
			if !slices.ContainsFunc(d.Compose[s.Name], func(v string) bool { return same(want, v) }) {
				out = append(out, fmt.Sprintf("%s: compose.yaml never falls back to %s %q", s.Name, whose, want.Default))
			}
		}
		for _, v := range d.Compose[s.Name] {
			if strings.TrimSpace(v) != "" && !same(want, v) {
				out = append(out, fmt.Sprintf("%s: compose.yaml falls back to %q, %s is %q", s.Name, v, whose, want.Default))
			}
		}
		if v, ok := d.DotEnv[s.Name]; ok && !same(want, v) {
			out = append(out, fmt.Sprintf("%s: .env sets %q, %s is %q", s.Name, v, whose, want.Default))
		}
	}
	return out
}

// Stray returns one line per variable README.md's short table names that the reference
// does not document: a setting renamed or gone, which no program's Check would see.
func (d Doc) Stray() []string {
	var out []string
	for name := range d.Quick {
		if _, ok := d.Rows[name]; !ok {
			out = append(out, fmt.Sprintf("%s is in %s's table but has no row in %s", name, Quick, Reference))
		}
	}
	sort.Strings(out)
	return out
}

// docDefault is the value a default cell states, when it states one.
func docDefault(cell string) (string, bool) {
	if strings.HasPrefix(cell, "empty") {
		return "", true
	}
	if m := literal.FindStringSubmatch(cell); m != nil {
		return m[1], true
	}
	return "", false
}

// same says v, as written, is the setting's default.
func same(s envconfig.Setting, v string) bool {
	v = strings.TrimSpace(v)
	switch s.Kind {
	case envconfig.KindDuration:
		a, errA := duration(v)
		b, errB := duration(s.Default)
		return errA == nil && errB == nil && a == b
	case envconfig.KindBytes:
		a, errA := envconfig.ParseBytes(v)
		b, errB := envconfig.ParseBytes(s.Default)
		return errA == nil && errB == nil && a == b
	case envconfig.KindInt, envconfig.KindFloat:
		a, errA := strconv.ParseFloat(v, 64)
		b, errB := strconv.ParseFloat(s.Default, 64)
		return errA == nil && errB == nil && a == b
	case envconfig.KindBool:
		a, errA := strconv.ParseBool(v)
		b, errB := strconv.ParseBool(s.Default)
		return errA == nil && errB == nil && a == b
	case envconfig.KindList:
		return strings.Join(envconfig.SplitList(v), ",") == s.Default
	}
	return v == s.Default
}

// duration reads a duration as envconfig.Reader does: Go syntax or plain seconds.
func duration(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(f * float64(time.Second)), nil
	}
	return time.ParseDuration(v)
}

// Test is a program's settings test: load reads the program's settings from a Reader with
// nothing set, which must succeed, and every setting it read must agree with the
// documentation under root (the repository, relative to the test's package).
func Test(t testing.TB, root string, load func(*envconfig.Reader) error) {
	t.Helper()
	r := envconfig.FromMap(nil)
	if err := load(r); err != nil {
		t.Fatalf("the defaults do not load: %v", err)
	}
	if len(r.Read()) < 5 {
		t.Fatalf("only %d settings read", len(r.Read()))
	}
	doc, err := Read(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doc.Check(r.Read()) {
		t.Error(d)
	}
	for _, d := range doc.Stray() {
		t.Error(d)
	}
	// Every setting a program reads is known to all the others, which must not warn of it.
	for _, s := range r.Read() {
		if !envconfig.Known(s.Name) {
			t.Errorf("%s is read but envconfig.Known does not know it: document it in %s and run go generate ./shared/envconfig", s.Name, Reference)
		}
	}
}
