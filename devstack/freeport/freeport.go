// Package freeport picks free loopback TCP ports for the servers the tests start.
package freeport

import (
	"fmt"
	"net"
)

// Ports returns n distinct ports free on 127.0.0.1 now. Each is held until all are picked,
// so that none is given twice; another process may still take one before the caller's
// server binds it, which callers that can retry their start accept.
func Ports(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("freeport: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
