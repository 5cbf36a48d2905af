package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trawl/trawl/devstack/scrape"
)

// Proc is one service process. It can be killed (SIGKILL, for crash tests), stopped
// gracefully (SIGTERM) and started again with the same environment.
type Proc struct {
	Name     string // service name, e.g. "fetcher"
	Index    int    // replica number
	HTTPAddr string // its /metrics and /healthz address

	bin    string
	args   []string
	env    []string
	logOut io.Writer

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	killed bool // stopped on purpose by Kill or Stop since the last Start
}

// httpAddrEnv is the setting a service listens for /metrics and /healthz on.
const httpAddrEnv = "TRAWL_HTTP_ADDR"

// setHTTPAddr moves p's HTTP listener to addr from its next start on.
func (p *Proc) setHTTPAddr(addr string) {
	p.HTTPAddr = addr
	for i, kv := range p.env {
		if strings.HasPrefix(kv, httpAddrEnv+"=") {
			p.env[i] = httpAddrEnv + "=" + addr
		}
	}
}

// ID is "name-index", the process's name in logs.
func (p *Proc) ID() string { return fmt.Sprintf("%s-%d", p.Name, p.Index) }

// Start starts the process; it fails if it is already running.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("stack: %s already running", p.ID())
		}
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout = p.logOut
	cmd.Stderr = p.logOut
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("stack: start %s: %w", p.ID(), err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err, p.killed = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// PID is the process id of the last start, or 0 if it never started.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exited returns the exit error of a process that has exited (nil for a clean exit).
func (p *Proc) Exited() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false, nil
	}
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() error { return p.signal(syscall.SIGKILL, 10*time.Second) }

// Stop sends SIGTERM and waits up to timeout for a graceful exit, then SIGKILLs.
func (p *Proc) Stop(timeout time.Duration) error {
	err := p.signal(syscall.SIGTERM, timeout)
	if errors.Is(err, errTimeout) {
		_ = p.Kill()
		return fmt.Errorf("stack: %s did not exit within %s of SIGTERM", p.ID(), timeout)
	}
	return err
}

var errTimeout = errors.New("timeout")

// Stopped reports whether the process was stopped on purpose (Kill or Stop) since it was
// last started, so a crash can be told from a test's own fault injection.
func (p *Proc) Stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

func (p *Proc) signal(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.killed = true
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return errTimeout
	}
}

// Wait blocks until the process exits or ctx ends.
func (p *Proc) Wait(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// prefixWriter prefixes each line with a process id, for interleaved logs.
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (pw *prefixWriter) Write(b []byte) (int, error) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.buf = append(pw.buf, b...)
	for {
		i := strings.IndexByte(string(pw.buf), '\n')
		if i < 0 {
			break
		}
		if _, err := fmt.Fprintf(pw.w, "%s %s\n", pw.prefix, pw.buf[:i]); err != nil {
			return len(b), err
		}
		pw.buf = pw.buf[i+1:]
	}
	return len(b), nil
}

func openLog(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// Metric reads a metric from the process's /metrics, e.g. "trawl_fetcher_inflight": its
// sample, or the sum of its series' when it has labels (every shard's, every result's).
// ok is false when the process does not export it.
func (p *Proc) Metric(ctx context.Context, name string) (value float64, ok bool, err error) {
	value, ok, err = scrape.Read(ctx, p.HTTPAddr, name)
	if err != nil {
		return 0, false, fmt.Errorf("stack: %s: %w", p.ID(), err)
	}
	return value, ok, nil
}
