package dockerhost

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// Every image the project's files name by default (a Dockerfile's ARG default or literal
// FROM, a ${TRAWL_…_IMAGE:-default} of compose.yaml) is one a stand-in provides, and every
// stand-in is named somewhere: a base image renamed in one place and not in the other would
// leave the compose test building on a registry it cannot reach, or on a stand-in nothing
// uses.
func TestBaseImagesNamed(t *testing.T) {
	root := filepath.Join("..", "..")
	dockerfiles, err := filepath.Glob(filepath.Join(root, "services", "*", "Dockerfile"))
	if err != nil || len(dockerfiles) == 0 {
		t.Fatalf("no services/*/Dockerfile under %s: %v", root, err)
	}
	dockerfiles = append(dockerfiles, filepath.Join(root, "devstack", "composetest", "synthweb.Dockerfile"))
	named := map[string][]string{} // image → files naming it
	scan := func(file string, re *regexp.Regexp) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			named[m[1]] = append(named[m[1]], rel)
		}
	}
	// FROM lines name images unless they take an ARG ($…), a build stage or scratch.
	dockerfileRe := regexp.MustCompile(`(?m)^(?:ARG\s+\w+=|FROM\s+)([^\s$]\S*)`)
	for _, df := range dockerfiles {
		scan(df, dockerfileRe)
	}
	scan(filepath.Join(root, "compose.yaml"), regexp.MustCompile(`\$\{TRAWL_\w*IMAGE:-([^}]+)\}`))
	delete(named, "scratch")
	if len(named) == 0 {
		t.Fatal("the Dockerfiles and compose.yaml name no image: the patterns no longer match them")
	}
	for img, where := range named {
		if !slices.Contains(BaseImages, img) {
			t.Errorf("%v name %s, which no stand-in provides (dockerhost.BaseImages)", where, img)
		}
	}
	for _, img := range BaseImages {
		if len(named[img]) == 0 {
			t.Errorf("no Dockerfile or compose.yaml names %s, which a stand-in takes the name of", img)
		}
	}
}
