package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// deadWork is what the fixture's consume loops are given, by body: the stream it goes to
// and how its handler fails.
var deadWork = []struct {
	stream, body, msgID string
	permanent           bool
	err                 string
	deliveries          uint64 // when it is parked
}{
	// Its own Nats-Msg-Id, and given up at once: its replay must wait out WA's duplicate
	// window. Its error quotes a credential and a terminal escape, as a page's may.
	{stream: "WA", body: "poison", msgID: "poison-1", permanent: true, err: "cannot parse \x1b[31m http://bob:s3cret@a.test/x", deliveries: 1},
	{stream: "WB", body: "hopeless", err: "redis timeout", deliveries: 2},
	{stream: "WB", body: "doomed", permanent: true, err: "bad batch", deliveries: 1},
}

// deadFixture is a stack whose CRAWL_DEAD holds deadWork's letters, parked by real
// consume loops that have stopped since, so a replayed message stays in its stream.
type deadFixture struct {
	*stack
	seq map[string]uint64 // CRAWL_DEAD sequence by body
}

func parkDead(t *testing.T) *deadFixture {
	t.Helper()
	s := startStack(t, 1)
	ctx := testwait.Context(t)
	loops, stop := context.WithCancel(ctx)
	defer stop()
	var done []chan error
	for _, name := range []string{"WA", "WB"} {
		// A duplicate window longer than the test: the poison letter's replay is too soon.
		if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage, Duplicates: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		cons, err := s.js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: -1})
		if err != nil {
			t.Fatal(err)
		}
		opts := natsx.ConsumeOptions{
			Dead:    &natsx.DeadLetter{JS: s.js, After: 2},
			Backoff: func(uint64) time.Duration { return 10 * time.Millisecond },
			Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
		ch := make(chan error, 1)
		done = append(done, ch)
		go func() {
			ch <- natsx.ConsumeBatches(loops, cons, opts, func(_ context.Context, msgs []jetstream.Msg) []error {
				errs := make([]error, len(msgs))
				for i, m := range msgs {
					for _, w := range deadWork {
						if w.body == string(m.Data()) {
							errs[i] = errors.New(w.err)
							if w.permanent {
								errs[i] = natsx.Permanent(errs[i])
							}
						}
					}
				}
				return errs
			})
		}()
	}
	for _, w := range deadWork {
		m := natsx.NewMsg(strings.ToLower(w.stream)+"."+w.body, "", []byte(w.body))
		m.Header.Set("X-Kept", w.body)
		if w.msgID != "" {
			m.Header.Set(nats.MsgIdHdr, w.msgID)
		}
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	f := &deadFixture{stack: s}
	testwait.Eventually(t, 20*time.Second, "every failing message parked in CRAWL_DEAD", func() bool {
		f.seq = map[string]uint64{}
		for body, d := range f.dead(t) {
			f.seq[body] = d.Seq
		}
		return len(f.seq) == len(deadWork)
	})
	stop()
	for _, ch := range done {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// dead reads CRAWL_DEAD by body.
func (f *deadFixture) dead(t *testing.T) map[string]natsx.Dead {
	t.Helper()
	return readStream(t, f.js, topology.StreamDead, func(m *jetstream.RawStreamMsg) natsx.Dead { return natsx.ReadDead(m) })
}

// work reads the work streams' messages' headers by body.
func (f *deadFixture) work(t *testing.T) map[string]nats.Header {
	t.Helper()
	out := map[string]nats.Header{}
	for _, name := range []string{"WA", "WB"} {
		for body, h := range readStream(t, f.js, name, func(m *jetstream.RawStreamMsg) nats.Header { return m.Header }) {
			out[body] = h
		}
	}
	return out
}

func readStream[T any](t *testing.T, js jetstream.JetStream, name string, read func(*jetstream.RawStreamMsg) T) map[string]T {
	t.Helper()
	ctx := testwait.Context(t)
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]T{}
	for seq := st.CachedInfo().State.FirstSeq; st.CachedInfo().State.Msgs > 0 && seq <= st.CachedInfo().State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[string(m.Data)] = read(m)
	}
	return out
}

// fill replaces @body in s with the body's CRAWL_DEAD sequence.
func (f *deadFixture) fill(s string) string {
	var pairs []string
	for body, seq := range f.seq {
		pairs = append(pairs, "@"+body, strconv.FormatUint(seq, 10))
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// parseDeadLine reads a line of dead ls: SEQ PARKED STREAM/SEQ SUBJECT CONSUMER DELIVERIES
// REASON SIZE ERROR.
func parseDeadLine(t *testing.T, l string) natsx.Dead {
	t.Helper()
	f := strings.SplitN(l, " ", 9)
	if len(f) != 9 {
		t.Fatalf("line %q: want 9 fields", l)
	}
	var d natsx.Dead
	var err error
	stream, streamSeq, _ := strings.Cut(f[2], "/")
	d.Stream, d.Subject, d.Consumer, d.Reason, d.Error = stream, f[3], f[4], f[6], f[8]
	for _, p := range []struct {
		s string
		v *uint64
	}{{f[0], &d.Seq}, {streamSeq, &d.StreamSeq}, {f[5], &d.Deliveries}} {
		if *p.v, err = strconv.ParseUint(p.s, 10, 64); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
	}
	if d.Size, err = strconv.Atoi(f[7]); err != nil {
		t.Fatalf("line %q: %v", l, err)
	}
	if d.Parked, err = time.Parse(time.RFC3339, f[1]); err != nil || !strings.HasSuffix(f[1], "Z") {
		t.Fatalf("line %q: parked %q is not RFC3339 in UTC (%v)", l, f[1], err)
	}
	return d
}

func parseDeadJSON(t *testing.T, l string) natsx.Dead {
	t.Helper()
	var d natsx.Dead
	if err := json.Unmarshal([]byte(l), &d); err != nil {
		t.Fatalf("line %q: %v", l, err)
	}
	if d.Parked.Location() != time.UTC {
		t.Errorf("line %q: parked not in UTC", l)
	}
	return d
}

// dead ls prints every letter, or a stream's, oldest first, with where it came from and
// why it was given up, and counts them by reason.
func TestDeadLs(t *testing.T) {
	f := parkDead(t)
	start := time.Now().Add(-time.Minute)
	for _, tc := range []struct {
		name   string
		args   []string
		json   bool
		want   []string // bodies
		stderr string
	}{
		{"every letter", []string{"dead", "ls"}, false, []string{"poison", "hopeless", "doomed"}, "3 dead letters: exhausted 1, permanent 2\n"},
		{"json", []string{"dead", "ls", "-json"}, true, []string{"poison", "hopeless", "doomed"}, "3 dead letters: exhausted 1, permanent 2\n"},
		{"one stream", []string{"dead", "ls", "-stream", "WB"}, false, []string{"hopeless", "doomed"}, "2 dead letters from WB: exhausted 1, permanent 1\n"},
		{"the other stream as json", []string{"dead", "ls", "-json", "-stream", "WA"}, true, []string{"poison"}, "1 dead letter from WA: permanent 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.inv.run(t, tc.args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if want := "trawlctl dead ls: " + tc.stderr; r.stderr != want {
				t.Errorf("stderr %q, want %q", r.stderr, want)
			}
			var got []natsx.Dead
			for _, l := range lines(r.stdout) {
				if tc.json {
					got = append(got, parseDeadJSON(t, l))
				} else {
					got = append(got, parseDeadLine(t, l))
				}
			}
			if !sort.SliceIsSorted(got, func(i, j int) bool { return got[i].Seq < got[j].Seq }) {
				t.Errorf("not oldest first:\n%s", r.stdout)
			}
			bodies := map[uint64]string{}
			for body, seq := range f.seq {
				bodies[seq] = body
			}
			var names []string
			for _, d := range got {
				names = append(names, bodies[d.Seq])
			}
			sort.Strings(names)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if strings.Join(names, " ") != strings.Join(want, " ") {
				t.Fatalf("listed %v, want %v:\n%s", names, want, r.stdout)
			}
			for _, d := range got {
				var w = deadWork[0]
				for _, x := range deadWork {
					if x.body == bodies[d.Seq] {
						w = x
					}
				}
				reason := natsx.DeadExhausted
				if w.permanent {
					reason = natsx.DeadPermanent
				}
				if d.Stream != w.stream || d.StreamSeq == 0 || d.Subject != strings.ToLower(w.stream)+"."+w.body || d.Consumer != "w" ||
					d.Deliveries != w.deliveries || d.Reason != reason || d.Size != len(w.body) || d.Parked.Before(start) {
					t.Errorf("%s listed as %+v, want from %s, subject %s, consumer w, %d deliveries, %s, %d octets",
						w.body, d, w.stream, strings.ToLower(w.stream)+"."+w.body, w.deliveries, reason, len(w.body))
				}
				if head, _, _ := strings.Cut(w.err, " \x1b"); !strings.Contains(d.Error, head) {
					t.Errorf("%s: error %q, want it to hold %q", w.body, d.Error, head)
				}
				if strings.Contains(d.Error, "s3cret") {
					t.Errorf("%s: error %q printed with its credential", w.body, d.Error)
				}
			}
			// JSON escapes it; a line of text must not carry it raw to the terminal.
			if strings.ContainsRune(r.stdout, '\x1b') {
				t.Errorf("terminal escape printed:\n%q", r.stdout)
			}
		})
	}
}

// Replay sends letters back to their streams, as they were, and takes them out of
// CRAWL_DEAD; one that must wait stays and is said to, without stopping the others; drop
// loses them.
func TestDeadReplayAndDrop(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr []string // in stderr
		left   []string // still in CRAWL_DEAD
		back   []string // in their work streams again
	}{
		{name: "replay one", args: []string{"replay", "@hopeless"},
			stdout: "replayed @hopeless to wb.hopeless\n", left: []string{"doomed", "poison"}, back: []string{"hopeless"}},
		{name: "replay one that must wait and one that need not", args: []string{"replay", "@poison", "@hopeless"}, code: 1,
			stdout: "replayed @hopeless to wb.hopeless\n",
			stderr: []string{"@poison stays in CRAWL_DEAD", "duplicate window", "replay it after"},
			left:   []string{"doomed", "poison"}, back: []string{"hopeless"}},
		{name: "replay a stream's", args: []string{"replay", "-stream", "WB"},
			stdout: "replayed @hopeless to wb.hopeless\nreplayed @doomed to wb.doomed\n", left: []string{"poison"}, back: []string{"doomed", "hopeless"}},
		{name: "replay all", args: []string{"replay", "-all"}, code: 1,
			stdout: "replayed @hopeless to wb.hopeless\nreplayed @doomed to wb.doomed\n", stderr: []string{"@poison stays"},
			left: []string{"poison"}, back: []string{"doomed", "hopeless"}},
		{name: "replay one gone", args: []string{"replay", "999", "@doomed"}, code: 1,
			stdout: "replayed @doomed to wb.doomed\n", stderr: []string{"999: no such dead letter"},
			left: []string{"hopeless", "poison"}, back: []string{"doomed"}},
		{name: "drop one", args: []string{"drop", "@doomed"},
			stdout: "dropped @doomed\n", left: []string{"hopeless", "poison"}},
		{name: "drop a stream's", args: []string{"drop", "-stream", "WB", "-all"},
			stdout: "dropped @hopeless\ndropped @doomed\n", left: []string{"poison"}},
		{name: "drop all", args: []string{"drop", "-all"},
			stdout: "dropped @poison\ndropped @hopeless\ndropped @doomed\n"},
		{name: "drop one gone", args: []string{"drop", "999"}, code: 1,
			stderr: []string{"999: no such dead letter"}, left: []string{"doomed", "hopeless", "poison"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parkDead(t)
			args := []string{"dead"}
			for _, a := range tc.args {
				args = append(args, f.fill(a))
			}
			r := f.inv.run(t, args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d: %s", r.code, tc.code, r.stderr)
			}
			// Oldest first; the poison letter may have been parked before or after the others.
			if got, want := sortedLines(r.stdout), sortedLines(f.fill(tc.stdout)); got != want {
				t.Errorf("stdout %q, want %q", r.stdout, f.fill(tc.stdout))
			}
			for _, want := range tc.stderr {
				if !strings.Contains(r.stderr, f.fill(want)) {
					t.Errorf("stderr %q lacks %q", r.stderr, f.fill(want))
				}
			}
			var left []string
			for body := range f.dead(t) {
				left = append(left, body)
			}
			sort.Strings(left)
			if strings.Join(left, " ") != strings.Join(tc.left, " ") {
				t.Errorf("CRAWL_DEAD holds %v, want %v", left, tc.left)
			}
			work := f.work(t)
			var back []string
			for body, h := range work {
				back = append(back, body)
				if h.Get("X-Kept") != body || h.Get(natsx.ReplayOfHdr) == "" || h.Get(natsx.DeadReasonHdr) != "" {
					t.Errorf("%s came back with headers %v, want its own (X-Kept), Trawl-Replay-Of and no Trawl-Dead-*", body, h)
				}
			}
			sort.Strings(back)
			if strings.Join(back, " ") != strings.Join(tc.back, " ") {
				t.Errorf("work streams hold %v, want %v", back, tc.back)
			}
		})
	}
}

func sortedLines(s string) string {
	l := lines(s)
	sort.Strings(l)
	return strings.Join(l, "\n")
}

// A wrong command line changes nothing and says what is wrong in one line.
func TestDeadArguments(t *testing.T) {
	f := parkDead(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dead", "replay"}, "exactly one of -all, -stream NAME or sequences"},
		{[]string{"dead", "replay", "-all", "@doomed"}, "exactly one of"},
		{[]string{"dead", "replay", "-all", "-stream", "WB"}, "exactly one of"},
		{[]string{"dead", "replay", "-stream", "WB", "@doomed"}, "exactly one of"},
		{[]string{"dead", "replay", "@doomed", "-all"}, `"-all" is not a dead letter's sequence`},
		{[]string{"dead", "replay", "0"}, `"0" is not a dead letter's sequence`},
		{[]string{"dead", "drop"}, "want the sequences to drop, or -all"},
		{[]string{"dead", "drop", "-all", "@doomed"}, "-all and sequences together"},
		{[]string{"dead", "drop", "-stream", "WB"}, "-stream needs -all"},
		{[]string{"dead", "drop", "-stream", "WB", "@doomed"}, "-stream needs -all"},
		{[]string{"dead", "ls", "@doomed"}, "unexpected argument"},
		// A wildcard would pick every stream's letters.
		{[]string{"dead", "drop", "-stream", "*", "-all"}, `-stream "*": not a stream name`},
		{[]string{"dead", "replay", "-stream", "W>"}, "not a stream name"},
		{[]string{"dead", "ls", "-stream", "crawl.dead"}, "not a stream name"},
	} {
		args := make([]string, len(tc.args))
		for i, a := range tc.args {
			args[i] = f.fill(a)
		}
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := f.inv.run(t, args...)
			expectOneLine(t, r, ExitUsage, tc.want)
			if r.stdout != "" {
				t.Errorf("stdout %q", r.stdout)
			}
		})
	}
	if n := len(f.dead(t)); n != len(deadWork) {
		t.Errorf("CRAWL_DEAD holds %d letters after wrong command lines, want %d", n, len(deadWork))
	}
}

// On a stack from before CRAWL_DEAD, ls says so and succeeds (nothing was parked);
// replay and drop fail, saying why.
func TestDeadWithoutTheStream(t *testing.T) {
	s := startStack(t, 1)
	// No letters is the answer, on stdout; with -json, whose lines are letters, on stderr.
	for _, tc := range []struct {
		args           []string
		stdout, stderr string
	}{
		{[]string{"dead", "ls"}, "no dead letters\n", ""},
		{[]string{"dead", "ls", "-stream", "CRAWL_DISCOVERED"}, "no dead letters from CRAWL_DISCOVERED\n", ""},
		{[]string{"dead", "ls", "-json"}, "", "trawlctl dead ls: no dead letters\n"},
		{[]string{"dead", "drop", "-all"}, "no dead letters\n", ""},
	} {
		r := s.inv.run(t, tc.args...)
		if r.code != 0 || r.stdout != tc.stdout || r.stderr != tc.stderr {
			t.Errorf("%v on an empty CRAWL_DEAD: exit %d, stdout %q, stderr %q; want 0, %q, %q", tc.args, r.code, r.stdout, r.stderr, tc.stdout, tc.stderr)
		}
	}
	if err := s.js.DeleteStream(testwait.Context(t), topology.StreamDead); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"dead", "ls"}, 0},
		{[]string{"dead", "ls", "-stream", "WB"}, 0},
		{[]string{"dead", "replay", "-all"}, ExitFailure},
		{[]string{"dead", "replay", "1"}, ExitFailure},
		{[]string{"dead", "drop", "1"}, ExitFailure},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := s.inv.run(t, tc.args...)
			expectOneLine(t, r, tc.code, "no CRAWL_DEAD stream on this NATS")
		})
	}
}

// Dropping a dead render task deletes the body it sent by reference: only a renderer
// deletes those, once it is done with the task, and the parser's sweeper leaves them.
func TestDeadDropRenderTaskBody(t *testing.T) {
	s := startStack(t, 1)
	ctx := testwait.Context(t)
	bodies, err := natsx.ObjectStore(ctx, s.js, topology.Bodies(topology.DefaultOptions(1)))
	if err != nil {
		t.Fatal(err)
	}
	name := crawlmsg.RenderTaskBodyName("lease-1")
	if _, err := bodies.PutBytes(ctx, name, []byte("<html>the page</html>")); err != nil {
		t.Fatal(err)
	}
	task := &crawlmsg.RenderTask{Reason: "host", Page: crawlmsg.Page{Meta: crawlmsg.PageMeta{
		URL: "https://example.com/", Host: "example.com", Lease: "lease-1", Status: 200, ContentType: "text/html",
		BodyRef: &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: name, Size: 21},
	}}}
	m, err := crawlmsg.RenderTaskMsg(topology.SubjectRender, task)
	if err != nil {
		t.Fatal(err)
	}
	seq := parkOne(t, s, m, topology.StreamRender, topology.ConsumerRenderer)
	if r := s.inv.run(t, "dead", "drop", strconv.FormatUint(seq, 10)); r.code != 0 {
		t.Fatalf("dead drop: exit %d: %s", r.code, r.stderr)
	}
	if _, err := bodies.GetInfo(ctx, name); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("the render task's body after the drop: %v, want it deleted", err)
	}
}

// Replaying a page renews the objects it names: the parser's sweeper keeps an object for a
// window after its time while a page that arrived in it is kept, and the replay arrives
// long after its body was stored.
func TestDeadReplayRenewsPageObjects(t *testing.T) {
	s := startStack(t, 1)
	ctx := testwait.Context(t)
	bodies, err := natsx.ObjectStore(ctx, s.js, topology.Bodies(topology.DefaultOptions(1)))
	if err != nil {
		t.Fatal(err)
	}
	const name = "page:lease-1"
	if _, err := bodies.PutBytes(ctx, name, []byte("<html>the page</html>")); err != nil {
		t.Fatal(err)
	}
	before, err := bodies.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: crawlmsg.PageMeta{
		URL: "https://example.com/", Host: "example.com", Lease: "lease-1", Status: 200, ContentType: "text/html",
		BodyRef: &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: name, Size: 21},
	}})
	if err != nil {
		t.Fatal(err)
	}
	seq := parkOne(t, s, m, topology.StreamPages, topology.ConsumerParser)
	// The page's id is in the duplicate window still: the replay is refused, and the
	// objects are renewed all the same; what matters is that they are.
	s.inv.run(t, "dead", "replay", strconv.FormatUint(seq, 10))
	after, err := bodies.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime.After(before.ModTime) {
		t.Errorf("the page's body modified %s after the replay, want later than %s", after.ModTime, before.ModTime)
	}
}

// parkOne publishes m and has a consume loop on stream's consumer give it up at once,
// and returns its letter's sequence in CRAWL_DEAD.
func parkOne(t *testing.T, s *stack, m *nats.Msg, stream, consumer string) uint64 {
	t.Helper()
	ctx := testwait.Context(t)
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	cons, err := s.js.Consumer(ctx, stream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	loop, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- natsx.ConsumeEach(loop, cons, natsx.ConsumeOptions{Dead: &natsx.DeadLetter{JS: s.js, After: 2},
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			func(context.Context, jetstream.Msg) error { return natsx.Permanent(errors.New("cannot handle")) })
	}()
	var seq uint64
	testwait.Eventually(t, 20*time.Second, "the message parked", func() bool {
		for _, d := range readStream(t, s.js, topology.StreamDead, func(m *jetstream.RawStreamMsg) natsx.Dead { return natsx.ReadDead(m) }) {
			seq = d.Seq
		}
		return seq != 0
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return seq
}
