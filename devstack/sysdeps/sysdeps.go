// Package sysdeps makes sure the system programs Trawl's local stack and tests run are
// installed: redis-server for every integration test and `make run`, chromium for the status
// page's browser test, nginx and documentation packages for the crawl of real pages, a
// Docker engine and docker-compose for the compose test. On a fresh Debian machine `make test` and `make run` must work alone,
// so a missing program is installed with apt-get when this process may do so (root, apt-get
// on PATH); otherwise the error names the package to install.
package sysdeps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// ErrNotInstalled reports a program that is missing and could not be installed here.
var ErrNotInstalled = errors.New("not installed")

// Program is a binary, or a file, and the Debian package that provides it.
type Program struct {
	Binary  string
	Package string
	// File, when set, is a path the package installs: it counts as installed when the file
	// exists even if Binary is not on PATH (nginx lives in /usr/sbin, which a user's PATH
	// often lacks), and it is the only check for a package with no program (documentation).
	File string
}

// Installed reports whether the program is there, and where.
func (p Program) Installed() (string, bool) {
	if p.Binary != "" {
		if path, err := exec.LookPath(p.Binary); err == nil {
			return path, true
		}
	}
	if p.File != "" {
		if _, err := os.Stat(p.File); err == nil {
			return p.File, true
		}
	}
	return "", false
}

func (p Program) name() string {
	if p.Binary != "" {
		return p.Binary
	}
	return p.File
}

// Known are the programs the project needs, by binary name.
var Known = map[string]Program{
	"redis-server": {Binary: "redis-server", Package: "redis-server"},
	"chromium":     {Binary: "chromium", Package: "chromium"},
	"node":         {Binary: "node", Package: "nodejs"},
	"npm":          {Binary: "npm", Package: "npm"},
	"nginx":        {Binary: "nginx", Package: "nginx", File: "/usr/sbin/nginx"},
	// make test's check of compose.yaml's setting precedence runs `docker compose config`:
	// the CLI only, no engine.
	"docker": {Binary: "docker", Package: "docker.io"},
	// The compose test: a Docker engine (and its CLI), docker-compose 1.29, and debootstrap
	// for the stand-in base images where no registry answers.
	"dockerd":        {Binary: "dockerd", Package: "docker.io", File: "/usr/sbin/dockerd"},
	"docker-compose": {Binary: "docker-compose", Package: "docker-compose"},
	"debootstrap":    {Binary: "debootstrap", Package: "debootstrap", File: "/usr/sbin/debootstrap"},
	// The Kubernetes test's node (devstack/k8scluster): its container runtime, the pods'
	// network and kube-proxy's rules.
	"containerd": {Binary: "containerd", Package: "containerd"},
	"runc":       {Binary: "runc", Package: "runc", File: "/usr/sbin/runc"},
	"cni":        {File: "/usr/lib/cni/bridge", Package: "containernetworking-plugins"},
	"iptables":   {Binary: "iptables", Package: "iptables", File: "/usr/sbin/iptables"},
}

// Lookup returns the known program for a binary name.
func Lookup(binary string) (Program, error) {
	p, ok := Known[binary]
	if !ok {
		names := make([]string, 0, len(Known))
		for n := range Known {
			names = append(names, n)
		}
		slices.Sort(names)
		return Program{}, fmt.Errorf("sysdeps: unknown program %q (known: %s)", binary, strings.Join(names, ", "))
	}
	return p, nil
}

// Ensure makes sure every program is on PATH, installing the missing ones with one apt-get
// call when this process may, and writes the installer's output to w. It returns the first
// error, which names the packages to install when it cannot install them itself.
func Ensure(ctx context.Context, w io.Writer, progs ...Program) error {
	var missing []string
	for _, p := range progs {
		if _, ok := p.Installed(); !ok && !slices.Contains(missing, p.Package) {
			missing = append(missing, p.Package)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if w == nil {
		w = io.Discard
	}
	hint := "apt-get install -y " + strings.Join(missing, " ")
	aptGet, err := exec.LookPath("apt-get")
	if err != nil || os.Geteuid() != 0 {
		return fmt.Errorf("sysdeps: %s %w: install with `%s` (needs root and apt-get; on other systems install the same packages): %w",
			strings.Join(missing, ", "), ErrNotInstalled, hint, errors.Join(err, errNotRoot()))
	}
	install := func() error {
		return runApt(ctx, w, aptGet, append([]string{"install", "-y"}, missing...)...)
	}
	if err := install(); err != nil {
		// A fresh machine often has no package lists yet.
		if uerr := runApt(ctx, w, aptGet, "update"); uerr != nil {
			return fmt.Errorf("sysdeps: apt-get update: %w (install failed first: %w)", uerr, err)
		}
		if err := install(); err != nil {
			return fmt.Errorf("sysdeps: %s: %w", hint, err)
		}
	}
	for _, p := range progs {
		if _, ok := p.Installed(); !ok {
			return fmt.Errorf("sysdeps: %s still missing after installing %s", p.name(), p.Package)
		}
	}
	return nil
}

func errNotRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("not running as root")
	}
	return nil
}

func runApt(ctx context.Context, w io.Writer, aptGet string, args ...string) error {
	cmd := exec.CommandContext(ctx, aptGet, args...)
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", aptGet, strings.Join(args, " "), err)
	}
	return nil
}
