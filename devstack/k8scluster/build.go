// Package k8scluster builds and runs a single-node Kubernetes cluster for the chart's
// end-to-end test (`make k8s-test`): etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kube-proxy built from their Go modules once and cached in the
// user's cache directory by version, with Debian's containerd, runc and CNI plugins. No
// registry is needed: the pause image is built here too, and every image the pods run is
// imported into containerd's k8s.io namespace.
package k8scluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The versions built. Kubernetes' own module (k8s.io/kubernetes) builds only with its
// staging modules, which its go.mod replaces with ./staging/...: the build here replaces
// them with the published k8s.io/* modules of StagingVersion instead.
const (
	KubernetesVersion = "v1.34.4"
	StagingVersion    = "v0.34.4"
	EtcdVersion       = "v3.6.16"
)

// recipe names the way the binaries are built: changed, they are built again.
const recipe = "2"

// Commands are the Kubernetes binaries built, each from k8s.io/kubernetes/cmd/<name>.
var Commands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"}

// PauseImage is the sandbox image the kubelet's pods start from, built here (FROM scratch,
// a static Go binary) under the name containerd asks for.
const PauseImage = "registry.k8s.io/pause:3.10"

// Bin is where the built binaries are.
type Bin struct {
	Dir   string // the Kubernetes binaries (Commands) and etcd
	Pause string // a static pause binary, for PauseImage
}

// Path returns the path of the binary name.
func (b Bin) Path(name string) string { return filepath.Join(b.Dir, name) }

// CacheDir is <user cache>/trawl/k8s.
func CacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("k8scluster: no cache directory: %w", err)
	}
	return filepath.Join(d, "trawl", "k8s"), nil
}

var buildMu sync.Mutex

// Build returns the binaries, building those not cached yet, one `go build` at a time
// (cold: about seven minutes on two cores for Kubernetes, half a minute for etcd; the
// module proxy must answer then). Progress and the builds' output go to log.
func Build(ctx context.Context, log io.Writer) (Bin, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	cache, err := CacheDir()
	if err != nil {
		return Bin{}, err
	}
	b := Bin{
		Dir:   filepath.Join(cache, "bin-"+KubernetesVersion+"-etcd-"+EtcdVersion+"-"+recipe),
		Pause: filepath.Join(cache, "pause", "pause"),
	}
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return Bin{}, fmt.Errorf("k8scluster: %w", err)
	}
	var missing []string
	for _, c := range Commands {
		if !exists(b.Path(c)) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		if err := buildKubernetes(ctx, log, filepath.Join(cache, "src-"+KubernetesVersion), b.Dir, missing); err != nil {
			return Bin{}, err
		}
	}
	if !exists(b.Path("etcd")) {
		if err := buildSmall(ctx, log, filepath.Join(cache, "etcd-"+EtcdVersion), b.Path("etcd"), "trawl.local/etcd",
			"go.etcd.io/etcd/server/v3 "+EtcdVersion, etcdMain); err != nil {
			return Bin{}, err
		}
	}
	if !exists(b.Pause) {
		if err := buildSmall(ctx, log, filepath.Dir(b.Pause), b.Pause, "trawl.local/pause", "", pauseMain); err != nil {
			return Bin{}, err
		}
	}
	return b, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// buildKubernetes builds cmds from a module of its own that requires k8s.io/kubernetes and
// replaces its staging modules by their published versions.
func buildKubernetes(ctx context.Context, log io.Writer, src, out string, cmds []string) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("k8scluster: %w", err)
	}
	if !exists(filepath.Join(src, "go.mod")) {
		mod, err := kubernetesGoMod(ctx)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(mod), 0o644); err != nil {
			return fmt.Errorf("k8scluster: %w", err)
		}
	}
	var imports strings.Builder
	for _, c := range Commands {
		fmt.Fprintf(&imports, "\t_ \"k8s.io/kubernetes/cmd/%s\"\n", c)
	}
	tools := "//go:build tools\n\npackage k8sbuild\n\nimport (\n" + imports.String() + ")\n"
	if err := os.WriteFile(filepath.Join(src, "tools.go"), []byte(tools), 0o644); err != nil {
		return fmt.Errorf("k8scluster: %w", err)
	}
	pkgs := make([]string, len(cmds))
	for i, c := range cmds {
		pkgs[i] = "k8s.io/kubernetes/cmd/" + c
	}
	start := time.Now()
	fmt.Fprintf(log, "k8scluster: building %s of Kubernetes %s into %s (once; minutes)\n", strings.Join(cmds, ", "), KubernetesVersion, out)
	// The version Kubernetes' own build stamps: the node, `kubectl version` and Helm's
	// .Capabilities.KubeVersion report it (a chart's kubeVersion constraint is checked
	// against it).
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	v := "k8s.io/component-base/version."
	ldflags := "-ldflags=-X " + v + "gitVersion=" + KubernetesVersion + " -X " + v + "gitMajor=" + major +
		" -X " + v + "gitMinor=" + minor + " -X " + v + "gitTreeState=clean"
	if err := goBuild(ctx, log, src, out+string(filepath.Separator), append([]string{ldflags}, pkgs...)...); err != nil {
		return fmt.Errorf("k8scluster: build Kubernetes %s: %w", KubernetesVersion, err)
	}
	fmt.Fprintf(log, "k8scluster: built Kubernetes in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// kubernetesGoMod is the build module's go.mod: k8s.io/kubernetes required, each of its
// staging replacements (k8s.io/x => ./staging/src/k8s.io/x) turned into k8s.io/x at
// StagingVersion.
func kubernetesGoMod(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", "k8s.io/kubernetes@"+KubernetesVersion).Output()
	if err != nil {
		return "", fmt.Errorf("k8scluster: go mod download k8s.io/kubernetes@%s: %w", KubernetesVersion, err)
	}
	var m struct{ GoMod string }
	if err := json.Unmarshal(out, &m); err != nil || m.GoMod == "" {
		return "", fmt.Errorf("k8scluster: go mod download k8s.io/kubernetes: no go.mod in %s (%v)", out, err)
	}
	gomod, err := os.ReadFile(m.GoMod)
	if err != nil {
		return "", fmt.Errorf("k8scluster: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "module trawl.local/k8sbuild\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n", KubernetesVersion)
	n := 0
	for _, line := range strings.Split(string(gomod), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == "=>" && strings.HasPrefix(f[2], "./staging/") {
			fmt.Fprintf(&b, "\t%s => %s %s\n", f[0], f[0], StagingVersion)
			n++
		}
	}
	if n == 0 {
		return "", errors.New("k8scluster: k8s.io/kubernetes's go.mod replaces no staging module: its layout changed")
	}
	b.WriteString(")\n")
	return b.String(), nil
}

const etcdMain = `package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
`

// pauseMain holds a pod's namespaces until it is told to stop, and reaps the children that
// containers sharing its PID namespace leave behind.
const pauseMain = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var st syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
`

// buildSmall builds a one-file main package in a module of its own at dir.
func buildSmall(ctx context.Context, log io.Writer, dir, out, module, require, main string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("k8scluster: %w", err)
	}
	mod := "module " + module + "\n\ngo 1.24\n"
	if require != "" {
		mod += "\nrequire " + require + "\n"
	}
	for name, text := range map[string]string{"go.mod": mod, "main.go": main} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("k8scluster: %w", err)
		}
	}
	fmt.Fprintf(log, "k8scluster: building %s (once)\n", out)
	if err := goBuild(ctx, log, dir, out, "."); err != nil {
		return fmt.Errorf("k8scluster: build %s: %w", module, err)
	}
	return nil
}

// goBuild builds pkgs in the module at dir, static (the pause binary runs in an empty
// image), resolving what go.mod lacks from the module proxy.
func goBuild(ctx context.Context, log io.Writer, dir, out string, pkgs ...string) error {
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", out}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("go build %s in %s: %w (its output is above)", strings.Join(pkgs, " "), dir, err)
		}
		return err
	}
	return nil
}
