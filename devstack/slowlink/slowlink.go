// Package slowlink relays TCP connections through a link that holds what the client sends
// for a while before passing it on, while what the server sends comes back at once. A
// NATS pull request then reaches the server later than its client timed it from, as on a
// loaded machine or a long path: the tests of every pull loop run over it.
package slowlink

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Start listens on a loopback port and relays each connection to target, each chunk the
// client sends held for delay. It returns the address to dial; the listener and every
// connection are closed when the test ends.
func Start(t testing.TB, target string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("slowlink: listen: %v", err)
	}
	var (
		conns  sync.WaitGroup
		mu     sync.Mutex
		open   []net.Conn
		closed bool
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	type chunk struct {
		b  []byte
		at time.Time
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, s)
			if closed {
				c.Close()
				s.Close()
			}
			mu.Unlock()
			queue := make(chan chunk, 1024)
			conns.Add(3)
			go func() { // server → client, at once
				defer conns.Done()
				io.Copy(c, s)
				c.Close()
			}()
			go func() { // client → queue
				defer conns.Done()
				defer close(queue)
				for {
					b := make([]byte, 32<<10)
					n, err := c.Read(b)
					if n > 0 {
						queue <- chunk{b[:n], time.Now().Add(delay)}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // queue → server, each chunk delay after it was read
				defer conns.Done()
				defer s.Close()
				for ch := range queue {
					time.Sleep(time.Until(ch.at)) // the link's delay, the thing simulated
					if _, err := s.Write(ch.b); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
