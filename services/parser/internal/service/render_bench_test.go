package service

import (
	"log/slog"
	"os"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/extract"
	"github.com/trawl/trawl/services/parser/internal/render"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/renderconf"
)

// BenchmarkProcessNotRendered is the parser's cost for a page that is not rendered, with
// rendering off and on (auto): the render decision's whole cost to a plain crawl, which
// must stay within 3% (make bench; docs/cost-per-page.md "Rendering"). The page is an
// ordinary page with text (render/testdata/ordinary/article.html), the kind a plain web is made of; the shell
// detector never reads it.
func BenchmarkProcessNotRendered(b *testing.B) {
	body, err := os.ReadFile("../render/testdata/ordinary/article.html")
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{renderconf.Off, renderconf.Auto} {
		b.Run("render="+mode, func(b *testing.B) {
			p := newProcessorB(b)
			d, err := render.New(renderconf.Settings{Mode: mode}, nil)
			if err != nil {
				b.Fatal(err)
			}
			p.render = d
			page := testPageB(body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				o, err := p.process(page)
				if err != nil || o.task != nil {
					b.Fatalf("process: %v, task %v", err, o.task)
				}
			}
		})
	}
}

func newProcessorB(b *testing.B) *processor {
	f, err := scope.New(scope.Config{Mode: scope.Any, MaxDepth: 20, MaxURLLength: 2048, MaxOutlinks: 1000, MaxBatchBytes: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	return &processor{extract: extract.Options{Limits: extract.DefaultLimits(), RobotsAgent: "trawl"}, filter: f, maxDoc: 1 << 20, minWords: 20,
		log: slog.New(slog.DiscardHandler)}
}

func testPageB(body []byte) *crawlmsg.Page {
	return &crawlmsg.Page{
		Meta: crawlmsg.PageMeta{V: 1, URL: "http://example.com/dir/index.html", Host: "example.com", Depth: 2,
			Status: 200, ContentType: "text/html", FetchedAt: 1700000000000, Lease: "l"},
		Body: body,
	}
}
