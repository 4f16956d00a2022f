package connect

import "strings"

// redactURLs hides the user information (user:password@ or token@) of every URL
// in a comma-separated server list, so that errors never carry a secret. It works
// on the text rather than on url.Parse, which reads "user:pass@host:4222" (no
// scheme) as an opaque URL and would leave the password in place.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		at := strings.LastIndex(p, "@")
		if at < 0 {
			parts[i] = p
			continue
		}
		start := 0
		if s := strings.Index(p, "://"); s >= 0 && s < at {
			start = s + len("://")
		}
		parts[i] = p[:start] + "REDACTED" + p[at:]
	}
	return strings.Join(parts, ",")
}
