package inspect

import "github.com/trawl/trawl/shared/urlnorm"

// IsTrap is the parser's trap rule: a URL whose path repeats one segment three or more
// times is never followed.
func IsTrap(u string) bool { return urlnorm.RepeatsSegment(u) }
