// Package dockerhost gets a machine ready for the compose test: a Docker engine that
// answers (started here when none does), both Compose implementations the README promises
// (Compose v2 as a Docker CLI plugin, docker-compose 1.29), and, where no container
// registry can be reached, local stand-ins for the base images compose.yaml and the
// Dockerfiles name, built from Debian packages and from Go modules.
package dockerhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// engineStart bounds how long a dockerd started here may take to answer.
const engineStart = 90 * time.Second

// ServerVersion returns the engine's version, or why no engine answers.
func ServerVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := Output(ctx, nil, "docker", "version", "--format", "{{.Server.Version}}")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// EnsureEngine returns once a Docker engine answers. When none does, it starts dockerd
// (as root only; it keeps running after this process, as a system service would) and
// waits for it, its log in logPath.
func EnsureEngine(ctx context.Context, w io.Writer, logPath string) (string, error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return "", fmt.Errorf("dockerhost: no docker CLI on PATH (Debian package docker.io): %w", err)
	}
	v, err := ServerVersion(ctx)
	if err == nil {
		return v, nil
	}
	dockerd, lerr := exec.LookPath("dockerd")
	if lerr != nil {
		return "", fmt.Errorf("dockerhost: no Docker engine answers (%w) and dockerd is not installed (Debian package docker.io): %w", err, lerr)
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("dockerhost: no Docker engine answers (%w); starting dockerd needs root: start it (e.g. `sudo dockerd &` or `systemctl start docker`) and run again", err)
	}
	fmt.Fprintf(w, "dockerhost: no Docker engine answers (%v); starting %s, log in %s\n", err, dockerd, logPath)
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", fmt.Errorf("dockerhost: dockerd log: %w", err)
	}
	defer lf.Close()
	// Descriptors this process inherited stay open across exec (Go marks only its own
	// close-on-exec), and an engine that outlives this process must not hold them: a
	// `flock FILE go test …` lock among them would stay taken for as long as dockerd runs.
	closeInheritedOnExec()
	cmd := exec.Command(dockerd)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Its own session: the engine outlives this process and its terminal, as a service.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("dockerhost: start dockerd: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(engineStart)
	for {
		v, err := ServerVersion(ctx)
		if err == nil {
			fmt.Fprintf(w, "dockerhost: dockerd %s answers (pid %d)\n", v, cmd.Process.Pid)
			return v, nil
		}
		select {
		case werr := <-exited:
			return "", fmt.Errorf("dockerhost: dockerd exited (%v) before answering; see %s", werr, logPath)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("dockerhost: dockerd started but did not answer within %s (last: %w); see %s", engineStart, err, logPath)
		}
	}
}

// Output runs a command and returns its standard output; an error carries the tail of its
// standard error.
func Output(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = env
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	return stdout.String(), nil
}

// Run runs a command with its output to w.
func Run(ctx context.Context, w io.Writer, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	var stderr bytes.Buffer
	cmd.Stdout = w
	cmd.Stderr = io.MultiWriter(w, &stderr)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	return nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

var errNotInstalled = errors.New("not installed")

// closeInheritedOnExec marks every descriptor above stderr close-on-exec.
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
