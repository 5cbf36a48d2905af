package cli

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/trawlctl/internal/inspect"
)

// TestExplainRender: explain says why a page was or was not rendered — the parser's kept
// decision when there is one, else what the settings decide.
func TestExplainRender(t *testing.T) {
	s := startStack(t, 1)
	const shell, plain, named = "http://a.test/app", "http://a.test/plain", "http://b.test/x"
	ctx := testwait.Context(t)
	if err := renderconf.Record(ctx, s.rdb, "trawl", []renderconf.Why{{URL: shell, Render: true, Reason: renderconf.ReasonShell,
		Detail: "words=0 mount=div#root bundles=1 noscript-js=true", At: time.Now().UnixMilli()}}); err != nil {
		t.Fatal(err)
	}
	explain := func(env map[string]string, u string) inspect.RenderReport {
		t.Helper()
		inv := s.inv
		inv.env = maps.Clone(inv.env)
		maps.Copy(inv.env, env)
		r := inv.run(t, "explain", "-json", u)
		var rep inspect.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Render == nil {
			t.Fatalf("explain %s: %v (%s)", u, err, r.stderr)
		}
		return *rep.Render
	}
	auto := map[string]string{"TRAWL_RENDER": "auto", "TRAWL_RENDER_HOSTS": "b.test"}
	for _, tc := range []struct {
		name   string
		env    map[string]string
		url    string
		render bool
		reason renderconf.Reason
		kept   bool
	}{
		{"off", nil, shell, false, renderconf.ReasonOff, false},
		{"kept decision", auto, shell, true, renderconf.ReasonShell, true},
		{"plain page in auto", auto, plain, false, renderconf.ReasonNoShell, false},
		{"host setting", auto, named, true, renderconf.ReasonHost, false},
		{"always", map[string]string{"TRAWL_RENDER": "always"}, plain, true, renderconf.ReasonAlways, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := explain(tc.env, tc.url)
			if got.Render != tc.render || got.Reason != tc.reason || (got.Kept != nil) != tc.kept {
				t.Fatalf("render report %+v, want render %t reason %s kept %t", got, tc.render, tc.reason, tc.kept)
			}
		})
	}
	inv := s.inv
	inv.env = maps.Clone(inv.env)
	maps.Copy(inv.env, auto)
	if text := inv.run(t, "explain", shell).stdout; !strings.Contains(text, "render     RENDERED (shell)") || !strings.Contains(text, "mount=div#root") {
		t.Errorf("text report lacks the decision:\n%s", text)
	}
}
