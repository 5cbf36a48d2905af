package service

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

func group(source string, n int) *crawlmsg.LinkGroup {
	g := &crawlmsg.LinkGroup{Source: source}
	for i := range n {
		g.URLs = append(g.URLs, crawlmsg.Discovered{URL: source + "l" + strings.Repeat("x", i), Depth: 1, Via: crawlmsg.ViaLink})
	}
	return g
}

// A batch's link groups go out in as few crawl.discovered messages as fit the budget, each
// group whole and in page order, with ids that name the pages they hold.
func TestDiscoveredMsgs(t *testing.T) {
	a, b, c := group("http://a.test/", 3), group("http://b.test/", 2), group("http://c.test/", 4)
	src := func(gs ...*crawlmsg.LinkGroup) []linkSource {
		var out []linkSource
		for i, g := range gs {
			out = append(out, linkSource{pageID: "CRAWL_PAGES:" + string(rune('1'+i)), group: g})
		}
		return out
	}
	sizeAB := scope.GroupSize(*a) + scope.GroupSize(*b)
	tests := []struct {
		name   string
		srcs   []linkSource
		budget int
		want   [][]*crawlmsg.LinkGroup // groups per message
		ids    []string                // exact ids, where the test pins them
	}{
		{"one page keeps its own id and version 1", src(a), 1 << 20, [][]*crawlmsg.LinkGroup{{a}}, []string{"disc:CRAWL_PAGES:1"}},
		{"a batch in one message", src(a, b, c), 1 << 20, [][]*crawlmsg.LinkGroup{{a, b, c}}, nil},
		{"split at the budget", src(a, b, c), sizeAB, [][]*crawlmsg.LinkGroup{{a, b}, {c}}, nil},
		{"a group over the budget goes alone", src(a, b), 1, [][]*crawlmsg.LinkGroup{{a}, {b}}, []string{"disc:CRAWL_PAGES:1", "disc:CRAWL_PAGES:2"}},
		{"nothing to follow", nil, 1 << 20, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, err := discoveredMsgs(tt.srcs, tt.budget)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != len(tt.want) {
				t.Fatalf("%d messages, want %d", len(msgs), len(tt.want))
			}
			for i, m := range msgs {
				if m.Subject != topology.SubjectDiscovered {
					t.Errorf("subject %s", m.Subject)
				}
				var d crawlmsg.DiscoveredBatch
				if err := crawlmsg.Unmarshal(m.Data, &d); err != nil {
					t.Fatal(err)
				}
				var want []crawlmsg.LinkGroup
				for _, g := range tt.want[i] {
					want = append(want, *g)
				}
				if !reflect.DeepEqual(d.LinkGroups(), want) {
					t.Errorf("message %d holds %+v, want %+v", i, d.LinkGroups(), want)
				}
				if wantV := map[bool]int{true: crawlmsg.Version, false: crawlmsg.LinksVersion}[len(want) == 1]; d.V != wantV {
					t.Errorf("message %d has version %d, want %d", i, d.V, wantV)
				}
				if tt.ids != nil && m.Header.Get(nats.MsgIdHdr) != tt.ids[i] {
					t.Errorf("message %d id %q, want %q", i, m.Header.Get(nats.MsgIdHdr), tt.ids[i])
				}
			}
		})
	}
}

// Packed otherwise after a redelivery, the same first page must not give the same id: the
// stream's duplicate window would drop the new message, and with it the other pages' links.
func TestDiscoveredMsgIDNamesEveryPage(t *testing.T) {
	a, b, c := group("http://a.test/", 1), group("http://b.test/", 1), group("http://c.test/", 1)
	id := func(srcs ...linkSource) string {
		msgs, err := discoveredMsgs(srcs, 1<<20)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("%d messages, %v", len(msgs), err)
		}
		return msgs[0].Header.Get(nats.MsgIdHdr)
	}
	ab := id(linkSource{"P:1", a}, linkSource{"P:2", b})
	ac := id(linkSource{"P:1", a}, linkSource{"P:3", c})
	if ab == ac || !strings.HasPrefix(ab, "disc:P:1+") {
		t.Errorf("ids %q and %q: want distinct ids that start with the first page's", ab, ac)
	}
	if again := id(linkSource{"P:1", a}, linkSource{"P:2", b}); again != ab {
		t.Errorf("the same pages packed again got id %q, want %q", again, ab)
	}
}
