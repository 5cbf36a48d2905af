package itest

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// A task rendered twice (its ack lost, or its renderer gone after the page was stored)
// must not rewrite the objects the stored page names: the second page is dropped as a
// duplicate, so a parser or archiver that reads the objects later must find the first
// rendering's bodies, whole. The page's script changes on every request (same length,
// other content), so each rendering has its own DOM and exchange body.
func TestRenderedAgainKeepsThePublishedBodies(t *testing.T) {
	st := newStack(t)
	var gen atomic.Int64
	script := func(n int64) string {
		return fmt.Sprintf("document.getElementById('root').textContent = 'rendering %d';\n//%s", n, strings.Repeat("x", 2000))
	}
	s := newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt": serve("text/plain", ""),
		"a.test/gen.js": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/javascript")
			w.Header().Set("Cache-Control", "no-store") // each rendering asks for it
			fmt.Fprint(w, script(gen.Add(1)))
		},
	})
	// Every body goes by reference.
	st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test"), "TRAWL_BODY_INLINE_MAX": "0"}))
	pageURL := s.url("a.test", "/")
	shell := `<html><body><div id="root"></div><script src="/gen.js"></script></body></html>`
	lease := st.publishTask(pageURL, shell)
	first := st.page(lease)
	if first.Meta.Rendered == nil || first.Meta.Rendered.Failed != "" || first.Meta.BodyRef == nil {
		t.Fatalf("first rendering: rendered %+v, body ref %+v; want a rendered DOM by reference", first.Meta.Rendered, first.Meta.BodyRef)
	}
	want := map[string]string{} // object name -> what the first page says it holds
	refs := map[string]int64{first.Meta.BodyRef.Name: first.Meta.BodyRef.Size}
	for _, e := range first.Meta.Rendered.Exchanges {
		if e.BodyRef == nil {
			continue
		}
		refs[e.BodyRef.Name] = e.BodyRef.Size
		if e.URL == s.url("a.test", "/gen.js") {
			want[e.BodyRef.Name] = script(1)
		}
	}
	if len(want) != 1 {
		t.Fatalf("first page's exchanges %+v lack gen.js", first.Meta.Rendered.Exchanges)
	}

	// The same task again, as JetStream redelivers it.
	st.publishTaskOf(lease, pageURL, shell, "redelivered")
	testwait.EventuallyState(t, waitFor, "the task rendered a second time and acked", func() (bool, string) {
		ok, state, err := natsx.Settled(testwait.Context(t), st.js, topology.StreamRender, topology.ConsumerRenderer)
		if err != nil {
			return false, err.Error()
		}
		return ok && gen.Load() == 2, fmt.Sprintf("%s; gen.js asked %d times", state, gen.Load())
	})

	ctx := testwait.Context(t)
	bodies, err := st.js.ObjectStore(ctx, topology.BodiesBucket)
	if err != nil {
		t.Fatal(err)
	}
	for name, size := range refs {
		b, err := bodies.GetBytes(ctx, name)
		if err != nil {
			t.Errorf("object %s the first page names: %v", name, err)
			continue
		}
		switch {
		case int64(len(b)) != size:
			t.Errorf("object %s has %d octets, the first page says %d", name, len(b), size)
		case want[name] != "" && string(b) != want[name]:
			t.Errorf("object %s holds %.60q…, want the first rendering's script %.60q…", name, b, want[name])
		case name == first.Meta.BodyRef.Name && !bytes.Contains(b, []byte("rendering 1")):
			t.Errorf("DOM object %s holds %q, want the first rendering's DOM (rendering 1)", name, b)
		}
	}
	// The second rendering's page was a duplicate: its objects are gone with it.
	names := []string{}
	lister, err := bodies.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Fatal(err)
	}
	for _, o := range lister {
		if !crawlmsg.IsRenderTaskBody(o.Name) {
			names = append(names, o.Name)
		}
	}
	for _, n := range names {
		if _, ok := refs[n]; !ok {
			t.Errorf("object %s is left in %s, named by no page (objects %v)", n, topology.BodiesBucket, names)
		}
	}
}

// A task whose page was stored comes back when its ack was lost or came late, and its body
// is gone: the renderer deletes it once the page is stored. The task is acked as done, not
// parked as poison. The test plays the earlier delivery: it takes the task from the
// renderer's consumer and never acks it; its body was never stored, as if deleted.
func TestTaskDeliveredAgainAfterItsBodyWent(t *testing.T) {
	st := newStack(t)
	lease := fmt.Sprintf("0-%d-test", leases.Add(1))
	const pageURL = "http://a.test/gone"
	m, err := crawlmsg.RenderTaskMsg(topology.SubjectRender, &crawlmsg.RenderTask{Reason: "test", Page: crawlmsg.Page{
		Meta: crawlmsg.PageMeta{URL: pageURL, Host: "a.test", Lease: lease, Status: 200, Depth: 1,
			ContentType: "text/html", FetchedAt: time.Now().UnixMilli(),
			BodyRef: &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: crawlmsg.RenderTaskBodyName(lease), Size: 100}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testwait.Context(t)
	if _, err := st.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	natsembed.Hold(t, st.js, topology.StreamRender, topology.ConsumerRenderer, 1, waitFor)
	in := st.start(st.config(nil))
	testwait.EventuallyState(t, waitFor, "the task delivered again and acked", func() (bool, string) {
		ok, state, err := natsx.Settled(testwait.Context(t), st.js, topology.StreamRender, topology.ConsumerRenderer)
		if err != nil {
			return false, err.Error()
		}
		return ok, state
	})
	if n := in.metric(t, `trawl_renderer_pages_total{result="done_before"}`); n != 1 {
		t.Errorf("tasks found done before counted %v, want 1", n)
	}
	if n := in.metric(t, `trawl_renderer_messages_terminated_total`); n != 0 {
		t.Errorf("%v tasks terminated, want none: the task was done before", n)
	}
}
