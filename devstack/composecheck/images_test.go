package composecheck

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"go/version"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"go.yaml.in/yaml/v4"

	"github.com/trawl/trawl/devstack/stack"
)

// The images compose.yaml builds, one per service (the Dockerfile's SERVICE), and the
// target each is built to: the archiver's adds its archive directory, the renderer's runs
// on Debian with Chromium.
var images = map[string]string{
	"scheduler": "service", "fetcher": "service", "parser": "service", "dedup": "service",
	"archiver": "archiver", "renderer": "renderer",
}

// Every service image builds from what the Dockerfile copies. The Dockerfile builds with
// GOWORK=off, so each service module's own go.mod/go.sum must cover everything shared/
// imports, which the workspace hides. This replays the Dockerfile's build stage with this
// host's go (no Docker needed), with the build arguments and target compose.yaml gives
// each service: the steps are read from the Dockerfile, so the two cannot drift apart.
// Module downloads go to the host's module cache, as the image's go mod download does to
// its own. The image then holds the service's own binary at /usr/local/bin/<service>,
// which its entrypoint runs and compose.yaml's healthchecks call, runs as nonroot and owns
// the volumes compose.yaml mounts on it.
func TestImagesBuild(t *testing.T) {
	p, root := loadProfiles(t, []string{"*"})
	bc := readBuildContext(t, root)
	builders := map[string][]types.ServiceConfig{} // SERVICE → the services built with it
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		if s := p.Services[name]; s.Build != nil {
			builders[serviceArg(s)] = append(builders[serviceArg(s)], s)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(images)) {
		t.Run(name, func(t *testing.T) {
			if len(builders[name]) == 0 {
				t.Fatalf("no service of compose.yaml builds with SERVICE=%s", name)
			}
			// TestImagesCoverCompose holds every build of one SERVICE alike.
			s := builders[name][0]
			target := s.Build.Target
			df := readDockerfile(t, dockerfilePath(s))
			r := newReplay(t, df, bc, buildArgs(s))
			copies := df.copiesFrom(t, target)
			if len(copies) == 0 {
				t.Fatal("the image copies nothing from a build stage")
			}
			for _, stageName := range uniqueFrom(copies) {
				r.run(df.stage(t, stageName))
			}
			img := imageOf(t, r, copies)
			err := filepath.WalkDir(img, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					assertStatic(t, p)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			bin := "/usr/local/bin/" + name
			reaper, ep := entrypoint(t, df, target)
			if got, err := resolve(img, ep); err != nil || got != bin {
				t.Errorf("ENTRYPOINT %s runs %q (%v), want %s", ep, got, err, bin)
			}
			// The renderer's browser leaves its processes to PID 1 when it stops: an init
			// must reap them. The other services start no process.
			if wantInit := target == "renderer"; (reaper != "") != wantInit {
				t.Errorf("ENTRYPOINT's init %q; want one: %v", reaper, wantInit)
			}
			assertMain(t, filepath.Join(img, bin), "github.com/trawl/trawl/services/"+name)
			user := imageUser(t, df, target)
			if user != "nonroot:nonroot" {
				t.Errorf("the image runs as %q, want nonroot:nonroot", user)
			}
			for _, s := range builders[name] {
				if hc := s.HealthCheck; hc == nil || len(hc.Test) < 2 || hc.Test[1] != bin {
					t.Errorf("%s: healthcheck %v, want %s healthcheck", s.Name, hc, bin)
				}
				assertVolumesOwned(t, s, df, img, user)
			}
			assertGoImageCovers(t, df, r, target)
		})
	}
}

// compose.yaml builds exactly these images, in every profile, each from the one
// Dockerfile at the repository root with its SERVICE and target, every build of one
// SERVICE alike; no service keeps a Dockerfile of its own beside it.
func TestImagesCoverCompose(t *testing.T) {
	p, root := loadProfiles(t, []string{"*"})
	built := map[string]types.ServiceConfig{}
	for _, sname := range slices.Sorted(maps.Keys(p.Services)) {
		s := p.Services[sname]
		if s.Build == nil {
			continue
		}
		if df := dockerfilePath(s); df != filepath.Join(root, "Dockerfile") {
			t.Errorf("%s builds %s, want the Dockerfile at the repository root", s.Name, df)
		}
		name := serviceArg(s)
		target, ok := images[name]
		switch {
		case name == "":
			t.Errorf("%s passes no SERVICE build argument", s.Name)
			continue
		case !ok:
			t.Errorf("%s builds SERVICE=%s, which TestImagesBuild does not check", s.Name, name)
			continue
		case s.Build.Target != target:
			t.Errorf("%s builds target %q, want %q", s.Name, s.Build.Target, target)
		case !strings.Contains(s.Name, name):
			t.Errorf("%s builds the %s image", s.Name, name)
		}
		if first, ok := built[name]; ok {
			if !maps.Equal(buildArgs(first), buildArgs(s)) || first.Build.Target != s.Build.Target {
				t.Errorf("%s and %s build %s differently: %v %q, %v %q", first.Name, s.Name, name,
					buildArgs(first), first.Build.Target, buildArgs(s), s.Build.Target)
			}
		} else {
			built[name] = s
		}
	}
	if got, want := slices.Sorted(maps.Keys(built)), slices.Sorted(maps.Keys(images)); !slices.Equal(got, want) {
		t.Errorf("compose.yaml builds %v; TestImagesBuild checks %v", got, want)
	}
	if stale, _ := filepath.Glob(filepath.Join(root, "services", "*", "Dockerfile")); len(stale) > 0 {
		t.Errorf("%v: every image builds from the Dockerfile at the repository root", stale)
	}
}

// dockerfilePath is the Dockerfile s builds from, as compose-go resolves it: relative to
// the build context, Dockerfile when unnamed.
func dockerfilePath(s types.ServiceConfig) string {
	if filepath.IsAbs(s.Build.Dockerfile) {
		return s.Build.Dockerfile
	}
	return filepath.Join(s.Build.Context, s.Build.Dockerfile)
}

func buildArgs(s types.ServiceConfig) map[string]string {
	args := map[string]string{}
	for k, v := range s.Build.Args {
		if v != nil {
			args[k] = *v
		}
	}
	return args
}

func serviceArg(s types.ServiceConfig) string { return buildArgs(s)["SERVICE"] }

func uniqueFrom(copies []*instructions.CopyCommand) []string {
	var out []string
	for _, c := range copies {
		if !slices.Contains(out, c.From) {
			out = append(out, c.From)
		}
	}
	return out
}

// imageOf lays out under a directory of its own, standing for the image's root, what the
// COPY --from steps take from the replayed build stages, as docker build copies: a
// directory's contents into the destination, a file to it (into it when it ends in /),
// symbolic links as links.
func imageOf(t *testing.T, r *replay, copies []*instructions.CopyCommand) string {
	t.Helper()
	img := t.TempDir()
	for _, cp := range copies {
		for _, src := range cp.SourcePaths {
			from := r.host(src)
			fi, err := os.Lstat(from)
			if err != nil {
				t.Fatalf("COPY --from=%s %s: the build stage did not make it: %v", cp.From, src, err)
			}
			dest := cp.DestPath
			if !fi.IsDir() && strings.HasSuffix(dest, "/") {
				dest = path.Join(dest, path.Base(src))
			}
			if err := copyTree(from, filepath.Join(img, filepath.FromSlash(dest)), func(string) bool { return false }, false); err != nil {
				t.Fatalf("COPY --from=%s %s %s: %v", cp.From, src, cp.DestPath, err)
			}
		}
	}
	return img
}

// resolve follows the symbolic links at p in the image whose root is img.
func resolve(img, p string) (string, error) {
	for range 40 {
		host := filepath.Join(img, filepath.FromSlash(p))
		fi, err := os.Lstat(host)
		if err != nil {
			return "", fmt.Errorf("not in the image: %w", err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		link, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if !path.IsAbs(link) {
			link = path.Join(path.Dir(p), link)
		}
		p = link
	}
	return "", fmt.Errorf("%s: too many symbolic links", p)
}

// The binary at bin is the service's own main package, so SERVICE reached the build.
func assertMain(t *testing.T, bin, pkg string) {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Errorf("%s: %v", filepath.Base(bin), err)
		return
	}
	if info.Path != pkg {
		t.Errorf("/usr/local/bin/%s is built from %s, want %s", filepath.Base(bin), info.Path, pkg)
	}
}

// imageUser is the last USER of target's steps: whom its processes run as.
func imageUser(t *testing.T, df *dockerfile, target string) string {
	t.Helper()
	var user string
	for _, c := range df.imageCommands(t, target) {
		if u, ok := c.(*instructions.UserCommand); ok {
			user = u.User
		}
	}
	return user
}

// A named volume starts as a copy of what the image has at its mount point, so each one
// compose.yaml mounts on s must be a directory the image gives its user; else the volume
// is root's and the service cannot write to it.
func assertVolumesOwned(t *testing.T, s types.ServiceConfig, df *dockerfile, img, user string) {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeVolume {
			continue
		}
		owned := slices.ContainsFunc(df.copiesFrom(t, s.Build.Target), func(cp *instructions.CopyCommand) bool {
			return path.Clean(cp.DestPath) == v.Target && cp.Chown == user
		})
		fi, err := os.Stat(filepath.Join(img, filepath.FromSlash(v.Target)))
		if !owned || err != nil || !fi.IsDir() {
			t.Errorf("%s: volume %s at %s: the image has no directory there owned by %s (%v)", s.Name, v.Source, v.Target, user, err)
		}
	}
}

// The services' runtime image is distroless/static: a binary that needs a dynamic loader
// or libc does not start there (the renderer's, on Debian, is held to the same).
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

// entrypoint is the init the image's ENTRYPOINT starts with ("" when none; Debian's tini,
// installed with apt-get, so not in the replayed image) and the program it runs.
func entrypoint(t *testing.T, df *dockerfile, target string) (reaper, prog string) {
	t.Helper()
	var argv []string
	for _, c := range df.imageCommands(t, target) {
		if e, ok := c.(*instructions.EntrypointCommand); ok && len(e.CmdLine) > 0 {
			argv = e.CmdLine
		}
	}
	if len(argv) > 0 && argv[0] == "/usr/bin/tini" {
		if i := slices.Index(argv, "--"); i > 0 && i+1 < len(argv) {
			return argv[0], argv[i+1]
		}
		t.Fatalf("ENTRYPOINT %v: tini without `-- program`", argv)
	}
	if len(argv) == 0 {
		return "", ""
	}
	return "", argv[0]
}

// The builder image's Go must be new enough for the module: the image has
// GOTOOLCHAIN=local, so a go directive past it fails the build there, not here, where the
// host's go may be newer.
func assertGoImageCovers(t *testing.T, df *dockerfile, r *replay, target string) {
	t.Helper()
	var builder string
	for _, s := range df.stages {
		if s.Name != "" && slices.Contains(uniqueFrom(df.copiesFrom(t, target)), s.Name) {
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
// Other build arguments (SERVICE) are declared in a stage and are no image. The settings
// are documented in docs/configuration.md and .env.example.
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
			if s.Build.Dockerfile == "" {
				s.Build.Dockerfile = "Dockerfile" // Compose's default, in the context (the root)
			}
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
				if _, ok := args[arg]; !ok && !df.stageArg(arg) {
					t.Errorf("%s: build arg %s is declared nowhere in %s", name, arg, s.Build.Dockerfile)
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
				if !slices.Contains(want, "TRAWL_"+arg) {
					continue // not an image: SERVICE
				}
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
