package itest

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/testwait"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// tmpRoot is the system's temporary directory, before tests point TMPDIR at their own.
var tmpRoot string

func TestMain(m *testing.M) {
	// The binary outlives the test that built it: it is made outside any test's TMPDIR.
	tmpRoot = os.TempDir()
	code := m.Run()
	if binary != "" && buildErr == nil {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// renderer builds the renderer binary once per test run.
func renderer(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp(tmpRoot, "trawl-renderer-bin-")
		if err != nil {
			buildErr = err
			return
		}
		// Tests run it as other users too.
		if err := os.Chmod(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "renderer")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/trawl/trawl/services/renderer").CombinedOutput()
		if err != nil {
			buildErr = err
			binary = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build the renderer: %v\n%s", buildErr, binary)
	}
	return binary
}

// A renderer killed with SIGKILL mid-page loses nothing: its task was never acked, comes
// back after the ack wait, and another renderer renders the page.
func TestRendererSIGKILLLosesNothing(t *testing.T) {
	st := newStack(t)
	bin := renderer(t)
	asked := make(chan struct{}, 4)
	var calls sync.Mutex
	n := 0
	s := newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt": serve("text/plain", ""),
		"a.test/slow.js": func(w http.ResponseWriter, r *http.Request) {
			calls.Lock()
			n++
			first := n == 1
			calls.Unlock()
			asked <- struct{}{}
			if first {
				// The first renderer is killed while it waits here.
				time.Sleep(3 * time.Second)
			}
			w.Header().Set("Content-Type", "text/javascript")
			w.Write([]byte(`document.body.setAttribute('data-slow', 'ran');`))
		},
	})
	mod := map[string]string{"TRAWL_RESOLVE": resolve("a.test"), "TRAWL_RENDER_CACHE_TTL": "0", "TRAWL_RENDER_REQUEST_TIMEOUT": "2s"}
	r := st.runRenderer(t, exec.Command(bin), os.Environ(), mod)
	lease := st.publishTask(s.url("a.test", "/"), `<html><body><script src="/slow.js"></script></body></html>`)
	select {
	case <-asked:
	case <-r.exited:
		t.Fatalf("the renderer exited before the page asked for its script:\n%s", r.out.String())
	case <-time.After(waitFor):
		t.Fatalf("the page never asked for its script:\n%s", r.out.String())
	}
	if err := syscall.Kill(r.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r.exited

	in := st.start(st.config(mod))
	p := st.page(lease)
	if p.Meta.Rendered == nil || p.Meta.Rendered.Failed != "" || !strings.Contains(string(p.Body), `data-slow="ran"`) {
		t.Fatalf("page after the kill: rendered %+v, DOM %s", p.Meta.Rendered, p.Body)
	}
	// The renderer counts a page once it is published, so just after it reaches the test.
	testwait.Eventually(t, 5*time.Second, "the second renderer counting the page", func() bool {
		return in.metric(t, `trawl_renderer_pages_total{result="rendered"}`) == 1
	})
}
