package dockerhost

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// Every image the project's files name by default (a Dockerfile's ARG default or literal
// FROM, a ${TRAWL_…_IMAGE:-default} of compose.yaml, an `image:` of the Helm chart's
// values) is one a stand-in provides, and every
// stand-in is named somewhere: a base image renamed in one place and not in the other would
// leave the compose test building on a registry it cannot reach, or on a stand-in nothing
// uses.
func TestBaseImagesNamed(t *testing.T) {
	root := filepath.Join("..", "..")
	// Every image the project builds comes from the Dockerfile at the root (a file of its own
	// under services/ would be one this does not read: composecheck refuses one), the
	// compose test's web from its own.
	dockerfiles := []string{filepath.Join(root, "Dockerfile"), filepath.Join(root, "devstack", "composetest", "synthweb.Dockerfile")}
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
	stageRe := regexp.MustCompile(`(?mi)^FROM\s+\S+\s+AS\s+(\S+)`)
	var stages []string
	for _, df := range dockerfiles {
		scan(df, dockerfileRe)
		b, _ := os.ReadFile(df)
		for _, m := range stageRe.FindAllStringSubmatch(string(b), -1) {
			stages = append(stages, m[1])
		}
	}
	scan(filepath.Join(root, "compose.yaml"), regexp.MustCompile(`\$\{TRAWL_\w*IMAGE:-([^}]+)\}`))
	// The chart's NATS and Redis (its services' images are built, named by prefix and tag).
	scan(filepath.Join(root, "deploy", "helm", "trawl", "values.yaml"), regexp.MustCompile(`(?m)^\s*image:\s*([^\s#]+)\s*$`))
	delete(named, "scratch")
	for _, st := range stages {
		delete(named, st)
	}
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

// The NATS image users get by default is the minor version every test runs: the stand-in
// is built from devstack's nats-server module, so a default naming another minor would
// ship a server no test ran.
func TestNATSImageIsTheTestedServer(t *testing.T) {
	v, err := moduleVersion(filepath.Join("..", "go.mod"), "github.com/nats-io/nats-server/v2")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^v2\.(\d+)\.`).FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("devstack/go.mod's nats-server %s: want v2.<minor>.<patch>", v)
	}
	if want := "nats:2." + m[1] + "-alpine"; NATSImage != want {
		t.Errorf("NATSImage %s, but the tests run nats-server %s: want %s", NATSImage, v, want)
	}
}
