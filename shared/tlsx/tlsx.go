// Package tlsx tells a TLS failure that retrying cannot fix (a certificate one side does
// not accept) from a server that is merely not there yet, for the connect paths of
// shared/natsx and shared/redisx.
package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
)

// Refused reports a TLS handshake that failed on a certificate: the server's, unverified
// by the client's roots or not for that name, or the client's, missing or refused by the
// server (its alert: "certificate required", "bad certificate", "unknown certificate
// authority"), or a server that wants TLS from a client that does not speak it.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
	)
	if errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &alert) {
		return true
	}
	// Some clients keep only the message of the handshake's error.
	msg := err.Error()
	for _, s := range []string{"x509: ", "tls: certificate required", "tls: bad certificate", "tls: unknown certificate", "secure connection required", "tls: first record does not look like a TLS handshake"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
