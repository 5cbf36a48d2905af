package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/topology"
)

// The example indexer (examples/indexer) consumes a real crawl's crawl.docs through its
// own durable consumer and answers full-text searches over what was crawled.
func TestIndexerOnRealCrawl(t *testing.T) {
	t.Parallel()
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{}, nil)
	docs := readDocs(t, r.stack.JetStream())
	db := filepath.Join(t.TempDir(), "crawl.db")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs strings.Builder
	idx := exec.Command(filepath.Join(binDir, "indexer"), "-nats", r.stack.NATS().URL(), "-db", db)
	idx.Stdout, idx.Stderr = &logs, &logs
	if err := idx.Start(); err != nil {
		t.Fatal(err)
	}
	defer idx.Process.Kill()
	// Indexed everything: its durable consumer has nothing pending or unacked.
	js := r.stack.JetStream()
	for {
		if c, err := js.Consumer(ctx, topology.StreamDocs, "indexer"); err == nil {
			if info, err := c.Info(ctx); err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream > 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("indexer did not consume crawl.docs:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := idx.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := idx.Wait(); err != nil {
		t.Fatalf("indexer exit after SIGTERM: %v\n%s", err, logs.String())
	}

	// Every indexed page is findable by its title.
	checked := 0
	for u, d := range docs {
		if d.Title == "" || d.NoIndex || d.DuplicateOf != "" || checked >= 5 {
			continue
		}
		checked++
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "indexer"), "search", "-db", db, "-n", "50", d.Title).Output()
		if err != nil {
			t.Fatalf("search %q: %v", d.Title, err)
		}
		if !strings.Contains(string(out), u+"\t") {
			t.Errorf("search %q does not find %s:\n%s", d.Title, u, out)
		}
	}
	if checked == 0 {
		t.Fatal("no document with a title to search for")
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatal(err)
	}
}
