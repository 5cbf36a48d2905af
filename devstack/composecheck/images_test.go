package composecheck

import (
	"debug/elf"
	"go/version"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
)

// The images compose.yaml builds, one per service.
var images = []string{"scheduler", "fetcher", "parser", "dedup", "archiver"}

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
func TestImagesAreComposes(t *testing.T) {
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
