package httpcheck

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/gateway/policy"
)

// buildRequest needs no engine: these tests run on a bare Handler.
func buildFor(t *testing.T, hops int, target string, hdr ...string) ([]policy.Descriptor, error) {
	t.Helper()
	return buildWith(t, Config{TrustedHops: hops}, target, hdr...)
}

func buildWith(t *testing.T, cfg Config, target string, hdr ...string) ([]policy.Descriptor, error) {
	t.Helper()
	h := New(cfg)
	var got []policy.Descriptor
	var err error
	// Route through the handler's mux so that the {domain} path value is set.
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("/check/{domain...}", func(_ http.ResponseWriter, r *http.Request) {
		req, e := h.buildRequest(r)
		err = e
		if e == nil {
			require.Equal(t, "api", req.Domain)
			require.Zero(t, req.HitsAddend, "hits are the descriptors' own")
			got = req.Descriptors
		}
	})
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = "192.0.2.1:4711"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	h.ServeHTTP(httptest.NewRecorder(), r)
	return got, err
}

func desc(kv ...string) policy.Descriptor {
	var d policy.Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, policy.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(n uint64, ds ...policy.Descriptor) []policy.Descriptor {
	for i := range ds {
		ds[i].HitsAddend, ds[i].HasHits = n, true
	}
	return ds
}

func TestDescriptorsFromRequest(t *testing.T) {
	nginx := []string{"X-Original-URI", "/v1/../login//x/%41?q=1", "X-Original-Method", "post", "X-Forwarded-Host", "API.Example.com:8443"}
	traefik := []string{"X-Forwarded-Uri", "/items/", "X-Forwarded-Method", "GET", "X-Forwarded-Host", "example.org."}
	both := append(append([]string{}, nginx...), traefik...)
	for _, c := range []struct {
		name   string
		fwd    Forwarded
		target string
		hdr    []string
		want   []policy.Descriptor
	}{
		{"default", XForwarded, "/check/api", nil, []policy.Descriptor{desc("remote_address", "192.0.2.1")}},
		{"nginx", XOriginal, "/check/api?d=method,path&d=host", nginx,
			[]policy.Descriptor{desc("method", "POST", "path", "/login/x/A"), desc("host", "api.example.com")}},
		{"traefik", XForwarded, "/check/api?d=path,method,host", traefik,
			[]policy.Descriptor{desc("path", "/items/", "method", "GET", "host", "example.org")}},
		// A gateway passes the family it does not set through from the
		// client: that one is never read.
		{"forwarded ignores X-Original", XForwarded, "/check/api?d=path,method", both,
			[]policy.Descriptor{desc("path", "/items/", "method", "GET")}},
		{"forwarded without X-Forwarded", XForwarded, "/check/api?d=path&d=method", nginx, nil},
		{"original ignores X-Forwarded", XOriginal, "/check/api?d=path,method", both,
			[]policy.Descriptor{desc("path", "/login/x/A", "method", "POST")}},
		{"original without X-Original", XOriginal, "/check/api?d=path&d=method&d=host", traefik,
			[]policy.Descriptor{desc("host", "example.org")}},
		{"renamed keys and constants", XForwarded, "/check/api?d=api_key=header:X-Api-Key,value:v1&d=route=value:a=b&hits=7",
			[]string{"X-Api-Key", "k1", "X-Api-Key", "k2"},
			withHits(7, desc("api_key", "k1,k2", "generic_key", "v1"), desc("route", "a=b"))},
		{"hits=0 checks", XForwarded, "/check/api?hits=0", nil, withHits(0, desc("remote_address", "192.0.2.1"))},
		{"bare header key", XForwarded, "/check/api?d=header:X-User", []string{"X-User", "u"}, []policy.Descriptor{desc("X-User", "u")}},
		{"missing sources drop their descriptor", XForwarded, "/check/api?d=header:X-None&d=remote_address,path&d=method&d=remote_address", nil,
			[]policy.Descriptor{desc("remote_address", "192.0.2.1")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := buildWith(t, Config{Forwarded: c.fwd}, c.target, c.hdr...)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestParseForwarded(t *testing.T) {
	for _, s := range []string{"forwarded", "original"} {
		f, err := ParseForwarded(s)
		require.NoError(t, err)
		assert.Equal(t, s, f.String())
	}
	f, err := ParseForwarded("")
	assert.Error(t, err)
	assert.Equal(t, XForwarded, f)
	_, err = ParseForwarded("both")
	assert.ErrorContains(t, err, "original or forwarded")
}

func TestNormalPath(t *testing.T) {
	for in, want := range map[string]string{
		"":                "/",
		"/":               "/",
		"/login":          "/login",
		"/%6Cogin?a=b":    "/login",
		"//a///b/":        "/a/b/",
		"/a/./b/../c":     "/a/c",
		"/../../etc":      "/etc",
		"/a#frag":         "/a",
		"/bad%zzescape":   "/bad%zzescape",
		"relative/path/.": "/relative/path",
	} {
		assert.Equal(t, want, normalPath(in), in)
	}
}

func TestClientIP(t *testing.T) {
	for _, c := range []struct {
		name string
		hops int
		peer string
		hdr  []string
		want string
		err  string
	}{
		{"peer", 0, "192.0.2.1:80", nil, "192.0.2.1", ""},
		{"peer v6", 0, "[2001:db8::1]:80", nil, "2001:db8::1", ""},
		{"peer v4-mapped", 0, "[::ffff:192.0.2.9]:80", nil, "192.0.2.9", ""},
		{"x-real-ip", 0, "10.0.0.1:80", []string{"X-Real-IP", " 198.51.100.7 "}, "198.51.100.7", ""},
		{"hops 0 ignores xff", 0, "10.0.0.1:80", []string{"X-Forwarded-For", "198.51.100.7"}, "10.0.0.1", ""},
		{"hops 1", 1, "10.0.0.1:80", []string{"X-Forwarded-For", "203.0.113.9, 198.51.100.7"}, "198.51.100.7", ""},
		{"hops 1 ignores x-real-ip", 1, "10.0.0.1:80", []string{"X-Real-IP", "203.0.113.9", "X-Forwarded-For", "198.51.100.7"}, "198.51.100.7", ""},
		{"hops 2 across lines", 2, "10.0.0.1:80", []string{"X-Forwarded-For", "203.0.113.9, 198.51.100.7", "X-Forwarded-For", "10.0.0.2"}, "198.51.100.7", ""},
		{"xff with port", 1, "10.0.0.1:80", []string{"X-Forwarded-For", "[2001:db8::2]:1234"}, "2001:db8::2", ""},
		{"short list gives the peer", 3, "10.0.0.1:80", []string{"X-Forwarded-For", "203.0.113.9, 198.51.100.7"}, "10.0.0.1", ""},
		{"no xff gives the peer", 1, "10.0.0.1:80", nil, "10.0.0.1", ""},
		{"bad xff entry", 1, "10.0.0.1:80", []string{"X-Forwarded-For", "1.2.3.4, unknown"}, "", `X-Forwarded-For entry "unknown" (1 from the right) is not an IP address`},
		{"bad x-real-ip", 0, "10.0.0.1:80", []string{"X-Real-IP", "x"}, "", `X-Real-IP "x" is not an IP address`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/check/api", nil)
			r.RemoteAddr = c.peer
			for i := 0; i+1 < len(c.hdr); i += 2 {
				r.Header.Add(c.hdr[i], c.hdr[i+1])
			}
			ip, err := ClientIP(r, c.hops)
			if c.err != "" {
				require.EqualError(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, ip.String())
		})
	}
}
