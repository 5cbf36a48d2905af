package k8scluster

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's CA, the API server's serving certificate, the service accounts'
// signing key and the one admin token every component authenticates with (a test cluster:
// one identity in system:masters keeps the set-up to what the chart's test needs).
type pki struct {
	dir   string
	token string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// newPKI writes the files under dir, for an API server reached at the addresses ips.
func newPKI(dir string, ips []net.IP) (pki, error) {
	p := pki{dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, fmt.Errorf("k8scluster: %w", err)
	}
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return p, fmt.Errorf("k8scluster: %w", err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "trawl-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("k8scluster: CA: %w", err)
	}
	srvKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return p, fmt.Errorf("k8scluster: %w", err)
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips,
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, fmt.Errorf("k8scluster: %w", err)
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("k8scluster: serving certificate: %w", err)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return p, fmt.Errorf("k8scluster: %w", err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return p, fmt.Errorf("k8scluster: %w", err)
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return p, fmt.Errorf("k8scluster: %w", err)
	}
	p.token = hex.EncodeToString(tok)
	files := map[string][]byte{
		"ca.crt":        pemBlock("CERTIFICATE", caDER),
		"ca.key":        pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(caKey)),
		"apiserver.crt": pemBlock("CERTIFICATE", srvDER),
		"apiserver.key": pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(srvKey)),
		"sa.key":        pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)),
		"sa.pub":        pemBlock("PUBLIC KEY", saPub),
		"tokens.csv":    []byte(p.token + ",admin,admin,system:masters\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(p.path(name), b, 0o600); err != nil {
			return p, fmt.Errorf("k8scluster: %w", err)
		}
	}
	return p, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// kubeconfig is a kubeconfig for the admin identity at server.
func (p pki) kubeconfig(server string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: trawl
  cluster: {server: %q, certificate-authority: %q}
users:
- name: admin
  user: {token: %q}
contexts:
- name: trawl
  context: {cluster: trawl, user: admin}
current-context: trawl
`, server, p.path("ca.crt"), p.token)
}
