// Package helmcheck gives the tests of the Helm chart (deploy/helm/trawl) a helm binary,
// built once from helm's Go module into the user's cache directory, as Compose v2 is built
// when the Docker CLI lacks it (devstack/dockerhost).
package helmcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/trawl/trawl/devstack/dockerhost"
)

// The helm release built; its module builds with this repository's Go.
const (
	helmModule  = "helm.sh/helm/v3"
	HelmVersion = "v3.22.0"
)

// Ensure returns the path of a helm binary of HelmVersion, building it into
// <user cache>/trawl/helm/<version>/helm on the first call on a machine (a few minutes on
// two cores; the module proxy must be reachable then).
func Ensure(ctx context.Context, w io.Writer) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("helmcheck: no cache directory for helm: %w", err)
	}
	dir := filepath.Join(cache, "trawl", "helm", HelmVersion)
	bin := filepath.Join(dir, "helm")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("helmcheck: %w", err)
	}
	fmt.Fprintf(w, "helmcheck: building %s@%s into %s (once)\n", helmModule, HelmVersion, dir)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	out, err := dockerhost.Output(ctx, env, "go", "mod", "download", "-json", helmModule+"@"+HelmVersion)
	if err != nil {
		return "", fmt.Errorf("helmcheck: download helm: %w", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("helmcheck: go mod download -json %s: no directory in %q: %v", helmModule, out, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("helmcheck: %w", err)
	}
	// Built beside its final name and renamed, so that a build cut short (or two at once)
	// never leaves a partial binary where the next call would take it.
	tmp, err := os.CreateTemp(dir, "helm-build-")
	if err != nil {
		return "", fmt.Errorf("helmcheck: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	// helm's go.sum is complete: it builds in the read-only module cache as it is.
	if err := dockerhost.Run(ctx, w, mod.Dir, env, "go", "build", "-trimpath",
		"-ldflags", "-X "+helmModule+"/internal/version.version="+HelmVersion,
		"-o", tmp.Name(), "./cmd/helm"); err != nil {
		return "", fmt.Errorf("helmcheck: build helm: %w", err)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("helmcheck: %w", err)
	}
	return bin, nil
}
