package itest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/testwait"
)

// pki is a CA and the files it signed, written as PEM in a temporary directory: nothing
// with a private key is committed.
type pki struct {
	dir           string
	CA, Cert, Key string // the CA, and a certificate for 127.0.0.1 (server and client)
	OtherCA       string // a CA that signed nothing here
	caCert        *x509.Certificate
	caKey         *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.caCert, p.caKey, p.CA = p.ca(t, "ca")
	_, _, p.OtherCA = p.ca(t, "other-ca")
	p.Cert, p.Key = p.leaf(t, "leaf")
	return p
}

func (p *pki) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *pki) ca(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, p.write(t, name+".pem", "CERTIFICATE", der)
}

func (p *pki) leaf(t *testing.T, name string) (certFile, keyFile string) {
	return p.leafFor(t, name, net.IPv4(127, 0, 0, 1))
}

// leafFor is a certificate for ip alone, signed by the CA.
func (p *pki) leafFor(t *testing.T, name string, ip net.IP) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{ip},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

// A NATS server with TLS that verifies clients and one nkey user refuses, at once and
// saying so, a service missing any of: the CA that verifies it, a client certificate, the
// nkey; with all three (read from TRAWL_* settings) the service connects.
func TestNATSTLSAndNKey(t *testing.T) {
	t.Parallel()
	pk := newPKI(t)
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pk.Cert, KeyFile: pk.Key, CaFile: pk.CA, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		TLS: true, TLSVerify: true, TLSConfig: tc, TLSTimeout: 2,
		Nkeys: []*server.NkeyUser{{Nkey: pub}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server with TLS did not start")
	}
	url := "tls://" + srv.Addr().String()
	settings := func(t *testing.T, extra map[string]string) envconfig.Conn {
		t.Helper()
		m := map[string]string{"TRAWL_NATS_URL": url}
		for k, v := range extra {
			m[k] = v
		}
		r := envconfig.FromMap(m)
		c := envconfig.LoadConn(r)
		if err := errors.Join(r.Err(), c.Validate(nil)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	all := map[string]string{"TRAWL_NATS_TLS_CA": pk.CA, "TRAWL_NATS_TLS_CERT": pk.Cert, "TRAWL_NATS_TLS_KEY": pk.Key, "TRAWL_NATS_NKEY": seedFile}
	without := func(drop string, set ...string) map[string]string {
		m := map[string]string{}
		for k, v := range all {
			if !strings.HasPrefix(k, drop) {
				m[k] = v
			}
		}
		for i := 0; i+1 < len(set); i += 2 {
			m[set[i]] = set[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{"nothing", nil, false},
		{"system roots", without("TRAWL_NATS_TLS_CA"), false},
		{"another CA", without("TRAWL_NATS_TLS_CA", "TRAWL_NATS_TLS_CA", pk.OtherCA), false},
		{"no client certificate", without("TRAWL_NATS_TLS_", "TRAWL_NATS_TLS_CA", pk.CA, "TRAWL_NATS_NKEY", seedFile), false},
		{"no nkey", without("TRAWL_NATS_NKEY"), false},
		{"another nkey", without("TRAWL_NATS_NKEY", "TRAWL_NATS_NKEY", otherFile), false},
		{"all", all, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := settings(t, tc.env)
			opts, err := c.NATSOptions()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
			defer cancel()
			nc, _, err := natsx.Connect(ctx, c.NATSURL, "itest", slog.New(slog.DiscardHandler), opts...)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				if err := nc.FlushWithContext(ctx); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, natsx.ErrRefused) {
				t.Fatalf("Connect = %v, want ErrRefused", err)
			}
			if ctx.Err() != nil {
				t.Error("refused only when the context ended")
			}
		})
	}
}

// Redis with TLS that verifies clients: a rediss:// service without the CA or without a
// client certificate is refused at once, saying so; with TRAWL_REDIS_TLS_* it connects.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	pk := newPKI(t)
	srv := redisproc.StartT(t, redisproc.Options{Ephemeral: true, Args: []string{
		"--tls-cert-file", pk.Cert, "--tls-key-file", pk.Key,
		"--tls-ca-cert-file", pk.CA, "--tls-auth-clients", "yes",
	}, Ports: 1, PortArgs: func(p []int) []string { return []string{"--tls-port", strconv.Itoa(p[0])} }})
	url := fmt.Sprintf("rediss://127.0.0.1:%d/0", srv.Ports()[0])
	all := map[string]string{"TRAWL_REDIS_TLS_CA": pk.CA, "TRAWL_REDIS_TLS_CERT": pk.Cert, "TRAWL_REDIS_TLS_KEY": pk.Key}
	for _, tc := range []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{"system roots", nil, false},
		{"another CA", map[string]string{"TRAWL_REDIS_TLS_CA": pk.OtherCA, "TRAWL_REDIS_TLS_CERT": pk.Cert, "TRAWL_REDIS_TLS_KEY": pk.Key}, false},
		{"no client certificate", map[string]string{"TRAWL_REDIS_TLS_CA": pk.CA}, false},
		{"all", all, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]string{"TRAWL_REDIS_URL": url}
			for k, v := range tc.env {
				m[k] = v
			}
			r := envconfig.FromMap(m)
			c := envconfig.LoadConn(r)
			if err := errors.Join(r.Err(), c.Validate(nil)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
			defer cancel()
			rdb, err := redisx.Connect(ctx, c.RedisURL, slog.New(slog.DiscardHandler), c.RedisOptions()...)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				defer rdb.Close()
				if err := rdb.Set(ctx, "tls-check", "1", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, redisx.ErrRefused) {
				t.Fatalf("Connect = %v, want ErrRefused", err)
			}
			if ctx.Err() != nil {
				t.Error("refused only when the context ended")
			}
		})
	}
}

// The credential and TLS settings are checked before anything connects.
func TestConnCredentialSettings(t *testing.T) {
	t.Parallel()
	pk := newPKI(t)
	missing := filepath.Join(t.TempDir(), "absent.pem")
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"none", map[string]string{}, ""},
		{"all NATS files", map[string]string{"TRAWL_NATS_TLS_CA": pk.CA, "TRAWL_NATS_TLS_CERT": pk.Cert, "TRAWL_NATS_TLS_KEY": pk.Key, "TRAWL_NATS_CREDS": pk.Key}, ""},
		{"missing creds", map[string]string{"TRAWL_NATS_CREDS": missing}, "TRAWL_NATS_CREDS"},
		{"missing nkey", map[string]string{"TRAWL_NATS_NKEY": missing}, "TRAWL_NATS_NKEY"},
		{"creds and nkey", map[string]string{"TRAWL_NATS_CREDS": pk.Key, "TRAWL_NATS_NKEY": pk.Key}, "set one, not both"},
		{"NATS cert without key", map[string]string{"TRAWL_NATS_TLS_CERT": pk.Cert}, "TRAWL_NATS_TLS_KEY: set both"},
		{"missing NATS CA", map[string]string{"TRAWL_NATS_TLS_CA": missing}, "TRAWL_NATS_TLS_CA"},
		{"Redis key without cert", map[string]string{"TRAWL_REDIS_URL": "rediss://127.0.0.1:6380/0", "TRAWL_REDIS_TLS_KEY": pk.Key}, "TRAWL_REDIS_TLS_KEY: set both"},
		{"Redis TLS on redis://", map[string]string{"TRAWL_REDIS_TLS_CA": pk.CA}, "not a rediss://"},
		{"missing Redis CA", map[string]string{"TRAWL_REDIS_URL": "rediss://127.0.0.1:6380/0", "TRAWL_REDIS_TLS_CA": missing}, "TRAWL_REDIS_TLS_CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := envconfig.LoadConn(envconfig.FromMap(tc.env)).Validate(nil)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
