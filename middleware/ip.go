package middleware

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP keys requests by the client's IP address. Safe for concurrent
// use; the zero value keys by the TCP peer (no proxy).
type ClientIP struct {
	// TrustedHops is how many reverse proxies in front of the application
	// append to X-Forwarded-For (0..MaxTrustedHops). The client is the
	// entry the outermost of them wrote: the TrustedHops-th from the
	// right. Entries left of it came from the client and are ignored, so
	// a client-supplied X-Forwarded-For never picks another bucket. A
	// request with fewer entries than TrustedHops did not pass all the
	// proxies: it is keyed by its TCP peer.
	TrustedHops int
	// IPv6Prefix, if positive, keys IPv6 clients by their network of that
	// many bits (64: a typical subscriber's /64), since one client holds
	// many addresses of its network. 0 keys by the whole address.
	IPv6Prefix int
}

// MaxTrustedHops bounds ClientIP.TrustedHops.
const MaxTrustedHops = 16

// Key returns the client's address ("203.0.113.7", "2001:db8::/64").
func (c ClientIP) Key(r *http.Request) (string, error) {
	if c.TrustedHops < 0 || c.TrustedHops > MaxTrustedHops {
		return "", fmt.Errorf("trusted hops %d: want 0..%d", c.TrustedHops, MaxTrustedHops)
	}
	if c.IPv6Prefix < 0 || c.IPv6Prefix > 128 {
		return "", fmt.Errorf("IPv6 prefix %d: want 0..128", c.IPv6Prefix)
	}
	var (
		a   netip.Addr
		err error
	)
	if c.TrustedHops > 0 {
		if e, ok := nthFromRight(r.Header.Values("X-Forwarded-For"), c.TrustedHops); ok {
			if a, err = parseHost(e); err != nil {
				return "", fmt.Errorf("X-Forwarded-For entry %q written by a trusted proxy: %v", e, err)
			}
			return c.format(a), nil
		}
	}
	if a, err = parseHost(r.RemoteAddr); err != nil {
		return "", fmt.Errorf("peer address %q: %v", r.RemoteAddr, err)
	}
	return c.format(a), nil
}

func (c ClientIP) format(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is6() && c.IPv6Prefix > 0 {
		p, _ := a.Prefix(c.IPv6Prefix) // a valid v6 address and bits: cannot fail
		return p.String()
	}
	return a.String()
}

// nthFromRight returns the n-th comma-separated entry from the right of
// the header lines (in order, as a list), without splitting what lies left
// of it: only n entries are looked at, however long the header.
func nthFromRight(lines []string, n int) (string, bool) {
	for i := len(lines) - 1; i >= 0; i-- {
		s := lines[i]
		for {
			j := strings.LastIndexByte(s, ',')
			e := strings.TrimSpace(s[j+1:])
			if e != "" { // empty elements are allowed by the list syntax
				if n--; n == 0 {
					return e, true
				}
			}
			if j < 0 {
				break
			}
			s = s[:j]
		}
	}
	return "", false
}

var errNoAddr = errors.New("not an IP address")

// parseHost parses "ip", "ip:port", "[ipv6]:port" or "[ipv6]".
func parseHost(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), nil
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(h); err == nil {
			return a, nil
		}
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a, nil
		}
	}
	return netip.Addr{}, errNoAddr
}
