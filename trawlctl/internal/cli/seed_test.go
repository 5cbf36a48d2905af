package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// discovered reads every message waiting on crawl.discovered without consuming it.
func (s *stack) discovered(t *testing.T) []crawlmsg.DiscoveredBatch {
	t.Helper()
	ctx := testwait.Context(t)
	st, err := s.js.Stream(ctx, topology.StreamDiscovered)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []crawlmsg.DiscoveredBatch
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var b crawlmsg.DiscoveredBatch
		if err := crawlmsg.Unmarshal(m.Data, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func (s *stack) purgeDiscovered(t *testing.T) {
	t.Helper()
	st, err := s.js.Stream(testwait.Context(t), topology.StreamDiscovered)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
}

func TestSeed(t *testing.T) {
	s := startStack(t, 1)
	dir := t.TempDir()
	file := filepath.Join(dir, "seeds.txt")
	if err := os.WriteFile(file, []byte("# my seeds\n\nHTTP://B.test:80/x/../y\n  https://c.test  \n# done\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var many []string
	for i := range 1001 {
		many = append(many, fmt.Sprintf("http://h%d.test/p", i))
	}
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantURLs []string // in order, over all messages
		msgs     int
		depth    int
		code     int
		stderr   string
	}{
		{
			name:     "arguments and file, normalised",
			args:     []string{"seed", "-file", file, "http://A.test"},
			wantURLs: []string{"http://a.test/", "http://b.test/y", "https://c.test/"},
			msgs:     1,
		},
		{
			name:     "stdin and depth",
			args:     []string{"seed", "-depth", "2", "-file", "-"},
			stdin:    "http://d.test/\n#x\nhttp://e.test/\n",
			wantURLs: []string{"http://d.test/", "http://e.test/"},
			msgs:     1,
			depth:    2,
		},
		{
			name:     "batches of 1000",
			args:     append([]string{"seed"}, many...),
			wantURLs: many,
			msgs:     2,
		},
		{
			name:   "a bad line publishes nothing",
			args:   []string{"seed", "-file", "-", "http://ok.test/"},
			stdin:  "http://fine.test/\nhttp://[::1/\n",
			code:   ExitFailure,
			stderr: `seed "http://[::1/"`,
		},
		{
			name:   "missing file",
			args:   []string{"seed", "-file", filepath.Join(dir, "nope.txt")},
			code:   ExitFailure,
			stderr: "nope.txt",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.purgeDiscovered(t)
			inv := s.inv
			inv.stdin = tt.stdin
			r := inv.run(t, tt.args...)
			got := s.discovered(t)
			if tt.code != 0 {
				expectOneLine(t, r, tt.code, tt.stderr)
				if len(got) != 0 {
					t.Errorf("published %d messages after a failure", len(got))
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if want := fmt.Sprintf("published %d URLs to crawl.discovered at depth %d in %d messages\n", len(tt.wantURLs), tt.depth, tt.msgs); r.stdout != want {
				t.Errorf("stdout %q, want %q", r.stdout, want)
			}
			if len(got) != tt.msgs {
				t.Fatalf("%d messages, want %d", len(got), tt.msgs)
			}
			var urls []string
			for _, b := range got {
				if b.Source != "" {
					t.Errorf("seed batch has source %q", b.Source)
				}
				for _, d := range b.URLs {
					urls = append(urls, d.URL)
					if d.Depth != tt.depth || d.Via != crawlmsg.ViaSeed {
						t.Errorf("%s: depth %d via %q, want %d via seed", d.URL, d.Depth, d.Via, tt.depth)
					}
				}
			}
			if strings.Join(urls, " ") != strings.Join(tt.wantURLs, " ") {
				t.Errorf("urls %v, want %v", urls, tt.wantURLs)
			}
		})
	}
}

func TestSeedWithoutStreams(t *testing.T) {
	s := startStack(t, 1)
	if err := s.js.DeleteStream(testwait.Context(t), topology.StreamDiscovered); err != nil {
		t.Fatal(err)
	}
	r := s.inv.run(t, "seed", "http://a.test/")
	expectOneLine(t, r, ExitFailure, "start a Trawl service first")
}
