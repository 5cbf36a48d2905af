package composecheck

import (
	"debug/elf"
	"encoding/json"
	"go/version"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"go.yaml.in/yaml/v4"

	"github.com/trawl/trawl/devstack/stack"
)

// The images compose.yaml builds, one per service.
var images = []string{"scheduler", "fetcher", "parser", "dedup", "archiver", "renderer"}

// Every service image builds from what its Dockerfile copies. The Dockerfiles build with
// GOWORK=off, so each service module's own go.mod/go.sum must cover everything shared/
// imports, which the workspace hides. This replays each Dockerfile's build stage with this
// host's go (no Docker needed): the steps are read from the Dockerfile, so the two cannot
// drift apart. Module downloads go to the host's module cache, as the image's go mod
// download does to its own.
func TestImagesBuild(t *testing.T) {
	_, root := load(t)
	bc := readBuildContext(t, root)
	for _, name := range images {
		t.Run(name, func(t *testing.T) {
			df := readDockerfile(t, filepath.Join(root, "services", name, "Dockerfile"))
			r := newReplay(t, df, bc)
			copies := df.copiesFrom()
			if len(copies) == 0 {
				t.Fatal("the image copies nothing from a build stage")
			}
			var built []string
			for _, stageName := range uniqueFrom(copies) {
				r.run(df.stage(t, stageName))
			}
			for _, cp := range copies {
				for _, src := range cp.SourcePaths {
					p := r.host(src)
					if _, err := os.Stat(p); err != nil {
						t.Fatalf("COPY --from=%s %s: the build stage did not make it: %v", cp.From, src, err)
					}
					dest := cp.DestPath
					if strings.HasSuffix(dest, "/") {
						dest = path.Join(dest, path.Base(src))
					}
					if isFile(p) {
						assertStatic(t, p)
						built = append(built, dest)
					}
				}
			}
			if ep := entrypoint(df); !slices.Contains(built, ep) {
				t.Errorf("ENTRYPOINT %s is none of the binaries the image copies in (%v)", ep, built)
			}
			assertGoImageCovers(t, df, r)
		})
	}
}

// compose.yaml builds exactly these images, in every profile.
func TestImagesCoverCompose(t *testing.T) {
	p, root := loadProfiles(t, []string{"*"})
	var built []string
	for _, s := range p.Services {
		if s.Build == nil {
			continue
		}
		df := s.Build.Dockerfile
		if filepath.IsAbs(df) {
			df, _ = filepath.Rel(root, df)
		}
		if name, ok := strings.CutSuffix(filepath.ToSlash(df), "/Dockerfile"); ok {
			name = strings.TrimPrefix(name, "services/")
			if !slices.Contains(built, name) {
				built = append(built, name)
			}
		} else {
			t.Errorf("%s builds %s, which TestImagesBuild does not check", s.Name, df)
		}
	}
	slices.Sort(built)
	want := slices.Sorted(slices.Values(images))
	if !slices.Equal(built, want) {
		t.Errorf("compose.yaml builds %v; TestImagesBuild checks %v", built, want)
	}
}

func uniqueFrom(copies []*instructions.CopyCommand) []string {
	var out []string
	for _, c := range copies {
		if !slices.Contains(out, c.From) {
			out = append(out, c.From)
		}
	}
	return out
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// The runtime image is distroless/static: a binary that needs a dynamic loader or libc
// does not start there.
func assertStatic(t *testing.T, p string) {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked; the static runtime image cannot run it", filepath.Base(p))
		}
	}
}

func entrypoint(df *dockerfile) string {
	var ep string
	for _, c := range df.final().Commands {
		if e, ok := c.(*instructions.EntrypointCommand); ok && len(e.CmdLine) > 0 {
			ep = e.CmdLine[0]
		}
	}
	return ep
}

// The builder image's Go must be new enough for the module: the image has
// GOTOOLCHAIN=local, so a go directive past it fails the build there, not here, where the
// host's go may be newer.
func assertGoImageCovers(t *testing.T, df *dockerfile, r *replay) {
	t.Helper()
	var builder string
	for _, s := range df.stages {
		if s.Name != "" && slices.Contains(uniqueFrom(df.copiesFrom()), s.Name) {
			builder = df.baseImage(t, s)
		}
	}
	repo, tag, ok := strings.Cut(builder, ":")
	if !ok || path.Base(repo) != "golang" {
		t.Logf("builder image %s is not golang:<version>; its Go version is not checked", builder)
		return
	}
	imageGo := "go" + strings.SplitN(tag, "-", 2)[0]
	if !version.IsValid(imageGo) {
		t.Logf("builder image %s names no Go version; it is not checked", builder)
		return
	}
	if len(r.goDirs) == 0 {
		t.Fatalf("%s: the build stage runs no go command", df.path)
	}
	moduleDir := r.goDirs[len(r.goDirs)-1]
	cmd := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.GoVersion}}")
	cmd.Dir = r.host(moduleDir)
	cmd.Env = append(slices.Clone(r.base), r.env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m in %s: %v", moduleDir, err)
	}
	modGo := "go" + strings.TrimSpace(string(out))
	if version.Compare(version.Lang(modGo), version.Lang(imageGo)) > 0 {
		t.Errorf("%s needs %s; the builder image %s has %s", moduleDir, modGo, builder, imageGo)
	}
}

// imageVar is how compose.yaml names an image: a TRAWL_…_IMAGE variable with a default.
var imageVar = regexp.MustCompile(`^\$\{(TRAWL_[A-Z0-9_]+_IMAGE):-([^}]+)\}$`)

// Every image compose.yaml runs or builds from is a setting with today's image as its
// default, for a site that mirrors images into its own registry or has none: each image:
// is a TRAWL_…_IMAGE variable, and each build passes every build argument its Dockerfile
// declares before FROM as TRAWL_<argument>, defaulting to the Dockerfile's own default.
// The settings are documented in docs/configuration.md and .env.example.
func TestComposeImagesAreSettings(t *testing.T) {
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image string `yaml:"image"`
			Build *struct {
				Dockerfile string            `yaml:"dockerfile"`
				Args       map[string]string `yaml:"args"`
			} `yaml:"build"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	vars := map[string]string{} // variable → its default
	use := func(service, v, def string) {
		if old, ok := vars[v]; ok && old != def {
			t.Errorf("%s: %s defaults to %s here and to %s elsewhere", service, v, def, old)
		}
		vars[v] = def
	}
	checked := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(doc.Services)) {
		s := doc.Services[name]
		switch {
		case s.Image != "" && s.Build != nil:
			t.Errorf("%s has both image and build", name)
		case s.Image != "":
			m := imageVar.FindStringSubmatch(s.Image)
			if m == nil {
				t.Errorf("%s: image %q, want ${TRAWL_…_IMAGE:-default}", name, s.Image)
				continue
			}
			use(name, m[1], m[2])
		case s.Build != nil:
			df := readDockerfile(t, filepath.Join(root, filepath.FromSlash(s.Build.Dockerfile)))
			if !checked[df.path] {
				checked[df.path] = true
				assertBasesAreArgs(t, df)
			}
			args := df.argDefaults()
			for arg, def := range args {
				v, ok := s.Build.Args[arg]
				m := imageVar.FindStringSubmatch(v)
				switch {
				case !ok:
					t.Errorf("%s: build arg %s of %s is not passed", name, arg, s.Build.Dockerfile)
				case m == nil || m[1] != "TRAWL_"+arg:
					t.Errorf("%s: build arg %s = %q, want ${TRAWL_%s:-default}", name, arg, v, arg)
				case def == nil || m[2] != *def:
					t.Errorf("%s: TRAWL_%s defaults to %s, the Dockerfile's %s to %v", name, arg, m[2], arg, def)
				default:
					use(name, m[1], m[2])
				}
			}
			for arg := range s.Build.Args {
				if _, ok := args[arg]; !ok {
					t.Errorf("%s: build arg %s is not declared before FROM in %s", name, arg, s.Build.Dockerfile)
				}
			}
		}
	}
	want := []string{"TRAWL_GO_IMAGE", "TRAWL_NATS_IMAGE", "TRAWL_PROMETHEUS_IMAGE", "TRAWL_REDIS_IMAGE", "TRAWL_RENDERER_RUNTIME_IMAGE", "TRAWL_RUNTIME_IMAGE"}
	if got := slices.Sorted(maps.Keys(vars)); !slices.Equal(got, want) {
		t.Errorf("image settings %v, want %v", got, want)
	}

	// Set, they reach every service of every profile.
	var env []string
	for _, v := range want {
		env = append(env, v+"=registry.example/"+strings.ToLower(v))
	}
	p, _ := loadProfiles(t, []string{"*"}, env...)
	for _, s := range p.Services {
		if s.Build != nil {
			for arg, v := range s.Build.Args {
				if want := "registry.example/trawl_" + strings.ToLower(arg); v == nil || *v != want {
					t.Errorf("%s: build arg %s = %v with TRAWL_%s set, want %s", s.Name, arg, v, arg, want)
				}
			}
		} else if !strings.HasPrefix(s.Image, "registry.example/") {
			t.Errorf("%s: image %s with every TRAWL_…_IMAGE set", s.Name, s.Image)
		}
	}

	for _, file := range []string{"docs/configuration.md", ".env.example"} {
		body, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range want {
			if !strings.Contains(string(body), v) {
				t.Errorf("%s does not document %s", file, v)
			}
		}
	}
}

// Every FROM that is not an earlier stage names its image through a build argument, and
// no `# syntax=` line makes BuildKit pull its frontend from a registry (its built-in one
// reads these files).
func assertBasesAreArgs(t *testing.T, df *dockerfile) {
	t.Helper()
	body, err := os.ReadFile(df.path)
	if err != nil {
		t.Fatal(err)
	}
	if syntax, _, _, ok := parser.DetectSyntax(body); ok {
		t.Errorf("%s: `# syntax=%s` pulls the Dockerfile frontend from a registry", df.path, syntax)
	}
	args := df.argDefaults()
	var stages []string
	for _, s := range df.stages {
		base := s.BaseName
		arg, isArg := strings.CutPrefix(base, "${")
		arg, isArg = strings.CutSuffix(arg, "}")
		switch {
		case slices.Contains(stages, strings.ToLower(base)):
		case !isArg:
			t.Errorf("%s: FROM %s, want FROM ${ARG} with the image as the argument's default", df.path, base)
		case args[arg] == nil:
			t.Errorf("%s: FROM %s: %s is not declared with a default before the first FROM", df.path, base, arg)
		}
		stages = append(stages, strings.ToLower(s.Name))
	}
}

// Every module of the workspace resolves its packages and their tests alone, with
// GOWORK=off, as an image build or a user of one module does: its own go.mod/go.sum must
// cover what shared/ imports. The images check the five services by building them; this
// covers the rest (trawlctl, devstack, examples, the itests) at the cost of loading
// packages.
func TestModulesResolveAlone(t *testing.T) {
	_, root := load(t)
	out, err := exec.CommandContext(t.Context(), "go", "work", "edit", "-json", filepath.Join(root, "go.work")).Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatal(err)
	}
	if len(work.Use) == 0 {
		t.Fatal("go.work uses no module")
	}
	env := append(goImageEnv(t), "GOWORK=off", "GOFLAGS=-mod=readonly")
	for _, u := range work.Use {
		t.Run(strings.TrimPrefix(u.DiskPath, "./"), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), "go", "list", "-e", "-deps", "-test",
				"-f", "{{with .Error}}{{.}}\n{{end}}{{range .DepsErrors}}{{.}}\n{{end}}", "./...")
			cmd.Dir = filepath.Join(root, filepath.FromSlash(u.DiskPath))
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "" {
				t.Errorf("GOWORK=off go list -deps -test ./... in %s: %v\n%s", u.DiskPath, err, out)
			}
		})
	}
}
