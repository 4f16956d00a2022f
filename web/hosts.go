package web

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// DNS rebinding: a page on another site whose name the attacker re-points at this
// machine (or at the service's address) is, to the browser, the same origin as
// the status page: Origin, Host and Sec-Fetch-Site all say same-origin, and the
// request comes from loopback, so neither http.CrossOriginProtection nor
// AllowLoopback tells it from the real page. What gives it away is the Host: the
// attacker's name, not one this service answers to. So the handler checks Host
// (Config.Hosts), before anything else when the names are listed, and before
// Authorize on every action when they are not.

// hostSet is Config.Hosts, parsed: names match any port, name:port that port.
type hostSet struct {
	names     map[string]bool // host, normalised
	hostPorts map[string]bool // host + ":" + port
}

// parseHosts reads Config.Hosts; the error names the entry at fault.
func parseHosts(list []string) (hostSet, error) {
	s := hostSet{names: map[string]bool{}, hostPorts: map[string]bool{}}
	for i, entry := range list {
		host, port, ok := splitHost(entry)
		if !ok || host == "" || strings.ContainsAny(host, "*/@?#%\\ \t") {
			return s, fmt.Errorf("%w: Hosts[%d] %q: a host name, an IP address or either with :port "+
				"(no scheme, path or wildcard)", ErrInvalidConfig, i, entry)
		}
		if port == "" {
			s.names[host] = true
		} else {
			s.hostPorts[host+":"+port] = true
		}
	}
	return s, nil
}

func (s hostSet) empty() bool { return len(s.names) == 0 && len(s.hostPorts) == 0 }

// allows reports whether a request's Host (r.Host) is one of the set.
func (s hostSet) allows(requestHost string) bool {
	host, port, ok := splitHost(requestHost)
	if !ok || host == "" {
		return false
	}
	return s.names[host] || port != "" && s.hostPorts[host+":"+port]
}

// splitHost splits "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6
// address, and normalises the host: lower case, without a final dot, an IP
// address in its canonical form. ok is false when it cannot be read (a port
// that is not a number, brackets around what is not an IPv6 address).
func splitHost(hostport string) (host, port string, ok bool) {
	host = hostport
	bracketed := strings.HasPrefix(hostport, "[")
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", "", false
		}
		host, port = h, p
	} else if bracketed && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	}
	if strings.ContainsAny(host, "[]") || (bracketed || strings.Contains(host, ":")) && !isIPv6(host) {
		return "", "", false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.String()
	}
	return host, port, true
}

func isIPv6(s string) bool {
	ip, err := netip.ParseAddr(s)
	return err == nil && ip.Is6()
}

// loopbackHost reports whether a request's Host names this machine in a way a
// page on another site cannot take over by DNS: localhost and the names under
// .localhost (RFC 6761: resolved to loopback without asking DNS, by browsers
// and resolvers; no delegation an attacker could own), an address in
// 127.0.0.0/8, ::1 (or ::ffff:127.x.y.z), any port.
func loopbackHost(requestHost string) bool {
	host, _, ok := splitHost(requestHost)
	switch {
	case !ok || host == "":
		return false
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// hostMayAct reports whether an action may come for r's Host: one Config.Hosts
// lists, or without the list a loopback name.
func (h *Handler) hostMayAct(r *http.Request) bool {
	if h.hosts.empty() {
		return loopbackHost(r.Host)
	}
	return h.hosts.allows(r.Host)
}

// checkHost refuses a request whose Host the page does not answer to, and says
// whether it did: with Config.Hosts, any request for another Host (421
// Misdirected Request: this server does not serve that name, which is what RFC
// 9110 has the code for; a browser does not retry it elsewhere); without, an
// action whose Host is not a loopback name (403, as every refused action).
func (h *Handler) checkHost(w http.ResponseWriter, r *http.Request, action bool) bool {
	switch {
	case !h.hosts.empty() && !h.hosts.allows(r.Host):
		h.fail(w, r, http.StatusMisdirectedRequest, fmt.Sprintf("this status page does not answer to the host %q "+
			"(web.Config.Hosts lists the names it answers to)", r.Host))
		return false
	case action && !h.hostMayAct(r):
		h.fail(w, r, http.StatusForbidden, fmt.Sprintf("action refused: the host %q is not a loopback name, and "+
			"web.Config.Hosts does not list the names this page answers to (a page of another site could be "+
			"reaching it through DNS rebinding)", r.Host))
		return false
	}
	return true
}
