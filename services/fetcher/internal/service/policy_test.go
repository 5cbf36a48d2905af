package service

import "testing"

// TestAgentToken: the robots.txt product token a policy's User-Agent is matched by.
func TestAgentToken(t *testing.T) {
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
			if got := AgentToken(tt.ua); got != tt.want {
				t.Errorf("AgentToken(%q) = %q, want %q", tt.ua, got, tt.want)
			}
		})
	}
}
