package synthweb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Request is one logged request, as the server saw it.
type Request struct {
	Host   string    // the host (HostInfo.Name), no port
	Addr   string    // the address the request arrived on (IP only)
	Path   string    // path+query as requested
	Start  time.Time // when the handler was entered
	End    time.Time // when the response was written bar its last byte, so always before the client had all of it
	Status int       // status sent; 0 if the client went away before one was written
	Bytes  int       // body bytes written
	Agent  string    // the User-Agent header: which crawler process asked, where each has its own
	Remote string    // the client's address (IP only)
	// Header is the request's headers as received (Host excepted, which net/http keeps
	// apart): what a per-site rule added — User-Agent, extra headers, Cookie, Authorization —
	// is judged from here.
	Header http.Header `json:"header,omitempty"`
}

// Web is a running synthetic web.
type Web struct {
	m       *model
	srv     *http.Server
	serving sync.WaitGroup

	mu   sync.Mutex
	idle *sync.Cond // signalled when active empties
	// active holds the requests being served, as far as they are known before the response.
	active map[*Request]struct{}
	log    []Request
	// spaWaiting counts the app host's JSON answers held by Config.SPADelay.
	spaWaiting atomic.Int64
}

// Start builds the web and listens on every host address. ctx bounds
// start-up only; the web runs until Close.
func Start(ctx context.Context, cfg Config) (*Web, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ips, addrs, err := hostIPs(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.OneListener {
		addrs = []string{"0.0.0.0"}
	}
	listeners, port, err := listenAll(ctx, addrs, cfg.Port)
	if err != nil {
		return nil, err
	}
	w := &Web{m: newModel(cfg, ips, port)}
	w.idle = sync.NewCond(&w.mu)
	w.active = map[*Request]struct{}{}
	w.srv = &http.Server{
		Handler:           http.HandlerFunc(w.handle),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30*time.Second + cfg.SlowDelay,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
	}
	for _, l := range listeners {
		w.serving.Add(1)
		go func() {
			defer w.serving.Done()
			if err := w.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				slog.Error("synthweb: serve", "addr", l.Addr().String(), "err", err)
			}
		}()
	}
	return w, nil
}

// listenAll binds every address on one port. With port 0 it takes a random
// port from the first address and retries when another address already has
// it in use.
func listenAll(ctx context.Context, addrs []string, port int) ([]net.Listener, int, error) {
	var lc net.ListenConfig
	attempts := 1
	if port == 0 {
		attempts = 50
	}
	var lastErr error
	for a := 0; a < attempts; a++ {
		if err := ctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("synthweb: listen: %w", err)
		}
		var ls []net.Listener
		p := port
		for _, addr := range addrs {
			l, err := lc.Listen(ctx, "tcp4", net.JoinHostPort(addr, strconv.Itoa(p)))
			if err != nil {
				lastErr = fmt.Errorf("synthweb: listen on %s port %d: %w", addr, p, err)
				break
			}
			if p == 0 {
				p = l.Addr().(*net.TCPAddr).Port
			}
			ls = append(ls, l)
		}
		if len(ls) == len(addrs) {
			return ls, p, nil
		}
		for _, l := range ls {
			_ = l.Close()
		}
	}
	return nil, 0, lastErr
}

// Close stops the web: listeners and connections are closed (which cancels
// slow responses) and Close waits for handlers to finish, so Requests is
// final afterwards.
func (w *Web) Close() error {
	err := w.srv.Close()
	w.serving.Wait()
	w.mu.Lock()
	for len(w.active) > 0 {
		w.idle.Wait()
	}
	w.mu.Unlock()
	return err
}

// Port is the port shared by all hosts.
func (w *Web) Port() int { return w.m.port }

// Origin returns "http://host:port" for a host of this web (its HostInfo.Name); it
// fits CountByURL's origin parameter.
func (w *Web) Origin(host string) string { return originOf(host, w.m.port) }

// Hosts lists the hosts: ordinary ones first, then the special ones.
func (w *Web) Hosts() []HostInfo { return slices.Clone(w.m.hosts) }

// Resolve lists "name=address" for every virtual host, as TRAWL_RESOLVE takes them; nil
// without virtual hosts.
func (w *Web) Resolve() []string { return w.m.resolve() }

func (m *model) resolve() []string {
	var out []string
	for _, h := range m.hosts {
		if h.Name != h.Addr {
			out = append(out, h.Name+"="+h.Addr)
		}
	}
	return out
}

// Resolve is Web.Resolve for the web cfg describes, known before it starts (a crawler's
// settings are given before the web is up).
func (c Config) Resolve() ([]string, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	ips, _, err := hostIPs(c)
	if err != nil {
		return nil, err
	}
	return newModel(c, ips, 0).resolve(), nil
}

// Seeds returns the home page of every host, ordinary and special.
func (w *Web) Seeds() []string { return w.m.seedURLs() }

// Requests returns a snapshot of the completed requests, ordered by Start.
func (w *Web) Requests() []Request {
	w.mu.Lock()
	reqs := slices.Clone(w.log)
	w.mu.Unlock()
	slices.SortStableFunc(reqs, func(a, b Request) int {
		return cmp.Or(a.Start.Compare(b.Start), a.End.Compare(b.End))
	})
	return reqs
}

// InProgress returns the requests being served, ordered by Start: host, address, path,
// start, agent, remote and header known; End, Status and Bytes not yet. A test learns from
// it which crawler process holds a request at this moment, from the server's side.
func (w *Web) InProgress() []Request {
	w.mu.Lock()
	reqs := make([]Request, 0, len(w.active))
	for q := range w.active {
		reqs = append(reqs, *q)
	}
	w.mu.Unlock()
	slices.SortStableFunc(reqs, func(a, b Request) int { return a.Start.Compare(b.Start) })
	return reqs
}

// handle logs the request around serve. End is taken just before the
// last body byte is handed to net/http: until that byte is written the
// client cannot have the complete response, so a correct crawler's next
// request to the host always starts after End, even for bodies large
// enough that net/http streams them to the socket while being written.
func (w *Web) handle(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	addr := localIP(r)
	host := w.hostOf(r, addr)
	remote, _, _ := net.SplitHostPort(r.RemoteAddr)
	req := &Request{Host: host, Addr: addr, Path: r.URL.RequestURI(), Start: start, Agent: r.UserAgent(), Remote: remote, Header: r.Header.Clone()}
	w.mu.Lock()
	w.active[req] = struct{}{}
	w.mu.Unlock()

	status, body := w.serve(rw, r, host)
	if r.Method == http.MethodHead {
		body = nil
	}
	written := 0
	if status != 0 {
		rw.WriteHeader(status)
		if len(body) > 1 {
			n, _ := rw.Write(body[:len(body)-1])
			written += n
		}
	}
	end := time.Now()
	if status != 0 && len(body) > 0 {
		n, _ := rw.Write(body[len(body)-1:])
		written += n
	}

	w.mu.Lock()
	delete(w.active, req)
	req.End, req.Status, req.Bytes = end, status, written
	w.log = append(w.log, *req)
	if len(w.active) == 0 {
		w.idle.Broadcast()
	}
	w.mu.Unlock()
}

// localIP is the address the request arrived on.
func localIP(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if tcp, ok := a.(*net.TCPAddr); ok {
			return tcp.IP.String()
		}
	}
	host, _, _ := net.SplitHostPort(r.Host)
	return host
}

// hostOf identifies the host by the local address the request arrived on, not the Host
// header, which a buggy crawler might get wrong; only on the virtual hosts' shared
// address does the Host header name the host, as it does on a real shared server.
func (w *Web) hostOf(r *http.Request, addr string) string {
	if w.m.cfg.VirtualHosts == 0 || (addr != w.m.hosts[0].Addr && w.m.hosts[0].Addr != "0.0.0.0") {
		return addr
	}
	name, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		name = r.Host
	}
	return strings.ToLower(name)
}

// serve sets the response headers and returns the status and body; a zero
// status means nothing is to be sent (the client went away).
func (w *Web) serve(rw http.ResponseWriter, r *http.Request, host string) (int, []byte) {
	h, ok := w.m.index[net.JoinHostPort(host, strconv.Itoa(w.m.port))]
	if !ok {
		return plain(rw, http.StatusMisdirectedRequest, "unknown host")
	}
	var delay time.Duration
	switch w.m.hosts[h].Kind {
	case KindSlow:
		delay = w.m.cfg.SlowDelay
	case KindOrdinary:
		delay = w.m.cfg.Latency
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return 0, nil // client gone or web closing
		}
	}
	if w.m.hosts[h].Kind == KindSPA && w.m.cfg.SPADelay > 0 && r.URL.Path == spaAPI {
		w.spaWaiting.Add(1)
		t := time.NewTimer(w.m.cfg.SPADelay)
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		w.spaWaiting.Add(-1)
		if r.Context().Err() != nil {
			return 0, nil // the browser went away
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rw.Header().Set("Allow", "GET, HEAD")
		return plain(rw, http.StatusMethodNotAllowed, "method not allowed")
	}

	if r.URL.Path == "/robots.txt" && r.URL.RawQuery == "" {
		f := w.m.robots(h)
		if f.status != http.StatusOK {
			return plain(rw, f.status, http.StatusText(f.status))
		}
		return plain(rw, http.StatusOK, renderRobots(f.groups)+renderSitemapLines(f.sitemaps))
	}

	res := w.m.resource(h, r.URL.RequestURI())
	body := w.m.render(res)
	rw.Header().Set("Content-Type", res.contentType)
	rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if res.location != "" {
		rw.Header().Set("Location", res.location)
	}
	return res.status, body
}

func plain(rw http.ResponseWriter, status int, text string) (int, []byte) {
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	rw.Header().Set("Content-Type", textType)
	rw.Header().Set("Content-Length", strconv.Itoa(len(text)))
	return status, []byte(text)
}
