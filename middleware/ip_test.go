package middleware

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestClientIP(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hops   int
		v6bits int
		remote string
		xff    []string // header lines, in order
		want   string
		err    string
	}{
		{name: "no proxy: the peer", remote: "203.0.113.7:5555", want: "203.0.113.7"},
		{name: "no proxy ignores X-Forwarded-For", remote: "203.0.113.7:5555", xff: []string{"1.1.1.1"}, want: "203.0.113.7"},
		{name: "one proxy", hops: 1, remote: "10.0.0.1:80", xff: []string{"198.51.100.2"}, want: "198.51.100.2"},
		{name: "one proxy, client-supplied entries ignored", hops: 1, remote: "10.0.0.1:80",
			xff: []string{"1.1.1.1, 2.2.2.2, 198.51.100.2"}, want: "198.51.100.2"},
		{name: "two proxies", hops: 2, remote: "10.0.0.2:80", xff: []string{"6.6.6.6, 198.51.100.2, 10.0.0.1"}, want: "198.51.100.2"},
		{name: "entries over several lines form one list", hops: 2, remote: "10.0.0.2:80",
			xff: []string{"6.6.6.6, 198.51.100.2", "10.0.0.1"}, want: "198.51.100.2"},
		{name: "empty list elements are skipped", hops: 1, remote: "10.0.0.1:80", xff: []string{"1.1.1.1, 198.51.100.2 , ,"}, want: "198.51.100.2"},
		{name: "fewer entries than hops: the peer", hops: 2, remote: "10.0.0.2:80", xff: []string{"6.6.6.6"}, want: "10.0.0.2"},
		{name: "no header behind a proxy: the peer", hops: 1, remote: "10.0.0.1:80", want: "10.0.0.1"},
		{name: "entry with a port", hops: 1, remote: "10.0.0.1:80", xff: []string{"198.51.100.2:4711"}, want: "198.51.100.2"},
		{name: "IPv6 entry in brackets with a port", hops: 1, remote: "10.0.0.1:80", xff: []string{"[2001:db8::1]:443"}, want: "2001:db8::1"},
		{name: "IPv4-mapped IPv6 is IPv4", remote: "[::ffff:192.0.2.1]:80", want: "192.0.2.1"},
		{name: "IPv6 by /64", v6bits: 64, remote: "[2001:db8:1:2:3:4:5:6]:80", want: "2001:db8:1:2::/64"},
		{name: "IPv4 is not masked", v6bits: 64, remote: "192.0.2.1:80", want: "192.0.2.1"},
		{name: "a garbage entry by the trusted proxy", hops: 1, remote: "10.0.0.1:80", xff: []string{"1.1.1.1, unknown"}, err: "written by a trusted proxy"},
		{name: "a garbage entry left of the trusted one is never read", hops: 1, remote: "10.0.0.1:80", xff: []string{"unknown, 198.51.100.2"}, want: "198.51.100.2"},
		{name: "bad peer", remote: "pipe", err: "peer address"},
		{name: "hops out of range", hops: 17, remote: "10.0.0.1:80", err: "trusted hops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			got, err := ClientIP{TrustedHops: tc.hops, IPv6Prefix: tc.v6bits}.Key(r)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// However the client fills X-Forwarded-For, with one trusted proxy the key
// is what that proxy appended.
func TestClientIPCannotBeSpoofed(t *testing.T) {
	for _, spoof := range []string{"", "9.9.9.9", "9.9.9.9, 8.8.8.8", strings.Repeat("7.7.7.7,", 10000), ",,,", "[::1]"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:80"
		v := "198.51.100.2"
		if spoof != "" {
			v = spoof + ", " + v
		}
		r.Header.Set("X-Forwarded-For", v)
		got, err := ClientIP{TrustedHops: 1}.Key(r)
		assert.NoError(t, err)
		assert.Equal(t, "198.51.100.2", got, "spoof %.20q", spoof)
	}
}
