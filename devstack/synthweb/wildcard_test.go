package synthweb

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A web of virtual hosts on 0.0.0.0 (as in a container, reached by name from others)
// answers on any local address and tells the hosts apart by the Host header; its log
// handler serves the same log and expectation the in-process tests read.
func TestVirtualHostsOnEveryAddress(t *testing.T) {
	cfg := smallConfig()
	cfg.Hosts, cfg.VirtualHosts, cfg.Special, cfg.BaseIP = 2, 2, false, "0.0.0.0"
	w := startWeb(t, cfg)
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", w.Port()), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = fmt.Sprintf("vhost2.synth.test:%d", w.Port())
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / on vhost2 through 127.0.0.1: %s, want 200", resp.Status)
	}

	srv := httptest.NewServer(w.LogHandler(5))
	defer srv.Close()
	lr, err := http.Get(srv.URL + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer lr.Body.Close()
	var snap Snapshot
	if err := json.NewDecoder(lr.Body).Decode(&snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Requests) != 1 || snap.Requests[0].Host != "vhost2.synth.test" || snap.Requests[0].Path != "/" || snap.Requests[0].Remote != "127.0.0.1" {
		t.Fatalf("log %+v, want one request of / on vhost2.synth.test from 127.0.0.1", snap.Requests)
	}
	home := w.Origin("vhost2.synth.test") + "/"
	if len(snap.Seeds) != 2 || !snap.Expected.Fetch[home] {
		t.Fatalf("seeds %v, expected fetch has %s: %v; want 2 seeds and the home page", snap.Seeds, home, snap.Expected.Fetch[home])
	}

	cfg.Hosts, cfg.VirtualHosts = 3, 2
	if _, err := Start(t.Context(), cfg); err == nil {
		t.Fatal("Start with a host of its own on 0.0.0.0 succeeded, want an error")
	}
}
