// Package weedproc runs SeaweedFS (`weed mini`: master, volume, filer and S3 gateway in one
// process) as the S3-compatible object store of the object storage tests, a real server
// that the tests can kill and start again. Its binary is built from the SeaweedFS Go module
// at Version (from the Go module proxy, like every dependency) once, and cached.
package weedproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/trawl/trawl/devstack/freeport"
)

// Module and Version are the SeaweedFS build used.
const (
	Module  = "github.com/seaweedfs/seaweedfs"
	Version = "v0.0.0-20261109003541-7506e5f91cd6"
)

// CacheDir holds the built binary: the user's cache directory.
func CacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("weedproc: %w", err)
	}
	return filepath.Join(d, "trawl"), nil
}

var buildMu sync.Mutex

// Binary returns the path of the weed binary, building it when it is not cached (a few
// minutes on two cores; the build's output goes to log).
func Binary(ctx context.Context, log *os.File) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "weed-"+Version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("weedproc: %w", err)
	}
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", Module+"@"+Version).Output()
	if err != nil {
		return "", fmt.Errorf("weedproc: go mod download %s@%s: %w", Module, Version, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("weedproc: go mod download %s: no directory in %s (%v)", Module, out, err)
	}
	// The module's go.mod has replace directives, so it builds only as the main module:
	// from a writable copy of its source (the module cache is read-only), at a fixed path
	// and with -trimpath so that a build begun again reuses the build cache.
	src := filepath.Join(dir, "weed-src-"+Version)
	if err := os.RemoveAll(src); err != nil {
		return "", fmt.Errorf("weedproc: %w", err)
	}
	defer os.RemoveAll(src)
	for _, args := range [][]string{{"cp", "-r", m.Dir, src}, {"chmod", "-R", "u+w", src}} {
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("weedproc: %v: %w: %s", args, err, out)
		}
	}
	tmp := bin + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", tmp, "./weed")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("weedproc: build weed: %w", err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("weedproc: %w", err)
	}
	return bin, nil
}

// Server is one `weed mini` process; Kill and Start stop and start it again on the same
// ports and data directory.
type Server struct {
	bin, dir string
	args     []string
	env      []string
	port     int
	cmd      *exec.Cmd
	done     chan struct{}
	logFile  *os.File
}

// Options describe the server.
type Options struct {
	Dir       string // data directory
	AccessKey string // an admin identity's credentials
	SecretKey string
	Bucket    string // created at start
}

// New prepares a server on free loopback ports; Start starts it.
func New(bin string, o Options) (*Server, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("weedproc: %w", err)
	}
	ports, err := freeport.Ports(8)
	if err != nil {
		return nil, err
	}
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	s := &Server{bin: bin, dir: o.Dir, port: ports[0]}
	s.args = []string{"mini", "-dir=" + o.Dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-s3.port=" + p(0), "-s3.port.grpc=" + p(1), "-master.port=" + p(2), "-master.port.grpc=" + p(3),
		"-filer.port=" + p(4), "-filer.port.grpc=" + p(5), "-volume.port=" + p(6), "-volume.port.grpc=" + p(7),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false", "-admin.port.legacy=0",
		"-bucket=" + o.Bucket}
	s.env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+o.AccessKey, "AWS_SECRET_ACCESS_KEY="+o.SecretKey)
	return s, nil
}

// Endpoint is the S3 gateway's host:port.
func (s *Server) Endpoint() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the process and waits until the S3 gateway answers HTTP and ready (for
// instance, the bucket is listable) returns nil, or ctx ends.
func (s *Server) Start(ctx context.Context, ready func(context.Context) error) error {
	if s.logFile == nil {
		f, err := os.Create(filepath.Join(s.dir, "..", filepath.Base(s.dir)+".log"))
		if err != nil {
			return fmt.Errorf("weedproc: %w", err)
		}
		s.logFile = f
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = s.logFile, s.logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("weedproc: start: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	var last error
	for {
		resp, err := http.Get("http://" + s.Endpoint() + "/")
		if err == nil {
			resp.Body.Close()
			if last = ready(ctx); last == nil {
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-s.done:
			return fmt.Errorf("weedproc: weed mini exited while starting (log %s): %w", s.logFile.Name(), last)
		case <-ctx.Done():
			return fmt.Errorf("weedproc: weed mini not ready (log %s): %w (last: %v)", s.logFile.Name(), ctx.Err(), last)
		case <-time.After(200 * time.Millisecond): // polling the gateway, which has no readiness signal
		}
	}
}

// Kill ends the process at once (SIGKILL to its group) and waits for it.
func (s *Server) Kill() error {
	if s.cmd == nil {
		return errors.New("weedproc: not started")
	}
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("weedproc: kill: %w", err)
	}
	<-s.done
	s.cmd = nil
	return nil
}

// Close kills the process if it runs and closes its log.
func (s *Server) Close() {
	if s.cmd != nil {
		_ = s.Kill()
	}
	if s.logFile != nil {
		_ = s.logFile.Close()
	}
}

// LogPath is the file the process writes to.
func (s *Server) LogPath() string {
	if s.logFile == nil {
		return ""
	}
	return s.logFile.Name()
}
