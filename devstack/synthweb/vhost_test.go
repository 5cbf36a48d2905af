package synthweb

import (
	"context"
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
	cfg.VirtualHosts = cfg.Hosts + 1
	if _, err := Start(context.Background(), cfg); err == nil {
		t.Fatal("more virtual hosts than ordinary hosts accepted")
	}
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
