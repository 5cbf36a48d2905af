package itest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/testwait"
)

// proc is what /proc tells of one process.
type proc struct {
	pid     int
	cmdline string
	environ []string
	status  map[string]string
	netns   string
}

func readProc(pid int) (proc, error) {
	p := proc{pid: pid, status: map[string]string{}}
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return p, err
	}
	p.cmdline = strings.ReplaceAll(string(cmd), "\x00", " ")
	env, err := os.ReadFile(filepath.Join(dir, "environ"))
	if err != nil {
		return p, err
	}
	p.environ = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			p.status[k] = strings.TrimSpace(v)
		}
	}
	p.netns, err = os.Readlink(filepath.Join(dir, "ns", "net"))
	return p, err
}

// processesUnder lists the processes whose TMPDIR lies under dir: a browser's processes
// have their profile as TMPDIR (browser.browserEnv), whatever became of their parent.
func processesUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue // gone meanwhile (a zombie's reads empty)
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok && strings.HasPrefix(v, dir+"/") {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// tree is pid and its descendants.
func tree(t *testing.T, pid int) []proc {
	t.Helper()
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		pr, err := readProc(p)
		if err != nil {
			continue // gone meanwhile
		}
		out = append(out, pr)
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		for _, task := range tasks {
			kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, task.Name()))
			for _, k := range strings.Fields(string(kids)) {
				if n, err := strconv.Atoi(k); err == nil {
					queue = append(queue, n)
				}
			}
		}
	}
	return out
}

// The browser runs pages' JavaScript: none of its processes holds a TRAWL_* variable or
// a secret of the renderer's environment, none runs as root, and they are sandboxed —
// the browser in a network namespace of its own, each page's renderer process under
// seccomp, without new privileges, in namespaces nested deeper still.
func TestRenderBrowserIsolated(t *testing.T) {
	const secret = "s3cret-of-the-renderer"
	// The renderer's own environment: what the browser would inherit by default.
	t.Setenv("TRAWL_REDIS_URL", "redis://:"+secret+"@127.0.0.1:1/0")
	t.Setenv("TRAWL_NATS_URL", "nats://trawl:"+secret+"@127.0.0.1:1")
	t.Setenv("SOME_API_TOKEN", secret)
	st := newStack(t)
	// The page's renderer process lives while its script is awaited.
	s, asked, release := slowScript(t, waitFor)
	in := st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test"), "TRAWL_RENDER_CACHE_TTL": "0"}))
	lease := st.publishTask(s.url("a.test", "/"), `<html><body><script src="/slow.js"></script></body></html>`)
	select {
	case <-asked:
	case <-time.After(waitFor):
		t.Fatal("the page never asked for its script")
	}
	checkIsolated(t, tree(t, in.Svc.Browser().PID()), secret)
	close(release)
	if p := st.page(lease); !strings.Contains(string(p.Body), `data-slow="ran"`) {
		t.Errorf("page not rendered: %s", p.Body)
	}
}

// checkIsolated checks the browser's processes (procs[0] the browser itself): none holds a
// TRAWL_* variable or secret in its environment, none runs as root, none is in the test's
// network namespace or was started unsandboxed, and each page's renderer process is under
// seccomp, without new privileges, in a PID namespace of its own.
func checkIsolated(t *testing.T, procs []proc, secret string) {
	t.Helper()
	self, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) == 0 {
		t.Fatal("no browser process")
	}
	renderers := 0
	for _, p := range procs {
		what := fmt.Sprintf("browser process %d (%.80s)", p.pid, p.cmdline)
		for _, kv := range p.environ {
			if strings.HasPrefix(kv, "TRAWL_") || strings.Contains(kv, secret) {
				t.Errorf("%s has %q in its environment", what, kv)
			}
		}
		if uid := strings.Fields(p.status["Uid"]); len(uid) < 2 || uid[0] == "0" || uid[1] == "0" {
			t.Errorf("%s runs as uid %v, want a user that is not root", what, uid)
		}
		if p.netns == self.netns {
			t.Errorf("%s shares the renderer's network namespace %s", what, p.netns)
		}
		if strings.Contains(p.cmdline, "--no-sandbox") {
			t.Errorf("%s was started with --no-sandbox", what)
		}
		if !strings.Contains(p.cmdline, "--type=renderer") {
			continue
		}
		renderers++
		if p.status["Seccomp"] != "2" || p.status["NoNewPrivs"] != "1" {
			t.Errorf("%s: Seccomp %s, NoNewPrivs %s; want a seccomp filter (2) and no new privileges (1)", what, p.status["Seccomp"], p.status["NoNewPrivs"])
		}
		// Chromium's namespace sandbox gives each renderer a PID namespace of its own:
		// one more level than the browser's.
		if len(strings.Fields(p.status["NSpid"])) <= len(strings.Fields(procs[0].status["NSpid"])) {
			t.Errorf("%s: NSpid %q, browser %q: not in a PID namespace of its own", what, p.status["NSpid"], procs[0].status["NSpid"])
		}
	}
	if renderers == 0 {
		t.Errorf("no renderer process among the browser's %d processes", len(procs))
	}
}

// A renderer that is not root (as in its Docker image) sandboxes its browser the same way:
// the browser in user and network namespaces the renderer makes, Chromium's sandbox nested
// inside.
func TestRendererNotRootSandboxesItsBrowser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test runs the renderer as another user: run it as root (as make test and CI do)")
	}
	const secret = "s3cret-of-the-renderer"
	const uid = 65532 // the image's nonroot
	st := newStack(t)
	bin := renderer(t)
	// Short: Chromium's singleton socket goes in a directory inside, and a socket's path
	// has at most 107 bytes.
	tmp, err := os.MkdirTemp(tmpRoot, "trawl-nr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chown(tmp, uid, uid); err != nil {
		t.Fatal(err)
	}
	s, asked, release := slowScript(t, waitFor)
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	r := st.runRenderer(t, cmd, []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tmp, "SOME_API_TOKEN=" + secret},
		map[string]string{"TRAWL_RESOLVE": resolve("a.test"), "TRAWL_RENDER_CACHE_TTL": "0"})
	lease := st.publishTask(s.url("a.test", "/"), `<html><body><script src="/slow.js"></script></body></html>`)
	select {
	case <-asked:
	case <-r.exited:
		t.Fatalf("the renderer exited (%v):\n%s", r.err, r.out.String())
	case <-time.After(waitFor):
		t.Fatalf("the page never asked for its script:\n%s", r.out.String())
	}
	checkIsolated(t, tree(t, r.cmd.Process.Pid)[1:], secret)
	close(release)
	if p := st.page(lease); !strings.Contains(string(p.Body), `data-slow="ran"`) {
		t.Errorf("page not rendered: %s", p.Body)
	}
}

// Where the kernel gives no user namespace (here: a user namespace whose limit of nested
// ones is 0), the browser cannot have its sandbox: the renderer refuses to start, unless
// TRAWL_RENDER_ALLOW_UNSANDBOXED lets it run the browser unsandboxed, which it logs.
func TestRendererRefusesAnUnsandboxedBrowser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test maps users into a user namespace of its own: run it as root (as make test and CI do)")
	}
	st := newStack(t)
	bin := renderer(t)
	for _, tc := range []struct {
		name    string
		allow   string
		want    string // in the output
		running bool   // the renderer keeps running
	}{
		{"refused", "false", "TRAWL_RENDER_ALLOW_UNSANDBOXED=true to accept the risk", false},
		{"allowed", "true", `msg="browser started"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The renderer runs as root of a user namespace that maps the host's users
			// and may make no user namespace in turn.
			cmd := exec.Command("sh", "-c", `echo 0 > /proc/sys/user/max_user_namespaces && exec "$0"`, bin)
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Cloneflags:                 syscall.CLONE_NEWUSER,
				UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
				GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
				GidMappingsEnableSetgroups: true,
				Pdeathsig:                  syscall.SIGKILL,
			}
			p := st.runRenderer(t, cmd, os.Environ(), map[string]string{
				"TRAWL_LOG_FORMAT": "text", "TRAWL_RENDER_ALLOW_UNSANDBOXED": tc.allow})
			if !tc.running {
				select {
				case <-p.exited:
					if p.err == nil || !strings.Contains(p.out.String(), tc.want) {
						t.Fatalf("renderer exited with %v, want an error naming %q:\n%s", p.err, tc.want, p.out.String())
					}
				case <-time.After(waitFor):
					t.Fatalf("the renderer still runs after %s, want it refusing to start:\n%s", waitFor, p.out.String())
				}
				return
			}
			testwait.EventuallyState(t, waitFor, "the renderer running its browser unsandboxed", func() (bool, string) {
				select {
				case <-p.exited:
					t.Fatalf("renderer exited (%v):\n%s", p.err, p.out.String())
				default:
				}
				o := p.out.String()
				return strings.Contains(o, tc.want) && strings.Contains(o, "sandboxed=false"), o
			})
			if o := p.out.String(); !strings.Contains(o, "level=WARN") || !strings.Contains(o, "WITHOUT Chromium's sandbox") {
				t.Errorf("running unsandboxed, the renderer did not warn of the risk:\n%s", o)
			}
		})
	}
}
