// Package freeport picks free loopback TCP ports for the servers the tests and `make run`
// start: the services' HTTP listeners, Redis, NATS cluster routes and clients, SeaweedFS.
//
// A port is free when picked but bound only later, by another process or once a service
// has connected to its stores. Two holes follow, and the package closes what it can:
//   - A port from the kernel's ephemeral range (what listening on :0 gives) may meanwhile
//     become the local port of an outgoing connection, the server's own or a neighbour's,
//     and the bind then fails. So ports are picked below that range when it is known.
//   - A port picked but not yet bound looks free to the next pick. So no port is given
//     twice in one process.
//
// Another process may still bind a port between the pick and the bind; callers start
// again on a new port when their server reports the port in use.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the first port picked below the ephemeral range: under it lie the ports
// well-known services are configured on.
const lowest = 10000

// Port returns a port free on 127.0.0.1 now and never returned before by this process.
func Port() (int, error) {
	given.Lock()
	defer given.Unlock()
	if lo, ok := ephemeralLow(); ok && lo > lowest+1000 {
		for range 64 {
			port := lowest + rand.IntN(lo-lowest)
			if given.ports[port] {
				continue
			}
			if ln, err := net.Listen("tcp", addr(port)); err == nil {
				ln.Close()
				given.ports[port] = true
				return port, nil
			}
		}
	}
	// A port from :0 is free too, but not held once closed, so the kernel may give it
	// again: skip those given before.
	for range 64 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("freeport: %w", err)
		}
		ln.Close()
		if port := ln.Addr().(*net.TCPAddr).Port; !given.ports[port] {
			given.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("freeport: 64 picks were all ports given before")
}

// Ports returns n distinct ports from Port.
func Ports(n int) ([]int, error) {
	out := make([]int, 0, n)
	for range n {
		p, err := Port()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Addr returns "127.0.0.1:port" for a port from Port.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return addr(p), nil
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// given holds the ports returned, for the life of the process.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux).
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(f[0])
	return n, err == nil
}
