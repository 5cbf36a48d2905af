package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// docCommands returns every line of the sh blocks of a Markdown file.
func docCommands(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "```sh":
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in && line != "" && !strings.HasPrefix(line, "#"):
			cmds = append(cmds, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds
}

// Every command in docs/operations.md runs, against a live crawl, and does what the
// document says.
func TestOperationsDocCommands(t *testing.T) {
	t.Parallel()
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmds := docCommands(t, filepath.Join(root, "docs", "operations.md"))
	if len(cmds) < 10 {
		t.Fatalf("found only %d commands in docs/operations.md", len(cmds))
	}
	work := t.TempDir()
	files := map[string]string{
		"seeds.txt":  "# more seeds\nhttps://example.net/\n\nhttps://example.org/about\n",
		"robots.txt": "User-agent: *\nDisallow: /\n\nUser-agent: trawl\nDisallow: /private/\nAllow: /private/open.html\n",
	}
	// A file the document shows (a fenced block whose first line is "# <name>") is written
	// as shown, so the commands that read it run on what the reader sees.
	for name, body := range docFiles(t, filepath.Join(root, "docs", "operations.md")) {
		files[name] = body
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := testEnv()
	outputs := map[string]string{}
	var mu sync.Mutex
	run := func(st *stack.Stack, c string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", c)
		cmd.Dir = work
		cmd.Env = append(os.Environ(),
			"PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
			"TRAWL_NATS_URL="+st.NATS().URL(),
			"TRAWL_REDIS_URL="+st.Redis().URL(),
		)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%s: %v\n%s%s", c, err, out, stderr.String())
			return
		}
		if len(strings.TrimSpace(string(out))) == 0 {
			t.Errorf("%s printed nothing", c)
		}
		mu.Lock()
		outputs[c] += string(out)
		mu.Unlock()
	}
	r := crawl(t, testWeb(), env, stack.Options{}, func(st *stack.Stack) {
		// A tap "from now" sees what is published after it starts: start those while the
		// crawl is young, and read them when the rest is done.
		var live sync.WaitGroup
		for _, c := range cmds {
			if tapsFromNow(c) {
				live.Go(func() { run(st, c) })
			}
		}
		waitFetched(t, st, 100)
		parkPoison(t, st)
		for _, c := range cmds {
			if !tapsFromNow(c) {
				run(st, c)
			}
		}
		live.Wait()
	})
	for c, out := range outputs {
		switch {
		case strings.Contains(c, "robots check") && strings.Contains(c, "-file"):
			if !strings.Contains(out, "disallowed https://example.com/private/page") || !strings.Contains(out, "allowed https://example.com/private/open.html") {
				t.Errorf("%s:\n%s", c, out)
			}
		case strings.Contains(c, "-status 503"):
			if !strings.Contains(out, "disallowed https://example.com/") {
				t.Errorf("%s:\n%s", c, out)
			}
		case strings.Contains(c, "url normalize"):
			if strings.TrimSpace(out) != "http://example.com/a/c" {
				t.Errorf("%s: %q", c, out)
			}
		case strings.Contains(c, "tap -from-start -n 3"), tapsFromNow(c):
			if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != 3 {
				t.Errorf("%s: %d lines, want 3:\n%s", c, n, out)
			}
		case strings.HasSuffix(c, "dead ls"):
			if !strings.Contains(out, "CRAWL_DISCOVERED/") || !strings.Contains(out, "dedup") || !strings.Contains(out, "permanent") {
				t.Errorf("%s: want the poison batch's letter:\n%s", c, out)
			}
		case strings.HasSuffix(c, "dead replay -all"):
			if !strings.Contains(out, "to crawl.discovered") {
				t.Errorf("%s:\n%s", c, out)
			}
		case strings.HasSuffix(c, "pause"):
			if !strings.Contains(strings.ToLower(out), "paused") {
				t.Errorf("%s:\n%s", c, out)
			}
		}
	}
	// The seeds from the document joined the crawl and reached terminal states too.
	if r.progress.Accepted != r.progress.Terminal() {
		t.Errorf("accounting after the document's commands: %+v", r.progress)
	}
	checkInvariants(t, r, env, 0)
}

// tapsFromNow reports a tap of messages published after it starts.
func tapsFromNow(c string) bool {
	return strings.Contains(c, "trawlctl tap") && !strings.Contains(c, "-from-start")
}

// docFiles are the files docs/operations.md shows: each fenced block whose first line is
// a comment naming the file ("# rules.yaml"), by name.
func docFiles(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	name, in := "", false
	var body strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in, name = true, ""
			body.Reset()
		case in && strings.HasPrefix(line, "```"):
			in = false
			if name != "" {
				out[name] = body.String()
			}
		case in && name == "" && body.Len() == 0 && strings.HasPrefix(line, "# ") && !strings.Contains(strings.TrimPrefix(line, "# "), " "):
			name = strings.TrimPrefix(line, "# ")
			body.WriteString(line + "\n")
		case in:
			body.WriteString(line + "\n")
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s shows no file", path)
	}
	return out
}

// parkPoison publishes a batch no stage can read, as a broken tap might, and waits until
// dedup has parked it in CRAWL_DEAD: what the document's dead letter commands act on.
func parkPoison(t *testing.T, st *stack.Stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := st.JetStream().Publish(ctx, topology.SubjectDiscovered, []byte(`{"v":1,"urls":"not a list"}`)); err != nil {
		t.Fatal(err)
	}
	dead, err := st.JetStream().Stream(ctx, topology.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "dedup to park the poison batch in "+topology.StreamDead, func() bool {
		info, err := dead.Info(ctx)
		return err == nil && info.State.Msgs > 0
	})
}
