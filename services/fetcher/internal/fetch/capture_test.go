package fetch

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// rawServer answers each request on a connection with the next of replies, written as
// given, so that header case, order and repeats are the test's to choose.
func rawServer(t *testing.T, replies ...string) (url string, requests chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	requests = make(chan string, len(replies))
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		for _, reply := range replies {
			var req strings.Builder
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				req.WriteString(line)
				if line == "\r\n" {
					break
				}
			}
			requests <- req.String()
			if _, err := io.WriteString(conn, reply); err != nil {
				return
			}
		}
	}()
	return "http://" + ln.Addr().String(), requests
}

func TestCaptureVerbatim(t *testing.T) {
	page := []byte(strings.Repeat("<p>archived as sent</p>", 50))
	gz := gzipped(t, page)
	chunked := func(body []byte) string {
		var b strings.Builder
		for len(body) > 0 {
			n := min(len(body), 100)
			b.WriteString(strings.ToUpper(strconv.FormatInt(int64(n), 16)) + "\r\n")
			b.Write(body[:n])
			b.WriteString("\r\n")
			body = body[n:]
		}
		b.WriteString("0\r\n\r\n")
		return b.String()
	}
	cases := []struct {
		name     string
		head     string // the final head the server sends
		interim  string // a 1xx head sent before it
		wireBody string // body octets on the wire (chunked or not)
		wantRaw  []byte // body as received: content coding kept, transfer coding removed; nil = same as Body
		wantBody []byte
	}{
		{
			name:     "odd case and order, repeated field",
			head:     "HTTP/1.1 200 Fine Thanks\r\nx-Lower: a\r\nSet-Cookie: one=1\r\nContent-Type: text/html\r\nSet-Cookie: two=2\r\nContent-Length: " + itoa(len(page)) + "\r\n\r\n",
			wireBody: string(page),
			wantBody: page,
		},
		{
			name:     "gzip over chunked keeps the gzip octets without the chunks",
			head:     "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\nContent-Type: text/html\r\n\r\n",
			wireBody: chunked(gz),
			wantRaw:  gz,
			wantBody: page,
		},
		{
			name:     "an interim 103 is not the response",
			interim:  "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n",
			head:     "HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\n",
			wireBody: "gone",
			wantBody: []byte("gone"),
		},
		{
			name:     "bare LF line ends",
			head:     "HTTP/1.1 200 OK\nContent-Length: 2\n\n",
			wireBody: "ok",
			wantBody: []byte("ok"),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url, requests := rawServer(t, c.interim+c.head+c.wireBody)
			resp, err := New(testConfig("127.0.0.0/8")).Get(context.Background(), url+"/p?q=1")
			if err != nil {
				t.Fatal(err)
			}
			sent := <-requests
			if !resp.Verbatim {
				t.Error("HTTP/1.1 exchange not marked verbatim")
			}
			if string(resp.ResponseHead) != c.head {
				t.Errorf("response head\n%q\nwant\n%q", resp.ResponseHead, c.head)
			}
			if string(resp.RequestHead) != sent {
				t.Errorf("request head\n%q\nthe server read\n%q", resp.RequestHead, sent)
			}
			if resp.RemoteIP != "127.0.0.1" {
				t.Errorf("remote IP %q", resp.RemoteIP)
			}
			if !bytes.Equal(resp.Body, c.wantBody) {
				t.Errorf("body %q, want %q", resp.Body, c.wantBody)
			}
			if !bytes.Equal(resp.Raw, c.wantRaw) {
				t.Errorf("raw body %d octets, want %d", len(resp.Raw), len(c.wantRaw))
			}
		})
	}
}

// TestKeepRaw: a gzip body's octets as received are kept only when KeepRaw says so (the
// fetcher asks while an archive is written); the body is decoded either way, and Decoded
// says it is not the body as received.
func TestKeepRaw(t *testing.T) {
	page := []byte(strings.Repeat("<p>kept or not</p>", 50))
	gz := gzipped(t, page)
	head := "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: " + itoa(len(gz)) + "\r\n\r\n"
	for _, keep := range []bool{true, false} {
		t.Run(strconv.FormatBool(keep), func(t *testing.T) {
			url, _ := rawServer(t, head+string(gz))
			cfg := testConfig("127.0.0.0/8")
			cfg.KeepRaw = func() bool { return keep }
			resp, err := New(cfg).Get(context.Background(), url+"/")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(resp.Body, page) || !resp.Decoded {
				t.Fatalf("body %d octets, decoded %v", len(resp.Body), resp.Decoded)
			}
			if want := map[bool][]byte{true: gz}[keep]; !bytes.Equal(resp.Raw, want) || (resp.Raw == nil) == keep {
				t.Errorf("raw %d octets (nil %v), want %d", len(resp.Raw), resp.Raw == nil, len(want))
			}
		})
	}
}

// TestCaptureKeepAlive: the second exchange on a kept-alive connection records its own
// request and head, not the first one's.
func TestCaptureKeepAlive(t *testing.T) {
	first := "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX-N: 1\r\n\r\n"
	second := "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX-N: 2\r\n\r\n"
	url, requests := rawServer(t, first+"a", second+"b")
	c := New(testConfig("127.0.0.0/8"))
	for i, want := range []string{first, second} {
		resp, err := c.Get(context.Background(), url+"/"+itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if sent := <-requests; string(resp.RequestHead) != sent {
			t.Errorf("exchange %d: request head %q, server read %q", i, resp.RequestHead, sent)
		}
		if string(resp.ResponseHead) != want {
			t.Errorf("exchange %d: head %q, want %q", i, resp.ResponseHead, want)
		}
	}
}

// TestCaptureHTTP2Rebuilt: HTTP/2 has no header text; the heads are rebuilt in HTTP/1.1
// form and marked as such.
func TestCaptureHTTP2Rebuilt(t *testing.T) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-B", "2")
		w.Header().Set("X-A", "1")
		w.WriteHeader(http.StatusTeapot)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	cfg := testConfig("127.0.0.0/8")
	cfg.TLSConfig = s.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	resp, err := New(cfg).Get(context.Background(), s.URL+"/x")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Proto != "HTTP/2.0" || resp.Verbatim {
		t.Fatalf("proto %q verbatim %v", resp.Proto, resp.Verbatim)
	}
	head := string(resp.ResponseHead)
	if !strings.HasPrefix(head, "HTTP/1.1 418 I'm a teapot\r\n") || !strings.Contains(head, "X-A: 1\r\nX-B: 2\r\n") || !strings.HasSuffix(head, "\r\n\r\n") {
		t.Errorf("rebuilt head %q", head)
	}
	if req := string(resp.RequestHead); !strings.HasPrefix(req, "GET /x HTTP/1.1\r\nHost: ") || !strings.Contains(req, "User-Agent: trawl-test/1\r\n") {
		t.Errorf("rebuilt request %q", req)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
