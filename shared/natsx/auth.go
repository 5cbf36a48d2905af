package natsx

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Auth are the credentials and TLS files a connection presents beyond what its URL
// carries (a user and password in the URL, tls:// for TLS with the system's roots).
// Empty fields are not used.
type Auth struct {
	Creds    string // a .creds file (user JWT and nkey seed): decentralised auth
	NKeySeed string // a file holding an nkey user's seed (SU…)
	TLSCA    string // PEM roots that verify the server, instead of the system's
	TLSCert  string // PEM client certificate, for servers that verify clients
	TLSKey   string // its PEM private key
}

// ErrAuth marks credentials or TLS files that cannot be used.
var ErrAuth = errors.New("natsx: bad NATS credentials")

// Options returns the nats.go options presenting a. A CA or a client certificate makes
// the connection require TLS.
func (a Auth) Options() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case a.Creds != "" && a.NKeySeed != "":
		return nil, fmt.Errorf("%w: a creds file and an nkey seed both given: use one", ErrAuth)
	case a.Creds != "":
		opts = append(opts, nats.UserCredentials(a.Creds))
	case a.NKeySeed != "":
		o, err := nats.NkeyOptionFromSeed(a.NKeySeed)
		if err != nil {
			return nil, fmt.Errorf("%w: nkey seed: %w", ErrAuth, err)
		}
		opts = append(opts, o)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return nil, fmt.Errorf("%w: a client certificate needs its key, and a key its certificate", ErrAuth)
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	return opts, nil
}
