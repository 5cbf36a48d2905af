//go:build compose

package dockerhost

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PruneLeftovers removes an untagged image built on a stand-in before the given time, and
// leaves the one made after it (the current run's, whose layers the next run builds on),
// the tagged image, and untagged images that are not the builds' (the machine's own).
func TestPruneLeftoversKeepsTheRunsAndOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := EnsureEngine(ctx, io.Discard, filepath.Join(t.TempDir(), "dockerd.log")); err != nil {
		t.Fatalf("this test needs a Docker engine: %v", err)
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	ours, theirs := "trawl-prunetest-ours:"+suffix, "trawl-prunetest-theirs:"+suffix
	s := Standins{Log: io.Discard}
	// Built three times under one tag, as a test's images are on every run: the first two
	// become untagged, one before the run's start and one after.
	var ourIDs []string
	var runStart time.Time
	for i, body := range []string{"earlier run", "this run", "this run, again"} {
		if i == 1 {
			runStart = time.Now()
		}
		if err := s.build(ctx, ours, "prunetest-"+strconv.Itoa(i), "a test image", scratchImage(body)); err != nil {
			t.Fatal(err)
		}
		ourIDs = append(ourIDs, imageID(t, ours))
	}
	var theirIDs []string
	// Other contents than ours: the same steps would share our images' layers.
	for _, body := range []string{"their first", "their second"} {
		buildUnlabelled(t, ctx, theirs, scratchImage(body))
		theirIDs = append(theirIDs, imageID(t, theirs))
	}
	t.Cleanup(func() {
		for _, id := range append(ourIDs, theirIDs...) {
			_ = exec.Command("docker", "image", "rm", "-f", id).Run()
		}
	})

	if err := PruneLeftovers(ctx, io.Discard, runStart); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		id   string
		kept bool
	}{
		{"the builds' untagged image of an earlier run", ourIDs[0], false},
		{"the builds' untagged image of this run", ourIDs[1], true},
		{"the builds' tagged image", ourIDs[2], true},
		{"another untagged image", theirIDs[0], true},
		{"another tagged image", theirIDs[1], true},
	} {
		t.Run(c.what, func(t *testing.T) {
			err := exec.CommandContext(ctx, "docker", "image", "inspect", c.id).Run()
			if exists := err == nil; exists != c.kept {
				t.Errorf("%s (%s) exists: %v, want %v", c.what, c.id, exists, c.kept)
			}
		})
	}
}

func scratchImage(body string) buildCtx {
	return buildCtx{dockerfile: "FROM scratch\nCOPY f /f\n", files: []ctxFile{{name: "f", mode: 0o644, body: []byte(body)}}}
}

func buildUnlabelled(t *testing.T, ctx context.Context, tag string, bc buildCtx) {
	t.Helper()
	var tarball bytes.Buffer
	if err := bc.write(&tarball); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, "-")
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	cmd.Stdin = &tarball
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", tag, err, out)
	}
}

func imageID(t *testing.T, img string) string {
	t.Helper()
	out, err := Output(context.Background(), nil, "docker", "image", "inspect", "-f", "{{.Id}}", img)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}
