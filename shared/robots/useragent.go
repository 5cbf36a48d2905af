package robots

import "strings"

// UserAgentToken is the product token robots.txt is read for when requests are made
// with the User-Agent value ua (a site policy's user_agent): its leading product token
// ("ExampleBot/2.0 (+https://…)" → "examplebot"), or, for a value in the browser form
// "Mozilla/5.0 (compatible; ExampleBot/2.0; …)", the first token after "compatible;", the
// one the crawler is known by. "" when there is none: the caller's own agent applies.
func UserAgentToken(ua string) string {
	tok := ProductToken(ua)
	if tok != "mozilla" {
		if tok == "*" {
			return ""
		}
		return tok
	}
	_, rest, ok := strings.Cut(strings.ToLower(ua), "compatible;")
	if !ok {
		return ""
	}
	if t := ProductToken(rest); t != "*" {
		return t
	}
	return ""
}
