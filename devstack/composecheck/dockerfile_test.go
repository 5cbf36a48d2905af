package composecheck

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// dockerfile is a Dockerfile read with BuildKit's own parser, so the replay sees the steps
// exactly as `docker build` does.
type dockerfile struct {
	path     string
	stages   []instructions.Stage
	metaArgs []instructions.ArgCommand
	lex      *shell.Lex
}

func readDockerfile(t *testing.T, file string) *dockerfile {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(stages) == 0 {
		t.Fatalf("%s: no FROM", file)
	}
	return &dockerfile{path: file, stages: stages, metaArgs: metaArgs, lex: shell.NewLex(res.EscapeToken)}
}

// argDefaults are the build arguments declared before the first FROM, at their defaults.
func (d *dockerfile) argDefaults() map[string]*string {
	args := map[string]*string{}
	for _, a := range d.metaArgs {
		for _, kv := range a.Args {
			args[kv.Key] = kv.Value
		}
	}
	return args
}

// baseImage is stage s's FROM with the build arguments at their defaults.
func (d *dockerfile) baseImage(t *testing.T, s instructions.Stage) string {
	t.Helper()
	var env []string
	for k, v := range d.argDefaults() {
		if v != nil {
			env = append(env, k+"="+*v)
		}
	}
	name, _, err := d.lex.ProcessWord(s.BaseName, shell.EnvsFromSlice(env))
	if err != nil {
		t.Fatalf("%s: FROM %s: %v", d.path, s.BaseName, err)
	}
	return name
}

func (d *dockerfile) stage(t *testing.T, name string) instructions.Stage {
	t.Helper()
	for _, s := range d.stages {
		if strings.EqualFold(s.Name, name) {
			return s
		}
	}
	t.Fatalf("%s: no stage %q", d.path, name)
	return instructions.Stage{}
}

// isStage says whether a FROM names one of the file's stages rather than an image.
func (d *dockerfile) isStage(base string) bool {
	return slices.ContainsFunc(d.stages, func(s instructions.Stage) bool {
		return s.Name != "" && strings.EqualFold(s.Name, base)
	})
}

// target is the stage an image of target is made of: the named one, or the last one when
// target is empty, as `docker build` without --target.
func (d *dockerfile) target(t *testing.T, target string) instructions.Stage {
	t.Helper()
	if target == "" {
		return d.stages[len(d.stages)-1]
	}
	return d.stage(t, target)
}

// imageCommands are the steps an image of target is made by: its stage's and, where a
// FROM names an earlier stage, that stage's before them.
func (d *dockerfile) imageCommands(t *testing.T, target string) []instructions.Command {
	t.Helper()
	s := d.target(t, target)
	cmds := s.Commands
	for range d.stages {
		if !d.isStage(s.BaseName) {
			return cmds
		}
		s = d.stage(t, s.BaseName)
		cmds = append(slices.Clone(s.Commands), cmds...)
	}
	t.Fatalf("%s: stage %q descends from itself", d.path, target)
	return nil
}

// stageArg says whether a stage declares the build argument arg.
func (d *dockerfile) stageArg(arg string) bool {
	for _, s := range d.stages {
		for _, c := range s.Commands {
			if a, ok := c.(*instructions.ArgCommand); ok && slices.ContainsFunc(a.Args, func(kv instructions.KeyValuePairOptional) bool { return kv.Key == arg }) {
				return true
			}
		}
	}
	return false
}

// copiesFrom lists target's COPY --from steps: what the image takes from the build
// stages.
func (d *dockerfile) copiesFrom(t *testing.T, target string) []*instructions.CopyCommand {
	t.Helper()
	var out []*instructions.CopyCommand
	for _, c := range d.imageCommands(t, target) {
		if cp, ok := c.(*instructions.CopyCommand); ok && cp.From != "" {
			out = append(out, cp)
		}
	}
	return out
}

// buildContext is the directory `docker build` sends, less what .dockerignore excludes.
type buildContext struct {
	dir    string
	ignore *patternmatcher.PatternMatcher
}

func readBuildContext(t *testing.T, dir string) buildContext {
	t.Helper()
	var patterns []string
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	switch {
	case err == nil:
		defer f.Close()
		if patterns, err = ignorefile.ReadAll(f); err != nil {
			t.Fatalf(".dockerignore: %v", err)
		}
	case !os.IsNotExist(err):
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	return buildContext{dir: dir, ignore: pm}
}

func (c buildContext) excluded(t *testing.T, rel string) bool {
	t.Helper()
	ex, err := c.ignore.MatchesOrParentMatches(filepath.ToSlash(filepath.Clean(rel)))
	if err != nil {
		t.Fatalf(".dockerignore against %s: %v", rel, err)
	}
	return ex
}

// replay runs one build stage of a Dockerfile on this host: root stands for the
// container's file system, the stage's COPY steps copy from the build context into it, and
// its RUN steps run with this host's go. RUN steps are `cd`, `go`, `mkdir -p` and `ln -s`
// commands joined by &&; anything else fails the test naming the step, so a Dockerfile that grows
// past that is noticed rather than half replayed.
type replay struct {
	t       *testing.T
	ctx     context.Context
	df      *dockerfile
	bc      buildContext
	args    map[string]string // the build arguments given, as compose.yaml passes them
	root    string
	workdir string   // in the container
	env     []string // the stage's ENV and ARG values, in order
	base    []string // the environment the RUN steps start from
	goDirs  []string // where go commands ran, in the container
}

func newReplay(t *testing.T, df *dockerfile, bc buildContext, args map[string]string) *replay {
	return &replay{t: t, ctx: t.Context(), df: df, bc: bc, args: args, root: t.TempDir(), workdir: "/", base: goImageEnv(t)}
}

// goImageEnv is this host's environment as the Go builder image has it: none of the
// host's Go settings that change a build (GOFLAGS, GOWORK, GOARCH and the like, from the
// environment or the go env file) and GOTOOLCHAIN=local as the image sets it; only where
// modules come from and where caches live are kept, so downloads work as on this host.
func goImageEnv(t *testing.T) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "GO") && k != "CGO_ENABLED" {
			env = append(env, kv)
		}
	}
	out, err := exec.CommandContext(t.Context(), "go", "env", "-json").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	var host map[string]string
	if err := json.Unmarshal(out, &host); err != nil {
		t.Fatalf("go env: %v", err)
	}
	for _, k := range []string{"GOPATH", "GOMODCACHE", "GOCACHE", "GOPROXY", "GONOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GOINSECURE"} {
		env = append(env, k+"="+host[k])
	}
	return append(env, "GOENV=off", "GOTOOLCHAIN=local")
}

// host maps a path in the container to this host.
func (r *replay) host(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(r.workdir, p)
	}
	return filepath.Join(r.root, filepath.FromSlash(p))
}

func (r *replay) expand(word string) string {
	r.t.Helper()
	s, _, err := r.df.lex.ProcessWord(word, shell.EnvsFromSlice(r.env))
	if err != nil {
		r.t.Fatalf("%s: expanding %q: %v", r.df.path, word, err)
	}
	return s
}

func (r *replay) setenv(k, v string) {
	r.env = slices.DeleteFunc(r.env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	r.env = append(r.env, k+"="+v)
}

func (r *replay) run(s instructions.Stage) {
	r.t.Helper()
	defaults := r.df.argDefaults()
	for _, c := range s.Commands {
		switch c := c.(type) {
		case *instructions.ArgCommand:
			// As docker build: a given build argument wins, then the step's own default,
			// then the one declared before the first FROM; with none the argument is unset.
			for _, kv := range c.Args {
				v, given := r.args[kv.Key]
				switch {
				case given:
					r.setenv(kv.Key, v)
				case kv.Value != nil:
					r.setenv(kv.Key, r.expand(*kv.Value))
				case defaults[kv.Key] != nil:
					r.setenv(kv.Key, *defaults[kv.Key])
				}
			}
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				r.setenv(kv.Key, r.expand(kv.Value))
			}
		case *instructions.WorkdirCommand:
			r.workdir = path.Join(r.workdir, r.expand(c.Path))
			if err := os.MkdirAll(r.host(r.workdir), 0o755); err != nil {
				r.t.Fatal(err)
			}
		case *instructions.CopyCommand:
			r.copy(c)
		case *instructions.RunCommand:
			r.runStep(c)
		default:
			r.t.Fatalf("%s: %s: the replay does not know this step; teach it", r.df.path, c)
		}
	}
}

// copy does a COPY from the build context: each source (a file, a directory whose
// contents are copied, or a glob) into the destination, less what .dockerignore excludes.
func (r *replay) copy(c *instructions.CopyCommand) {
	r.t.Helper()
	if c.From != "" || len(c.SourceContents) > 0 || c.Parents || len(c.ExcludePatterns) > 0 {
		r.t.Fatalf("%s: %s: the replay copies plain sources from the build context only", r.df.path, c)
	}
	dest := r.expand(c.DestPath)
	if !path.IsAbs(dest) {
		dest = path.Join(r.workdir, dest)
	}
	intoDir := strings.HasSuffix(c.DestPath, "/") || len(c.SourcePaths) > 1
	for _, src := range c.SourcePaths {
		src = r.expand(src)
		matches, err := filepath.Glob(filepath.Join(r.bc.dir, filepath.FromSlash(src)))
		if err != nil || len(matches) == 0 {
			r.t.Fatalf("%s: COPY %s: not in the build context (%v)", r.df.path, src, err)
		}
		for _, m := range matches {
			rel, _ := filepath.Rel(r.bc.dir, m)
			if r.bc.excluded(r.t, rel) {
				r.t.Fatalf("%s: COPY %s: .dockerignore excludes %s, so `docker build` never sees it", r.df.path, src, rel)
			}
			fi, err := os.Stat(m)
			if err != nil {
				r.t.Fatal(err)
			}
			to := r.host(dest)
			if intoDir && !fi.IsDir() {
				to = filepath.Join(to, filepath.Base(m))
			}
			err = copyTree(m, to, func(p string) bool {
				rel, _ := filepath.Rel(r.bc.dir, p)
				return r.bc.excluded(r.t, rel)
			}, !r.bc.ignore.Exclusions())
			if err != nil {
				r.t.Fatalf("%s: copying %s: %v", r.df.path, m, err)
			}
		}
	}
}

// copyTree copies the file or directory from to to, symbolic links as links, leaving out
// what skip says (and, with skipDirs, everything under a directory it says).
func copyTree(from, to string, skip func(string) bool, skipDirs bool) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skip(p) {
			if d.IsDir() && skipDirs {
				return filepath.SkipDir
			}
			return nil
		}
		sub, _ := filepath.Rel(from, p)
		target := filepath.Join(to, sub)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		default:
			fi, err := d.Info()
			if err != nil {
				return err
			}
			body, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			return os.WriteFile(target, body, fi.Mode().Perm())
		}
	})
}

func (r *replay) runStep(c *instructions.RunCommand) {
	r.t.Helper()
	if len(c.Files) > 0 || len(c.FlagsUsed) > 0 {
		r.t.Fatalf("%s: %s: the replay runs plain RUN steps only", r.df.path, c)
	}
	words := c.CmdLine
	if c.PrependShell {
		var err error
		if words, err = r.df.lex.ProcessWords(strings.Join(c.CmdLine, " "), shell.EnvsFromSlice(r.env)); err != nil {
			r.t.Fatalf("%s: %s: %v", r.df.path, c, err)
		}
	}
	cwd := r.workdir
	for len(words) > 0 {
		i := slices.Index(words, "&&")
		if i < 0 {
			i = len(words)
		}
		cmd := words[:i]
		words = words[min(i+1, len(words)):]
		switch {
		case len(cmd) == 2 && cmd[0] == "cd":
			cwd = path.Join(cwd, cmd[1])
		case len(cmd) > 2 && cmd[0] == "mkdir" && cmd[1] == "-p":
			for _, d := range cmd[2:] {
				if !path.IsAbs(d) {
					d = path.Join(cwd, d)
				}
				if err := os.MkdirAll(r.host(d), 0o755); err != nil {
					r.t.Fatal(err)
				}
			}
		case len(cmd) > 1 && cmd[0] == "go":
			r.goCommand(cwd, cmd[1:])
		case len(cmd) == 4 && cmd[0] == "ln" && cmd[1] == "-s":
			link := cmd[3]
			if !path.IsAbs(link) {
				link = path.Join(cwd, link)
			}
			if err := os.Symlink(cmd[2], r.host(link)); err != nil {
				r.t.Fatalf("%s: %s: %v", r.df.path, c, err)
			}
		default:
			r.t.Fatalf("%s: %s: the replay runs cd, go, mkdir -p and ln -s joined by &&, not %q; teach it", r.df.path, c, cmd)
		}
	}
}

// goCommand runs go in the container directory cwd, with absolute paths in its
// arguments (-o /out/x) moved under the replay's root.
func (r *replay) goCommand(cwd string, args []string) {
	r.t.Helper()
	args = slices.Clone(args)
	for i, a := range args {
		if strings.HasPrefix(a, "/") {
			args[i] = r.host(a)
		} else if flag, p, ok := strings.Cut(a, "=/"); ok && strings.HasPrefix(flag, "-") {
			args[i] = flag + "=" + r.host("/"+p)
		}
	}
	r.goDirs = append(r.goDirs, cwd)
	cmd := exec.CommandContext(r.ctx, "go", args...)
	cmd.Dir = r.host(cwd)
	cmd.Env = append(slices.Clone(r.base), r.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("%s: in %s: go %s: %v\n%s", r.df.path, cwd, strings.Join(args, " "), err, out)
	}
}
