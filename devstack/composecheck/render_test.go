package composecheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The renderer runs only under the render profile, so a plain `docker compose up` is as
// before; it scales like the fetcher; every service reads the one TRAWL_RENDER, so the
// parser sends pages only when the renderers are meant to run; the README prints the
// command.
func TestComposeRendererProfile(t *testing.T) {
	p, root := load(t)
	if _, err := p.GetService("renderer"); err == nil {
		t.Error("the renderer runs without the render profile")
	}
	for _, name := range services {
		s, _ := p.GetService(name)
		if got := env(s, "TRAWL_RENDER"); got != "off" {
			t.Errorf("%s: TRAWL_RENDER %q by default, want off", name, got)
		}
	}
	p, _ = loadProfiles(t, []string{"render"}, "TRAWL_RENDER=auto")
	r, err := p.GetService("renderer")
	if err != nil {
		t.Fatalf("the render profile has no renderer: %v", err)
	}
	if r.ContainerName != "" || len(r.Ports) != 0 {
		t.Errorf("renderer has container_name %q and ports %v: --scale would clash", r.ContainerName, r.Ports)
	}
	if r.HealthCheck == nil || len(r.HealthCheck.Test) == 0 || !strings.Contains(strings.Join(r.HealthCheck.Test, " "), "renderer healthcheck") {
		t.Errorf("renderer healthcheck %+v", r.HealthCheck)
	}
	if r.ShmSize < 256<<20 {
		t.Errorf("renderer shm_size %d: Chromium needs more than the 64 MB default", r.ShmSize)
	}
	for _, name := range append(services, "renderer") {
		s, _ := p.GetService(name)
		if got := env(s, "TRAWL_RENDER"); got != "auto" {
			t.Errorf("%s: TRAWL_RENDER %q with TRAWL_RENDER=auto set", name, got)
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "TRAWL_RENDER=auto docker compose --profile render up --build --scale renderer=2") {
		t.Error("README does not print the render profile's command")
	}
}
