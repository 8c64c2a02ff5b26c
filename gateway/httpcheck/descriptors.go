package httpcheck

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/policy"
)

// MaxEntries is the most entries one descriptor of the check may have:
// policy trees are a few levels deep, and every entry is a key part.
const MaxEntries = 16

// The sources of a descriptor entry's value.
const (
	srcRemoteAddress = "remote_address"
	srcMethod        = "method"
	srcPath          = "path"
	srcHost          = "host"
	srcHeader        = "header:"
	srcValue         = "value:"
)

// buildRequest turns a check request into the engine's request.
func (h *Handler) buildRequest(r *http.Request) (*gateway.Request, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("bad query string: %v", err)
	}
	req := &gateway.Request{Domain: r.PathValue("domain")}
	specs := []string{srcRemoteAddress}
	hits, hasHits := uint64(0), false
	for k, vs := range q {
		switch k {
		case "d":
			specs = vs
		case "hits":
			if len(vs) != 1 {
				return nil, fmt.Errorf("hits is given %d times", len(vs))
			}
			n, err := strconv.ParseUint(vs[0], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("hits must be a whole number below 2^32, got %q", vs[0])
			}
			// Each descriptor's own hits: the request's HitsAddend
			// reads 0 as 1, and hits=0 is to check without charging.
			hits, hasHits = n, true
		default:
			return nil, fmt.Errorf("unknown query parameter %q (want d or hits)", k)
		}
	}
	if len(specs) > gateway.MaxDescriptors {
		return nil, gateway.ErrTooManyDescriptors
	}
	var client string // found at most once, when a descriptor needs it
	for _, spec := range specs {
		d, ok, err := h.descriptor(r, spec, &client)
		if err != nil {
			return nil, err
		}
		if ok {
			d.HitsAddend, d.HasHits = hits, hasHits
			req.Descriptors = append(req.Descriptors, d)
		}
	}
	return req, nil
}

// descriptor builds one descriptor from its d parameter; ok is false when
// a source has no value in r.
func (h *Handler) descriptor(r *http.Request, spec string, client *string) (d policy.Descriptor, ok bool, err error) {
	if spec == "" {
		return d, false, fmt.Errorf("empty descriptor in d")
	}
	n := strings.Count(spec, ",") + 1
	if n > MaxEntries {
		return d, false, fmt.Errorf("a descriptor has %d entries, at most %d are allowed", n, MaxEntries)
	}
	d.Entries = make([]policy.Entry, 0, n)
	for e := range strings.SplitSeq(spec, ",") {
		key, src, named := strings.Cut(e, "=")
		if !named { // the key is the source's name
			src = key
			switch {
			case strings.HasPrefix(src, srcHeader):
				key = src[len(srcHeader):]
			case strings.HasPrefix(src, srcValue):
				key = "generic_key" // Envoy's generic_key action's default
			}
		}
		v, has, err := h.value(r, src, client)
		if err != nil {
			return d, false, err
		}
		if key == "" {
			return d, false, fmt.Errorf("descriptor entry %q has no key", e)
		}
		if !has {
			return d, false, nil
		}
		d.Entries = append(d.Entries, policy.Entry{Key: key, Value: v})
	}
	return d, true, nil
}

// value is src's value in r; has is false when r does not carry it.
func (h *Handler) value(r *http.Request, src string, client *string) (v string, has bool, err error) {
	switch {
	case src == srcRemoteAddress:
		if *client == "" {
			ip, err := ClientIP(r, h.hops)
			if err != nil {
				return "", false, err
			}
			*client = ip.String()
		}
		return *client, true, nil
	case src == srcMethod:
		v = r.Header.Get(h.method)
		return strings.ToUpper(v), v != "", nil
	case src == srcPath:
		v = r.Header.Get(h.path)
		if v == "" {
			return "", false, nil
		}
		return normalPath(v), true, nil
	case src == srcHost:
		v = r.Header.Get("X-Forwarded-Host")
		if v == "" {
			return "", false, nil
		}
		return normalHost(v), true, nil
	case strings.HasPrefix(src, srcHeader):
		name := src[len(srcHeader):]
		if name == "" {
			return "", false, fmt.Errorf("descriptor source %q names no header", src)
		}
		vs := r.Header.Values(name)
		if len(vs) == 0 {
			return "", false, nil
		}
		return strings.Join(vs, ","), true, nil
	case strings.HasPrefix(src, srcValue):
		return src[len(srcValue):], true, nil
	}
	return "", false, fmt.Errorf("unknown descriptor source %q (want remote_address, method, path, host, header:<Name> or value:<text>)", src)
}

// normalPath is the path of a request URI as the gateway routes it: no
// query or fragment, percent-decoded, without dot segments or repeated
// slashes (nginx's $uri), so that /a/../login and /%6Cogin are the bucket
// of /login. A trailing slash is kept.
func normalPath(uri string) string {
	p, _, _ := strings.Cut(uri, "?")
	p, _, _ = strings.Cut(p, "#")
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	if p == "" {
		return "/"
	}
	trailing := strings.HasSuffix(p, "/")
	p = path.Clean("/" + p)
	if trailing && p != "/" {
		p += "/"
	}
	return p
}

// normalHost lower-cases a Host value and drops its port and a trailing
// dot.
func normalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// ClientIP is the client address of a check request behind hops trusted
// proxies:
//
//   - hops > 0: the hops-th X-Forwarded-For entry from the right (all the
//     request's X-Forwarded-For lines taken as one list). Each trusted
//     proxy appends the address it was connected from, so the entries a
//     client wrote itself stay to the left of them and are never read.
//     A list shorter than hops (the request did not come through them
//     all) gives the peer address.
//   - hops == 0: X-Real-IP, which the gateway sets and overwrites, else
//     the peer address.
//
// An entry that is not an IP address is an error (a gateway
// misconfigured), not a guess.
func ClientIP(r *http.Request, hops int) (netip.Addr, error) {
	if hops > 0 {
		var list []string
		for _, line := range r.Header.Values("X-Forwarded-For") {
			for e := range strings.SplitSeq(line, ",") {
				list = append(list, strings.TrimSpace(e))
			}
		}
		if len(list) >= hops {
			e := list[len(list)-hops]
			ip, ok := parseIP(e)
			if !ok {
				return netip.Addr{}, fmt.Errorf("X-Forwarded-For entry %q (%d from the right) is not an IP address", clip(e), hops)
			}
			return ip, nil
		}
	} else if v := r.Header.Get("X-Real-Ip"); v != "" {
		ip, ok := parseIP(strings.TrimSpace(v))
		if !ok {
			return netip.Addr{}, fmt.Errorf("X-Real-IP %q is not an IP address", clip(v))
		}
		return ip, nil
	}
	ip, ok := parseIP(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("peer address %q is not an IP address", clip(r.RemoteAddr))
	}
	return ip, nil
}

// parseIP reads an address, with or without a port ("1.2.3.4",
// "[::1]:80", "1.2.3.4:80"); IPv4-mapped IPv6 is IPv4, and a zone is
// dropped, so one client has one spelling.
func parseIP(s string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		ap, err2 := netip.ParseAddrPort(s)
		if err2 != nil {
			ip, err = netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
			if err != nil {
				return netip.Addr{}, false
			}
		} else {
			ip = ap.Addr()
		}
	}
	return ip.Unmap().WithZone(""), true
}

// clip shortens a client's value quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
