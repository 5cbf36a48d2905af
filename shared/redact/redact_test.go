package redact

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"no credentials", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"user and password", "nats://trawl:s3cret@nats:4222", "nats://trawl:xxxxx@nats:4222"},
		{"token", "nats://s3cret@nats:4222", "nats://xxxxx@nats:4222"},
		{"empty user info", "nats://:@nats:4222", "nats://:@nats:4222"},
		{"password only", "redis://:s3cret@redis:6379/0", "redis://:xxxxx@redis:6379/0"},
		{"bare percent", "redis://:s3%cret@redis:6379/0", "redis://:xxxxx@redis:6379/0"},
		{"slash, question mark and hash", "redis://u:s3/c?r#et@redis:6379/0?dial_timeout=1s", "redis://u:xxxxx@redis:6379/0?dial_timeout=1s"},
		{"at sign", "redis://u:s3@cret@redis:6379", "redis://u:xxxxx@redis:6379"},
		{"colon in the password", "redis://u:s3:cret@redis:6379", "redis://u:xxxxx@redis:6379"},
		{"list", "nats://a:s3cret@n1:4222, nats://n2:4222,nats://b:t0ken@n3:4222", "nats://a:xxxxx@n1:4222, nats://n2:4222,nats://b:xxxxx@n3:4222"},
		{"cluster seeds", "rediss-cluster://u:s3cret@r1:6379,r2:6379/0", "rediss-cluster://u:xxxxx@r1:6379,r2:6379/0"},
		{"no scheme", "u:s3cret@redis:6379", "u:xxxxx@redis:6379"},
		{"one slash", "redis:/u:s3cret@redis:6379", "redis:xxxxx@redis:6379"},
		{"not a URL", "localhost:6379", "localhost:6379"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := URL(tc.in)
			if got != tc.want {
				t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
			}
			for _, secret := range []string{"s3", "cret", "t0ken"} {
				if strings.Contains(got, secret) {
					t.Errorf("URL(%q) = %q keeps %q", tc.in, got, secret)
				}
			}
		})
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"quoted", `parse "redis://u:s3%cret@h:1/0": invalid URL escape`, `parse "redis://u:xxxxx@h:1/0": invalid URL escape`},
		{"two URLs", "connect nats://a:s3cret@n1:4222 then redis://:t0ken@r:6379", "connect nats://a:xxxxx@n1:4222 then redis://:xxxxx@r:6379"},
		{"an address after the URL", "nats://n1:4222: mail admin@example.org", "nats://n1:4222: mail admin@example.org"},
		{"nothing", "dial tcp 127.0.0.1:4222: connection refused", "dial tcp 127.0.0.1:4222: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text(tc.in); got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestError(t *testing.T) {
	if Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
	err := fmt.Errorf("connect nats://u:s3cret@h:4222: %w", io.EOF)
	got := Error(err)
	if strings.Contains(got.Error(), "s3cret") {
		t.Errorf("Error = %q keeps the password", got)
	}
	if !errors.Is(got, io.EOF) {
		t.Error("the redacted error no longer wraps the original")
	}
	plain := errors.New("no URL here")
	if Error(plain) != plain {
		t.Error("an error with nothing to hide was wrapped")
	}
}
