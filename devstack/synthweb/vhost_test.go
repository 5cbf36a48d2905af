package synthweb

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Virtual hosts: several host names served on one address, told apart by the Host
// header, next to hosts with addresses of their own; the request log names both the host
// and the address, and Resolve lists the names for the crawler's resolver.
func TestVirtualHostsShareOneAddress(t *testing.T) {
	cfg := smallConfig()
	cfg.Hosts, cfg.VirtualHosts, cfg.Special = 4, 3, false
	w := startWeb(t, cfg)
	hosts := w.Hosts()
	shared := hosts[0].Addr
	resolve := map[string]string{}
	for _, e := range w.Resolve() {
		name, addr, _ := strings.Cut(e, "=")
		resolve[name] = addr
	}
	for i, h := range hosts {
		switch {
		case i < 3 && (h.Name != virtualName(i) || h.Addr != shared || resolve[h.Name] != shared):
			t.Fatalf("host %d: %+v, want virtual host %s on %s, in Resolve", i, h, virtualName(i), shared)
		case i == 3 && (h.Name != h.Addr || h.Addr == shared || resolve[h.Name] != ""):
			t.Fatalf("host %d: %+v, want a host on an address of its own, not in Resolve", i, h)
		}
	}
	if len(resolve) != 3 {
		t.Fatalf("Resolve lists %v, want the 3 virtual hosts", w.Resolve())
	}
	if before, err := cfg.Resolve(); err != nil || strings.Join(before, ",") != strings.Join(w.Resolve(), ",") {
		t.Fatalf("Config.Resolve = %v, %v; the web's is %v", before, err, w.Resolve())
	}

	// A client that resolves the names as the crawler is told to.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, _ := net.SplitHostPort(addr)
			if a, ok := resolve[host]; ok {
				addr = net.JoinHostPort(a, port)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	for _, h := range hosts {
		if status, body := get(h.Origin + "/"); status != 200 || !strings.Contains(body, "<title>"+h.Name+" ") {
			t.Errorf("%s: status %d, body lacks its own title:\n%.200s", h.Origin, status, body)
		}
	}
	resolve["unknown.synth.test"] = shared
	if status, _ := get(w.Origin("unknown.synth.test") + "/"); status != http.StatusMisdirectedRequest {
		t.Errorf("an unknown name on the shared address: status %d, want 421", status)
	}

	seen := map[string]string{}
	for _, r := range w.Requests() {
		seen[r.Host] = r.Addr
	}
	for _, h := range hosts {
		if seen[h.Name] != h.Addr {
			t.Errorf("request log: host %s at %q, want %s", h.Name, seen[h.Name], h.Addr)
		}
	}
	exp := w.Expected(100)
	if !exp.Fetch[hosts[1].Origin+"/"] {
		t.Errorf("Expected lacks the virtual host's home page %s/", hosts[1].Origin)
	}
}

func TestVirtualHostsConfig(t *testing.T) {
	cfg := smallConfig()
	cfg.VirtualHosts = numHosts(cfg) + 1
	if _, err := Start(context.Background(), cfg); err == nil {
		t.Fatal("more virtual hosts than hosts accepted")
	}
}

// The single-page app's hosts, after the ordinary ones, can be virtual hosts too: a web on
// one address (a container's, cmd/trawl-synthweb -spa) serves the app by name.
func TestVirtualSPAHosts(t *testing.T) {
	cfg := Config{Hosts: 2, PagesPerHost: 3, LinksPerPage: 2, SPA: true, Render: true, VirtualHosts: 4, SlowDelay: -1}
	w := startWeb(t, cfg)
	spa, ok := w.SPA()
	if !ok || spa.Host != virtualName(2) || spa.ScriptHost != virtualName(3) {
		t.Fatalf("SPA hosts %q and %q (%t), want %s and %s", spa.Host, spa.ScriptHost, ok, virtualName(2), virtualName(3))
	}
	hosts := w.Hosts()
	req, err := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(hosts[0].Addr, portOf(t, hosts[2].Origin))+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = strings.TrimPrefix(hosts[2].Origin, "http://")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(b.String(), spa.Script) {
		t.Errorf("the app host's shell by name: %s, want 200 with a script from %s:\n%s", resp.Status, spa.Script, b.String())
	}
	if exp := w.Expected(10); len(exp.Browser) != 1+len(spa.API) || !exp.Forbidden[spa.Disallowed] {
		t.Errorf("Expected: %d browser requests, want the script and %d JSON; %s forbidden %t", len(exp.Browser), len(spa.API), spa.Disallowed, exp.Forbidden[spa.Disallowed])
	}
}

func portOf(t *testing.T, origin string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(origin, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// rqa builds a request to host at addr from millisecond offsets.
func rqa(host, addr, path string, startMS, endMS int) Request {
	r := rq(host, path, startMS, endMS)
	r.Addr = addr
	return r
}

func TestChecksByAddr(t *testing.T) {
	addrPairs := func(vs []Violation) []string {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = v.Addr + " " + v.A.Host + v.A.Path + "+" + v.B.Host + v.B.Path
		}
		return out
	}
	// Host b's rule asks 50ms, the others' 10ms: the gap owed is the next request's host's.
	gap := func(_, next Request) time.Duration {
		if next.Host == "b" {
			return 50 * time.Millisecond
		}
		return 10 * time.Millisecond
	}
	tests := []struct {
		name               string
		reqs               []Request
		overlaps, tooClose []string
	}{
		{name: "hosts on one address, spaced", reqs: []Request{rqa("a", "ip1", "/1", 0, 10), rqa("b", "ip1", "/1", 60, 70), rqa("a", "ip1", "/2", 80, 90)}},
		{name: "hosts on two addresses at once", reqs: []Request{rqa("a", "ip1", "/1", 0, 10), rqa("b", "ip2", "/1", 0, 10)}},
		{
			name:     "two hosts in flight on one address",
			reqs:     []Request{rqa("a", "ip1", "/1", 0, 10), rqa("b", "ip1", "/1", 5, 15)},
			overlaps: []string{"ip1 a/1+b/1"},
			tooClose: []string{"ip1 a/1+b/1"},
		},
		{
			name:     "a gap below the next host's rule",
			reqs:     []Request{rqa("a", "ip1", "/1", 0, 10), rqa("b", "ip1", "/1", 30, 40), rqa("c", "ip1", "/1", 55, 60)},
			tooClose: []string{"ip1 a/1+b/1"},
		},
		{
			name: "one host moving between addresses",
			reqs: []Request{rqa("a", "ip1", "/1", 0, 10), rqa("a", "ip2", "/2", 12, 20)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := addrPairs(OverlapsByAddr(tt.reqs)); strings.Join(got, ",") != strings.Join(tt.overlaps, ",") {
				t.Errorf("OverlapsByAddr = %v, want %v", got, tt.overlaps)
			}
			if got := addrPairs(GapsByAddr(tt.reqs, gap)); strings.Join(got, ",") != strings.Join(tt.tooClose, ",") {
				t.Errorf("GapsByAddr = %v, want %v", got, tt.tooClose)
			}
		})
	}
	v := OverlapsByAddr([]Request{rqa("a", "ip1", "/1", 0, 10), rqa("b", "ip1", "/1", 5, 15)})[0]
	if s := v.String(); !strings.HasPrefix(s, "address ip1: a/1 ") || !strings.Contains(s, " and b/1 ") {
		t.Errorf("String() = %q", s)
	}
}
