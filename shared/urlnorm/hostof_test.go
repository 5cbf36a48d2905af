package urlnorm

import "testing"

func TestHostOf(t *testing.T) {
	tests := map[string]string{
		"http://Example.com/a":        "example.com",
		"https://u:p@h.example:8443/": "h.example",
		"http://[2001:db8::1]:80/x":   "2001:db8::1",
		"http://[2001:db8::1/x":       "",
		"http://h?q":                  "h",
		"nonsense":                    "",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			if got := HostOf(in); got != want {
				t.Errorf("HostOf(%q) = %q, want %q", in, got, want)
			}
		})
	}
}

// The frontier's Lua router finds hosts by HostOf's rule (hostof in the scheduler's
// common.lua), so HostOf must agree with Host on every normalised URL, or a URL would be
// queued under the wrong host.
func TestHostOfAgreesWithHost(t *testing.T) {
	for _, raw := range []string{
		"http://Example.COM/a",
		"https://example.com:8443/a?b#c",
		"http://user:pw@example.com:81/",
		"http://a@b@example.com/",
		"http://[2001:DB8::1]:8080/x",
		"http://[::1]/",
		"http://127.0.0.1/",
		"http://xn--bcher-kva.example/",
		"http://bücher.example/",
		"https://example.com?x=1",
		"https://example.com#frag",
		"http://0x7f.1/",
		"http://example.com./",
		"http://under_score.example/",
	} {
		t.Run(raw, func(t *testing.T) {
			n, err := Normalize(raw)
			if err != nil {
				t.Fatalf("normalize: %v", err)
			}
			want, err := Host(n)
			if err != nil {
				t.Fatal(err)
			}
			if got := HostOf(n); got != want {
				t.Fatalf("HostOf(%q) = %q, Host = %q", n, got, want)
			}
		})
	}
}
