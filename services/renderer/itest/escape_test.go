package itest

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// escapeAddr is a loopback address of the test's own listeners, outside TRAWL_ALLOW_CIDRS:
// Trawl's own client may never dial it, so anything that reaches it came from the browser.
const escapeAddr = "127.0.8.3"

// listeners are a UDP socket and a TCP listener on escapeAddr that log what reaches them.
type listeners struct {
	udp *net.UDPConn
	tcp net.Listener
	mu  sync.Mutex
	got []string
}

func listen(t *testing.T) *listeners {
	t.Helper()
	l := &listeners{}
	var err error
	if l.udp, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(escapeAddr)}); err != nil {
		t.Fatalf("listen udp on %s: %v", escapeAddr, err)
	}
	if l.tcp, err = net.Listen("tcp", escapeAddr+":0"); err != nil {
		t.Fatalf("listen tcp on %s: %v", escapeAddr, err)
	}
	t.Cleanup(func() { l.udp.Close(); l.tcp.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := l.udp.ReadFromUDP(buf)
			if err != nil {
				return
			}
			l.note(fmt.Sprintf("udp datagram of %d bytes from %s", n, from))
		}
	}()
	go func() {
		for {
			c, err := l.tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 200)
				n, _ := c.Read(buf)
				first, _, _ := strings.Cut(string(buf[:n]), "\r\n")
				l.note(fmt.Sprintf("tcp connection from %s: %q", c.RemoteAddr(), first))
			}()
		}
	}()
	return l
}

func (l *listeners) note(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, s)
}

func (l *listeners) log() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func (l *listeners) udpPort() int { return l.udp.LocalAddr().(*net.UDPAddr).Port }
func (l *listeners) tcpPort() int { return l.tcp.Addr().(*net.TCPAddr).Port }

// escapePage tries every way a page has to open a connection of its own, against the
// listeners, then asks for /done (answered through Trawl) once each try has had its
// chance: the test's signal that the page's scripts ran. Until then it holds a request to
// hold open, so the renderer does not take the page (and close it) on a quiet network.
func escapePage(u, p int, hold string) string {
	r := strings.NewReplacer("{UDP}", fmt.Sprint(u), "{TCP}", fmt.Sprint(p), "{ADDR}", escapeAddr, "{HOLD}", hold)
	return r.Replace(`<!doctype html><html><head>
<link rel="preconnect" href="http://{ADDR}:{TCP}">
<link rel="dns-prefetch" href="http://escape.test:{TCP}">
<link rel="prefetch" href="http://{ADDR}:{TCP}/prefetch">
<link rel="preload" as="fetch" href="http://{ADDR}:{TCP}/preload" crossorigin>
<script type="speculationrules">{"prefetch":[{"source":"list","urls":["http://{ADDR}:{TCP}/spec-prefetch"]}],
 "prerender":[{"source":"list","urls":["http://{ADDR}:{TCP}/spec-prerender"]}]}</script>
</head><body><div id="out"></div>
<a id="dl" href="http://{ADDR}:{TCP}/download" download="x.bin">download</a>
<a id="ping" href="#here" ping="http://{ADDR}:{TCP}/ping">ping</a>
<img src="http://{ADDR}:{TCP}/img">
<iframe src="http://{ADDR}:{TCP}/frame"></iframe>
<script>
// A request in flight keeps the renderer from taking the DOM before the tries are over.
fetch('{HOLD}').catch(() => {});
const tries = {};
const note = (k, v) => { tries[k] = String(v); };
const within = (ms, p) => Promise.race([p, new Promise(r => setTimeout(r, ms))]);
async function webrtc() {
  if (typeof RTCPeerConnection !== 'function') { note('webrtc', 'no api'); return; }
  const pc = new RTCPeerConnection({iceServers: [
    {urls: 'stun:{ADDR}:{UDP}'},
    {urls: 'turn:{ADDR}:{UDP}?transport=udp', username: 'u', credential: 'c'},
    {urls: 'turn:{ADDR}:{TCP}?transport=tcp', username: 'u', credential: 'c'}]});
  pc.createDataChannel('x');
  await pc.setLocalDescription(await pc.createOffer());
  await within(3000, new Promise(r => { pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === 'complete') r(); }; }));
  note('webrtc', pc.iceGatheringState);
}
async function websocket(url, key) {
  if (typeof WebSocket !== 'function') { note(key, 'no api'); return; }
  await within(3000, new Promise(r => { const ws = new WebSocket(url); ws.onopen = () => { note(key, 'open'); r(); }; ws.onerror = () => { note(key, 'error'); r(); }; }));
}
async function webtransport() {
  if (typeof WebTransport !== 'function') { note('webtransport', 'no api'); return; }
  try { const wt = new WebTransport('https://{ADDR}:{UDP}/wt'); await within(3000, wt.ready); note('webtransport', 'ready'); }
  catch (e) { note('webtransport', e); }
}
async function eventsource() {
  await within(3000, new Promise(r => { const es = new EventSource('http://{ADDR}:{TCP}/es'); es.onerror = () => { note('eventsource', 'error'); es.close(); r(); }; }));
}
async function sharedworker() {
  if (typeof SharedWorker !== 'function') { note('sharedworker', 'no api'); return; }
  try {
    const src = "onconnect = e => { fetch('http://{ADDR}:{TCP}/sharedworker').catch(() => {}); try { new WebSocket('ws://{ADDR}:{TCP}/sharedworker-ws'); } catch (x) {} e.ports[0].postMessage('ok'); };";
    const w = new SharedWorker('data:text/javascript,' + encodeURIComponent(src));
    await within(2000, new Promise(r => { w.port.onmessage = r; }));
    note('sharedworker', 'ran');
  } catch (e) { note('sharedworker', e); }
}
async function worker() {
  const src = "fetch('http://{ADDR}:{TCP}/worker').catch(() => {}); try { new WebSocket('ws://{ADDR}:{TCP}/worker-ws'); } catch (x) {} postMessage('ok');";
  const w = new Worker(URL.createObjectURL(new Blob([src], {type: 'text/javascript'})));
  await within(2000, new Promise(r => { w.onmessage = r; }));
  note('worker', 'ran');
}
async function serviceworker() {
  note('serviceworker', navigator.serviceWorker ? 'api' : 'no api');
}
async function beacons() {
  note('beacon', navigator.sendBeacon('http://{ADDR}:{TCP}/beacon', 'x'));
  await fetch('http://{ADDR}:{TCP}/keepalive', {method: 'POST', body: 'x', keepalive: true, mode: 'no-cors'}).catch(e => note('keepalive', e));
  document.getElementById('ping').click();
  try { const w = window.open('http://{ADDR}:{TCP}/popup'); note('popup', w ? 'opened' : 'refused'); } catch (e) { note('popup', e); }
}
(async () => {
  for (const [k, f] of Object.entries({webrtc, ws: () => websocket('ws://{ADDR}:{TCP}/ws', 'ws'), wsname: () => websocket('ws://escape.test:{TCP}/ws', 'wsname'),
      webtransport, eventsource, sharedworker, worker, serviceworker, beacons})) {
    try { await within(5000, f()); } catch (e) { note(k, 'threw ' + e); }
  }
  document.getElementById('out').textContent = JSON.stringify(tries);
  document.body.setAttribute('data-tried', '1');
  await fetch('/done').catch(() => {});
})();
</script></body></html>`)
}

// A page's own ways to the network — WebRTC (STUN and TURN over UDP and TCP), WebSocket,
// WebTransport, EventSource, beacons and keepalive fetches, pings, downloads, popups,
// workers, preconnect, prefetch and speculation rules — reach nothing: no datagram and
// no connection leaves the browser except through Trawl's interception.
func TestRenderNoOwnConnections(t *testing.T) {
	st := newStack(t)
	l := listen(t)
	done := make(chan struct{})
	var once sync.Once
	s := newSite(t, map[string]http.HandlerFunc{
		"localhost/robots.txt": serve("text/plain", ""),
		"b.test/robots.txt":    serve("text/plain", ""),
		"localhost/done": func(w http.ResponseWriter, r *http.Request) {
			once.Do(func() { close(done) })
			w.WriteHeader(http.StatusNoContent)
		},
		// Another host than /done's: a host has one request in flight at a time.
		"b.test/hold": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-done:
			case <-time.After(waitFor):
			}
			w.WriteHeader(http.StatusNoContent)
		},
	})
	// The page is on localhost, a secure context, so that the APIs kept to those
	// (WebTransport, service workers) are there to try. Only the site's address is allowed: Trawl's own client refuses escapeAddr, so the
	// listeners hear from the browser alone.
	st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("localhost", "b.test"), "TRAWL_ALLOW_CIDRS": "127.0.0.1/32"}))
	lease := st.publishTask(s.url("localhost", "/"), escapePage(l.udpPort(), l.tcpPort(), s.url("b.test", "/hold")))
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatalf("the page's scripts never finished (no /done); the listeners heard %v", l.log())
	}
	p := st.page(lease)
	if !strings.Contains(string(p.Body), `data-tried="1"`) {
		t.Errorf("the page's tries did not all run: %.300s", p.Body)
	}
	t.Logf("the page's view of its tries: %s", between(string(p.Body), `<div id="out">`, `</div>`))
	// A connection the browser started may land after the page was taken: listen a while
	// longer, ending as soon as anything arrives.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && len(l.log()) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if got := l.log(); len(got) > 0 {
		// Give what is in flight a moment to be counted, for a complete report.
		time.Sleep(500 * time.Millisecond)
		t.Errorf("the page's own connections left the browser:\n%s", strings.Join(l.log(), "\n"))
	}
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	out, _, _ := strings.Cut(rest, to)
	return out
}
