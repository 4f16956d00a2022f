package connect

import "strings"

// RedactURLs hides the secrets in a comma-separated server list, so that errors
// never carry one: a password becomes xxx (the user name stays), a token xxx. It
// works on the text, as url.Parse reads "user:pass@host:4222" (no scheme) as an
// opaque URL and would leave the password in place.
func RedactURLs(urls string) string {
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
		user := "xxx" // a token
		if name, _, ok := strings.Cut(p[start:at], ":"); ok {
			user = name + ":xxx"
		}
		parts[i] = p[:start] + user + p[at:]
	}
	return strings.Join(parts, ",")
}
