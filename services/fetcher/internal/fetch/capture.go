package fetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strconv"
	"sync"

	"github.com/trawl/trawl/shared/safedial"
)

// An archive needs the exchange as it crossed the wire: net/http parses the response head
// into a map (order, case and repeated lines lost) and never shows the request it wrote.
// So every HTTP/1.1 connection is wrapped in a recorder above TLS that keeps, per
// exchange, the request octets written and the response head octets read, and stops
// recording at the end of the head: the body is taken from the response reader, where
// transfer coding is already removed. HTTP/2 frames carry no such text; for an HTTP/2
// exchange (and a tunnelled HTTPS one through a proxy, whose TLS the transport makes
// itself) both are rebuilt in HTTP/1.1 form from the parsed request and response.

// maxRequestCapture bounds the request octets kept: a GET's head, well under it.
const maxRequestCapture = 16 << 10

// recConn records the current exchange of one HTTP/1.1 connection. The transport writes a
// request, then reads its response; a write after reads starts a new exchange.
type recConn struct {
	net.Conn
	maxHead int

	mu       sync.Mutex
	reading  bool   // the response of the current request is being read
	req      []byte // request octets written
	reqOver  bool   // the request went past maxRequestCapture
	head     []byte // response octets read, up to the end of the final head
	headDone bool   // head holds a whole final head (or recording gave up)
	headOver bool   // the head went past maxHead: nothing verbatim to give
}

func (c *recConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.reading || (c.req == nil && c.head == nil) {
		c.reading = false
		c.req, c.reqOver = c.req[:0], false
		c.head, c.headDone, c.headOver = c.head[:0], false, false
	}
	if !c.reqOver {
		if len(c.req)+len(p) > maxRequestCapture {
			c.reqOver, c.req = true, c.req[:0]
		} else {
			c.req = append(c.req, p...)
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *recConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.reading = true
		if !c.headDone {
			c.appendHead(p[:n])
		}
		c.mu.Unlock()
	}
	return n, err
}

// appendHead adds octets read and cuts the head at its blank line. Interim 1xx heads
// (100 Continue, 103 Early Hints) are dropped: the archive records the final response.
func (c *recConn) appendHead(p []byte) {
	from := max(0, len(c.head)-3)
	c.head = append(c.head, p...)
	for {
		end := headEnd(c.head, from)
		if end < 0 {
			if len(c.head) > c.maxHead {
				c.headDone, c.headOver, c.head = true, true, c.head[:0]
			}
			return
		}
		if code := statusCode(c.head[:end]); code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
			c.head = append(c.head[:0], c.head[end:]...)
			from = 0
			continue
		}
		c.head, c.headDone = c.head[:end], true
		return
	}
}

// take returns copies of the current exchange's request and response head, or nil for
// either when it is not whole.
func (c *recConn) take() (req, head []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reqOK := !c.reqOver && len(c.req) > 0
	headOK := c.headDone && !c.headOver && len(c.head) > 0
	// One allocation for both: they travel and are freed together.
	n := 0
	if reqOK {
		n += len(c.req)
	}
	if headOK {
		n += len(c.head)
	}
	if n == 0 {
		return nil, nil
	}
	both := make([]byte, 0, n)
	if reqOK {
		both = append(both, c.req...)
		req = both[:len(c.req):len(c.req)]
	}
	if headOK {
		start := len(both)
		both = append(both, c.head...)
		head = both[start:len(both):len(both)]
	}
	return req, head
}

// headEnd is the offset just past the blank line ending a head in b (searching from
// from), accepting bare LF as net/http does, or -1.
func headEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

// statusCode reads the code of a status line "HTTP/1.1 200 OK", or 0.
func statusCode(head []byte) int {
	_, rest, ok := bytes.Cut(head, []byte(" "))
	if !ok || len(rest) < 3 {
		return 0
	}
	code, err := strconv.Atoi(string(rest[:3]))
	if err != nil {
		return 0
	}
	return code
}

// recordingDial wraps the plain-text dial in a recorder.
func recordingDial(dial func(ctx context.Context, network, addr string) (net.Conn, error), maxHead int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, safedial.PinnedAddress(ctx, addr))
		if err != nil {
			return nil, err
		}
		return &recConn{Conn: conn, maxHead: maxHead}, nil
	}
}

// recordingTLSDial dials through the address policy, shakes hands offering HTTP/2 and
// HTTP/1.1, and wraps an HTTP/1.1 connection in a recorder above TLS. An HTTP/2
// connection is returned as the *tls.Conn the transport needs to speak HTTP/2 on it.
func recordingTLSDial(cfg Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		// The server name stays the host's: only the address dialled is pinned.
		raw, err := cfg.Dial(ctx, network, safedial.PinnedAddress(ctx, addr))
		if err != nil {
			return nil, err
		}
		tc := &tls.Config{}
		if cfg.TLSConfig != nil {
			tc = cfg.TLSConfig.Clone()
		}
		if tc.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			tc.ServerName = host
		}
		if len(tc.NextProtos) == 0 {
			tc.NextProtos = []string{"h2", "http/1.1"}
		}
		conn := tls.Client(raw, tc)
		hctx := ctx
		if cfg.TLSTimeout > 0 {
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, cfg.TLSTimeout)
			defer cancel()
		}
		if err := conn.HandshakeContext(hctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		if conn.ConnectionState().NegotiatedProtocol == "h2" {
			return conn, nil
		}
		return &recConn{Conn: conn, maxHead: int(cfg.MaxHeaderBytes) + 4<<10}, nil
	}
}

// exchange is one request's state besides the request itself: the connection it went out
// on (from its client trace) and the readers over its body. Exchanges are pooled, trace
// and all, so a request allocates none of it: an exchange goes back to the pool only once
// its response arrived, when no trace callback of its request can still come.
type exchange struct {
	mu   sync.Mutex
	conn net.Conn
	ctx  context.Context // the request's, for the pin check
	ct   httptrace.ClientTrace
	got  func(httptrace.GotConnInfo) // x.gotConn, bound once

	wire countingReader   // the body as read from the network
	body io.LimitedReader // the decoded body, one octet over the cap
}

var exchanges = sync.Pool{New: func() any {
	x := &exchange{}
	x.got = x.gotConn
	return x
}}

// getExchange is a fresh exchange whose trace is bound to ctx; trace is the context to
// send the request under.
func getExchange(ctx context.Context) (x *exchange, trace context.Context) {
	x = exchanges.Get().(*exchange)
	x.ctx = ctx
	// Set afresh each time: WithClientTrace composes an outer trace into it in place.
	x.ct = httptrace.ClientTrace{GotConn: x.got}
	return x, httptrace.WithClientTrace(ctx, &x.ct)
}

// put returns x to the pool. Call it only once the request's response arrived (its
// connection is known), never after a failed request, whose dial may still report.
func (x *exchange) put() {
	x.mu.Lock()
	x.conn, x.ctx = nil, nil
	x.mu.Unlock()
	x.wire = countingReader{}
	x.body = io.LimitedReader{}
	exchanges.Put(x)
}

func (x *exchange) gotConn(info httptrace.GotConnInfo) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if info.Reused && safedial.OffPin(x.ctx, info.Conn) {
		// A pooled connection to another address of the host (it moved, or has
		// several): closed before anything is written, so the transport dials the
		// pinned address instead.
		_ = info.Conn.Close()
		return
	}
	x.conn = info.Conn
}

// capture fills out's wire fields from the exchange's connection, or rebuilds them.
func (x *exchange) capture(out *Response, req *http.Request, resp *http.Response) {
	x.mu.Lock()
	conn := x.conn
	x.mu.Unlock()
	if conn != nil {
		out.RemoteIP = remoteIP(conn.RemoteAddr())
	}
	if rc, ok := conn.(*recConn); ok {
		out.RequestHead, out.ResponseHead = rc.take()
	}
	out.Verbatim = out.RequestHead != nil && out.ResponseHead != nil
	if !out.Verbatim {
		out.RequestHead = rebuildRequest(req)
		out.ResponseHead = rebuildResponse(resp)
	}
}

func remoteIP(a net.Addr) string {
	if a == nil {
		return ""
	}
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return ""
	}
	return host
}

// rebuildRequest writes the request head in HTTP/1.1 form, headers sorted by name.
func rebuildRequest(req *http.Request) []byte {
	var b bytes.Buffer
	b.WriteString(req.Method + " " + req.URL.RequestURI() + " HTTP/1.1\r\n")
	b.WriteString("Host: " + req.Host + "\r\n")
	if req.Host == "" {
		b.Truncate(b.Len() - len("Host: \r\n"))
		b.WriteString("Host: " + req.URL.Host + "\r\n")
	}
	writeHeader(&b, req.Header)
	b.WriteString("\r\n")
	return b.Bytes()
}

// rebuildResponse writes the response head in HTTP/1.1 form, headers sorted by name.
func rebuildResponse(resp *http.Response) []byte {
	var b bytes.Buffer
	text := http.StatusText(resp.StatusCode)
	if len(resp.Status) > 4 {
		text = resp.Status[4:]
	}
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, text)
	writeHeader(&b, resp.Header)
	b.WriteString("\r\n")
	return b.Bytes()
}

func writeHeader(b *bytes.Buffer, h http.Header) {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range h[k] {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
}
