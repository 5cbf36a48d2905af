package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redact"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/trawlctl/internal/conn"
)

// deadDetail is what each dead command's -h says first.
const deadDetail = `
CRAWL_DEAD holds the messages a stage gave up on: at once on a permanent error (a message
that does not decode, one over a size limit), after TRAWL_DEAD_LETTER_AFTER deliveries on a
temporary one. Each keeps its data, its headers, the stream, subject and consumer it came
from and its last error, until it is replayed or dropped; nothing else removes it.`

const deadReplayDetail = `
Replay sends a dead letter back to its subject with its data, its headers and its
Nats-Msg-Id, and removes it from CRAWL_DEAD once its stream stored it. Each stage takes it
as a redelivery of the message; deduplication lets every URL of a replayed message pass
again. A message with its own Nats-Msg-Id given up within its stream's duplicate window
cannot be replayed until that window has passed (NATS would drop it as a copy of itself):
it stays, and the line says when to try again.`

var deadLsCmd = &command{
	name:    "dead ls",
	summary: "list the messages the stages gave up on (CRAWL_DEAD), oldest first",
	detail: deadDetail + `

One line per dead letter: its CRAWL_DEAD sequence, when it was parked (UTC), the stream
and sequence it came from (STREAM/SEQ), its subject, the consumer that gave up, its
deliveries, the reason (permanent or exhausted), its size in octets and the last error.
-json prints one JSON object per line instead. Read-only.`,
}

var deadReplayCmd = &command{
	name:    "dead replay",
	args:    "(-all | -stream NAME | SEQ...)",
	summary: "send dead letters back to their subjects, to be handled again",
	detail:  deadDetail + "\n" + deadReplayDetail,
}

var deadDropCmd = &command{
	name:    "dead drop",
	args:    "(SEQ... | [-stream NAME] -all)",
	summary: "delete dead letters for good",
	detail: deadDetail + `

Drop deletes dead letters: the work they held (the URLs of a batch, a page, a document) is
lost for good. "trawlctl dead ls" lists them first; "trawlctl dead replay" retries them.`,
}

func init() {
	deadLsCmd.run = runDeadLs
	deadReplayCmd.run = runDeadReplay
	deadDropCmd.run = runDeadDrop
}

// errNoDeadStream explains a CRAWL_DEAD that is not there.
var errNoDeadStream = fmt.Errorf("no %s stream on this NATS: its services are from a release before dead letters "+
	"(later ones create it at start-up), so none was parked", topology.StreamDead)

func runDeadLs(ctx context.Context, e *env, args []string) error {
	fs := e.flags(deadLsCmd)
	stream := fs.String("stream", "", "only the dead letters taken from stream `NAME`")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	e.connFlags(fs, true, false)
	if err := e.parse(deadLsCmd, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := checkStreamName(*stream); err != nil {
		return err
	}
	nc, js, err := conn.NATS(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer nc.Close()
	enc := json.NewEncoder(e.Stdout)
	reasons := map[string]int{}
	n := 0
	err = eachDead(ctx, js, *stream, func(d natsx.Dead) error {
		n++
		reasons[d.Reason]++
		if *asJSON {
			return enc.Encode(d)
		}
		line := fmt.Sprintf("%d %s %s/%d %s %s %d %s %d %s", d.Seq, d.Parked.Format(time.RFC3339), d.Stream,
			d.StreamSeq, orDash(d.Subject), orDash(d.Consumer), d.Deliveries, orDash(d.Reason), d.Size, orDash(d.Error))
		_, err := fmt.Fprintln(e.Stdout, printable(line))
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		e.infof("%v", errNoDeadStream)
		return nil
	}
	if err != nil {
		return err
	}
	if n == 0 {
		// The answer itself, so on stdout, unless that is JSON lines.
		if *asJSON {
			e.infof("no dead letters%s", fromStream(*stream))
		} else {
			fmt.Fprintf(e.Stdout, "no dead letters%s\n", fromStream(*stream))
		}
		return nil
	}
	names := make([]string, 0, len(reasons))
	for r := range reasons {
		names = append(names, r)
	}
	sort.Strings(names)
	counts := make([]string, len(names))
	for i, r := range names {
		counts[i] = fmt.Sprintf("%s %d", orDash(r), reasons[r])
	}
	plural := "s"
	if n == 1 {
		plural = ""
	}
	e.infof("%d dead letter%s%s: %s", n, plural, fromStream(*stream), strings.Join(counts, ", "))
	return nil
}

func runDeadReplay(ctx context.Context, e *env, args []string) error {
	fs := e.flags(deadReplayCmd)
	all := fs.Bool("all", false, "every dead letter")
	stream := fs.String("stream", "", "every dead letter taken from stream `NAME`")
	e.connFlags(fs, true, false)
	if err := e.parse(deadReplayCmd, fs, args); err != nil {
		return err
	}
	seqs, err := deadSeqs(fs.Args())
	if err != nil {
		return err
	}
	chosen := 0
	for _, on := range []bool{*all, *stream != "", len(seqs) > 0} {
		if on {
			chosen++
		}
	}
	if chosen != 1 {
		return usagef("want exactly one of -all, -stream NAME or sequences (see trawlctl dead replay -h)")
	}
	if err := checkStreamName(*stream); err != nil {
		return err
	}
	return onDead(ctx, e, *stream, seqs, func(js jetstream.JetStream, d natsx.Dead) error {
		if err := renewPageObjects(ctx, js, d); err != nil {
			e.infof("%d: %s", d.Seq, redact.Text(err.Error()))
			return err
		}
		err := natsx.Replay(ctx, js, d.Seq)
		switch {
		case err == nil:
			fmt.Fprintf(e.Stdout, "replayed %d to %s\n", d.Seq, d.Subject)
		case errors.Is(err, natsx.ErrReplayTooSoon):
			e.infof("%d stays in %s: %s", d.Seq, topology.StreamDead, redact.Text(err.Error()))
		default:
			e.infof("%d: %s", d.Seq, redact.Text(err.Error()))
		}
		return err
	})
}

func runDeadDrop(ctx context.Context, e *env, args []string) error {
	fs := e.flags(deadDropCmd)
	all := fs.Bool("all", false, "every dead letter (with -stream: every one taken from that stream)")
	stream := fs.String("stream", "", "with -all: the dead letters taken from stream `NAME`")
	e.connFlags(fs, true, false)
	if err := e.parse(deadDropCmd, fs, args); err != nil {
		return err
	}
	seqs, err := deadSeqs(fs.Args())
	if err != nil {
		return err
	}
	switch {
	case *all && len(seqs) > 0:
		return usagef("-all and sequences together: give one or the other")
	case *stream != "" && !*all:
		return usagef("-stream needs -all: dropping loses the work for good, so say it")
	case !*all && len(seqs) == 0:
		return usagef("want the sequences to drop, or -all (see trawlctl dead drop -h)")
	}
	if err := checkStreamName(*stream); err != nil {
		return err
	}
	return onDead(ctx, e, *stream, seqs, func(js jetstream.JetStream, d natsx.Dead) error {
		body := renderTaskBody(ctx, js, d)
		err := natsx.DropDead(ctx, js, d.Seq)
		if err != nil {
			e.infof("%d: %s", d.Seq, redact.Text(err.Error()))
			return err
		}
		fmt.Fprintf(e.Stdout, "dropped %d\n", d.Seq)
		if body != "" {
			if err := deleteBody(ctx, js, body); err != nil {
				e.infof("%d: its render task's body %s stays in %s: %s", d.Seq, body, topology.BodiesBucket, redact.Text(err.Error()))
			}
		}
		return nil
	})
}

// renewPageObjects renews the objects a page letter names in CRAWL_BODIES (their metadata
// written again: a new modification time) before the page is replayed. The parser's
// sweeper keeps an object while a page that arrived within its window after the object's
// time is kept; the replay arrives long after, and its letter, which kept the objects
// too, is gone once it is stored.
func renewPageObjects(ctx context.Context, js jetstream.JetStream, d natsx.Dead) error {
	if d.Stream != topology.StreamPages {
		return nil
	}
	st, err := js.Stream(ctx, topology.StreamDead)
	if err != nil {
		return fmt.Errorf("%s: %w", topology.StreamDead, err)
	}
	raw, err := st.GetMsg(ctx, d.Seq)
	if err != nil {
		return fmt.Errorf("dead letter %d: %w", d.Seq, err)
	}
	p, err := crawlmsg.DecodePage(raw.Header, raw.Data)
	if err != nil {
		return nil // replayed as it is, it fails as it did
	}
	names := p.Objects(topology.BodiesBucket)
	if len(names) == 0 {
		return nil
	}
	bodies, err := js.ObjectStore(ctx, topology.BodiesBucket)
	if err != nil {
		return fmt.Errorf("%s: %w", topology.BodiesBucket, err)
	}
	for _, name := range names {
		info, err := bodies.GetInfo(ctx, name)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			continue // replayed, the page fails as a page whose body is gone
		}
		if err != nil {
			return fmt.Errorf("renew %s: %w", name, err)
		}
		if err := bodies.UpdateMeta(ctx, name, info.ObjectMeta); err != nil {
			return fmt.Errorf("renew %s: %w", name, err)
		}
	}
	return nil
}

// renderTaskBody is the object a dead render task's body went to, if any: only its
// renderer deletes one (after the task is done; the parser's sweeper leaves them), so
// dropping the task must. "" when the letter is no render task or names none.
func renderTaskBody(ctx context.Context, js jetstream.JetStream, d natsx.Dead) string {
	if d.Stream != topology.StreamRender {
		return ""
	}
	st, err := js.Stream(ctx, topology.StreamDead)
	if err != nil {
		return ""
	}
	raw, err := st.GetMsg(ctx, d.Seq)
	if err != nil {
		return ""
	}
	task, err := crawlmsg.DecodeRenderTask(raw.Header, raw.Data)
	if err != nil || task.Page.Meta.BodyRef == nil || !crawlmsg.IsRenderTaskBody(task.Page.Meta.BodyRef.Name) {
		return ""
	}
	return task.Page.Meta.BodyRef.Name
}

func deleteBody(ctx context.Context, js jetstream.JetStream, name string) error {
	bodies, err := js.ObjectStore(ctx, topology.BodiesBucket)
	if err != nil {
		return err
	}
	if err := bodies.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	return nil
}

// onDead runs do, which reports its own outcome, on each dead letter chosen (chooseDead),
// and fails silently (its lines said why) when any of them failed.
func onDead(ctx context.Context, e *env, stream string, seqs []uint64, do func(jetstream.JetStream, natsx.Dead) error) error {
	nc, js, err := conn.NATS(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer nc.Close()
	letters, failed, err := chooseDead(ctx, e, js, stream, seqs)
	if err != nil {
		return err
	}
	for _, d := range letters {
		if do(js, d) != nil {
			failed++
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if failed > 0 {
		return errSilent
	}
	return nil
}

// deadSeqs parses sequence arguments.
func deadSeqs(args []string) ([]uint64, error) {
	seqs := make([]uint64, 0, len(args))
	for _, a := range args {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil || n == 0 {
			return nil, usagef("%q is not a dead letter's sequence (flags go before the sequences)", a)
		}
		seqs = append(seqs, n)
	}
	return seqs, nil
}

// checkStreamName refuses a -stream no stream can have: one that would make the subject
// filter a wildcard, or match nothing.
func checkStreamName(name string) error {
	if strings.ContainsAny(name, ".*> \t\r\n") {
		return usagef("-stream %q: not a stream name (it cannot hold '.', '*', '>' or white space)", name)
	}
	return nil
}

// chooseDead returns the dead letters named by seqs, or with none every one (of stream, if
// set) stored when the read began. A sequence that names no dead letter is reported and
// counted in missing.
func chooseDead(ctx context.Context, e *env, js jetstream.JetStream, stream string, seqs []uint64) (letters []natsx.Dead, missing int, err error) {
	if len(seqs) == 0 {
		err := eachDead(ctx, js, stream, func(d natsx.Dead) error { letters = append(letters, d); return nil })
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, 0, errNoDeadStream
		}
		if err == nil && len(letters) == 0 {
			fmt.Fprintf(e.Stdout, "no dead letters%s\n", fromStream(stream))
		}
		return letters, 0, err
	}
	st, err := js.Stream(ctx, topology.StreamDead)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, errNoDeadStream
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", topology.StreamDead, err)
	}
	for _, seq := range seqs {
		raw, err := st.GetMsg(ctx, seq)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			e.infof("%d: no such dead letter (replayed or dropped already?)", seq)
			missing++
		case err != nil:
			return nil, 0, fmt.Errorf("dead letter %d: %w", seq, err)
		default:
			letters = append(letters, natsx.ReadDead(raw))
		}
	}
	return letters, missing, nil
}

// eachDead calls each with every dead letter (of stream, if set) stored when the read
// began, oldest first, read with headers only: the data stays on the server, and Size comes
// from the header Nats-Msg-Size the server adds instead. A missing CRAWL_DEAD is
// jetstream.ErrStreamNotFound.
func eachDead(ctx context.Context, js jetstream.JetStream, stream string, each func(natsx.Dead) error) error {
	return natsx.ScanDead(ctx, js, natsx.DeadScan{Stream: stream, HeadersOnly: true}, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
		d := natsx.ReadDead(&jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(), Time: md.Timestamp})
		d.Size, _ = strconv.Atoi(m.Headers().Get(nats.MsgSize))
		d.Parked = d.Parked.UTC()
		d.Error = redact.Text(d.Error)
		return each(d)
	})
}

func fromStream(stream string) string {
	if stream == "" {
		return ""
	}
	return " from " + stream
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable keeps a dead letter's line from moving the terminal's cursor or colours: its
// error may quote a page.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
}
