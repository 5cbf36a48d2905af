package dockerhost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The Compose v2 release built as a Docker CLI plugin when the CLI has none (Debian's
// docker.io does not package it); its module builds with this repository's Go.
const (
	composeV2Module  = "github.com/docker/compose/v2"
	composeV2Version = "v2.40.3"
)

// EnsureComposeV2 returns the version of `docker compose`, building Compose v2 from its Go
// module into the CLI's plugin directory when the CLI has no compose plugin.
func EnsureComposeV2(ctx context.Context, w io.Writer) (string, error) {
	if v, err := Output(ctx, nil, "docker", "compose", "version", "--short"); err == nil {
		return strings.TrimSpace(v), nil
	}
	dir, err := pluginDir()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(w, "dockerhost: the Docker CLI has no compose plugin; building %s@%s into %s\n", composeV2Module, composeV2Version, dir)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	out, err := Output(ctx, env, "go", "mod", "download", "-json", composeV2Module+"@"+composeV2Version)
	if err != nil {
		return "", fmt.Errorf("dockerhost: download Compose v2: %w", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("dockerhost: go mod download -json %s: no directory in %q: %v", composeV2Module, out, err)
	}
	// The module cache is read-only and -mod=mod may complete go.sum: build in a copy.
	src, err := os.MkdirTemp("", "compose-v2-src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := Run(ctx, w, "", nil, "cp", "-r", mod.Dir+"/.", src); err != nil {
		return "", err
	}
	if err := Run(ctx, w, "", nil, "chmod", "-R", "u+w", src); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := Run(ctx, w, src, env, "go", "build", "-trimpath",
		"-ldflags", "-X "+composeV2Module+"/internal.Version="+composeV2Version, "-o", filepath.Join(dir, "docker-compose"), "./cmd"); err != nil {
		return "", fmt.Errorf("dockerhost: build Compose v2: %w", err)
	}
	v, err := Output(ctx, nil, "docker", "compose", "version", "--short")
	if err != nil {
		return "", fmt.Errorf("dockerhost: Compose v2 built into %s but `docker compose` does not run: %w", dir, err)
	}
	return strings.TrimSpace(v), nil
}

func pluginDir() (string, error) {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "cli-plugins"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("dockerhost: no home directory for the Docker CLI's plugins: %w", err)
	}
	return filepath.Join(home, ".docker", "cli-plugins"), nil
}

// Compose1Version returns the version of docker-compose (1.x), or says how to install it.
func Compose1Version(ctx context.Context) (string, error) {
	if _, err := exec.LookPath("docker-compose"); err != nil {
		return "", fmt.Errorf("dockerhost: docker-compose %w (Debian package docker-compose): %w", errNotInstalled, err)
	}
	v, err := Output(ctx, nil, "docker-compose", "version", "--short")
	if err != nil {
		return "", fmt.Errorf("dockerhost: docker-compose: %w", err)
	}
	return strings.TrimSpace(v), nil
}
