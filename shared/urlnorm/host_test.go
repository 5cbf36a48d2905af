package urlnorm

import "testing"

func TestHostOrigin(t *testing.T) {
	h, err := Host("http://Example.com:8080/x")
	if err != nil || h != "example.com" {
		t.Fatalf("Host = %q, %v", h, err)
	}
	o, err := Origin("http://example.com:8080/x")
	if err != nil || o != "http://example.com:8080" {
		t.Fatalf("Origin = %q, %v", o, err)
	}
}
