package robots

import "testing"

// TestUserAgentToken: the robots.txt product token a site policy's User-Agent is read for.
func TestUserAgentToken(t *testing.T) {
	tests := []struct{ ua, want string }{
		{"AcmeBot/2.0 (+https://acme.example/bot)", "acmebot"},
		{"acme_bot", "acme_bot"},
		{"Mozilla/5.0 (compatible; AcmeBot/2.0; +https://acme.example/bot)", "acmebot"},
		{"Mozilla/5.0 (compatible;Googlebot/2.1)", "googlebot"},
		{"Mozilla/5.0 (X11; Linux x86_64) Chrome/120", ""},
		{"*", ""},
		{"2bot", ""},
	}
	for _, tt := range tests {
		t.Run(tt.ua, func(t *testing.T) {
			if got := UserAgentToken(tt.ua); got != tt.want {
				t.Errorf("UserAgentToken(%q) = %q, want %q", tt.ua, got, tt.want)
			}
		})
	}
}
