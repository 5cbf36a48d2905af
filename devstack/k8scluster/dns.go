package k8scluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// resolver is the cluster's DNS server, in place of CoreDNS: it answers the A records of
// the services (<service>.<namespace>.svc.cluster.local, with the pods' search path
// making short names work) and of Options.Aliases from the API server's list of services,
// read every second, and NXDOMAIN for every other name (the test's cluster reaches
// nothing outside). CoreDNS would be one more large build and image for the same answers.
type resolver struct {
	udp     net.PacketConn
	c       *Cluster
	aliases map[string]string
	mu      sync.Mutex
	names   map[string]net.IP // fully qualified, lower case, with the final dot
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

func startResolver(ctx context.Context, ip string, c *Cluster, aliases map[string]string) (*resolver, error) {
	pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, "53"))
	if err != nil {
		return nil, fmt.Errorf("k8scluster: the cluster's DNS server on %s:53: %w", ip, err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &resolver{udp: pc, c: c, aliases: aliases, names: map[string]net.IP{}, cancel: cancel}
	r.done.Add(2)
	go func() { defer r.done.Done(); r.watch(ctx) }()
	go func() { defer r.done.Done(); r.serve() }()
	return r, nil
}

func (r *resolver) close() {
	r.cancel()
	r.udp.Close()
	r.done.Wait()
}

// watch refreshes the names from the services every second until ctx ends.
func (r *resolver) watch(ctx context.Context) {
	for {
		if names, err := r.load(ctx); err == nil {
			r.mu.Lock()
			r.names = names
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (r *resolver) load(ctx context.Context) (map[string]net.IP, error) {
	body, err := r.c.get(ctx, "/api/v1/services")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name, Namespace string }
			Spec     struct{ ClusterIP string }
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	names := map[string]net.IP{}
	byRef := map[string]net.IP{}
	for _, s := range list.Items {
		ip := net.ParseIP(s.Spec.ClusterIP).To4()
		if ip == nil {
			continue
		}
		names[strings.ToLower(s.Metadata.Name+"."+s.Metadata.Namespace+".svc.cluster.local.")] = ip
		byRef[s.Metadata.Namespace+"/"+s.Metadata.Name] = ip
	}
	for name, ref := range r.aliases {
		if ip := byRef[ref]; ip != nil {
			names[strings.ToLower(strings.TrimSuffix(name, ".")+".")] = ip
		}
	}
	return names, nil
}

func (r *resolver) lookup(name string) net.IP {
	name = strings.ToLower(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ip := r.names[name]; ip != nil {
		return ip
	}
	for n, ip := range r.names {
		if strings.HasPrefix(n, ".") && strings.HasSuffix(name, n) {
			return ip
		}
	}
	return nil
}

func (r *resolver) serve() {
	buf := make([]byte, 1500)
	for {
		n, addr, err := r.udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp, err := r.answer(buf[:n]); err == nil {
			r.udp.WriteTo(resp, addr)
		}
	}
}

// answer builds the reply to one query: the A record when the name is known, an empty
// answer for its other types (AAAA, which resolvers ask beside A), NXDOMAIN otherwise.
func (r *resolver) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	ip := r.lookup(q.Name.String())
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if ip == nil {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if ip != nil && q.Type == dnsmessage.TypeA {
		var a [4]byte
		copy(a[:], ip)
		if err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: a}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
