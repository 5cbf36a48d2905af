package redisx

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles are the PEM files a rediss:// connection uses beyond the URL: roots that verify
// the server instead of the system's, and a client certificate for servers that verify
// clients (tls-auth-clients). Empty fields are not used.
type TLSFiles struct {
	CA, Cert, Key string
}

// Set reports whether any file is given.
func (f TLSFiles) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// apply adds the files to cfg, the TLS configuration go-redis made from a rediss:// URL.
func (f TLSFiles) apply(cfg *tls.Config) error {
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return fmt.Errorf("%w: CA: %w", ErrURL, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: CA %s holds no PEM certificate", ErrURL, f.CA)
		}
		cfg.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return fmt.Errorf("%w: a client certificate needs its key, and a key its certificate", ErrURL)
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return fmt.Errorf("%w: client certificate: %w", ErrURL, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return nil
}

// Option changes how Open and Connect make a client.
type Option func(*openOptions)

type openOptions struct{ tls TLSFiles }

// WithTLS makes a rediss:// client use f. A URL without TLS given files is refused.
func WithTLS(f TLSFiles) Option { return func(o *openOptions) { o.tls = f } }
