package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The HTTP check end to end: the real binary with --policy-file and
// --http-addr, behind Debian's nginx (auth_request) and Caddy
// (forward_auth), and called directly.

const checkPolicy = `domain: web
descriptors:
  - key: remote_address
    rate_limit:
      name: per-ip
      unit: minute
      requests_per_unit: 3
  - key: user
    rate_limit:
      name: per-user
      unit: minute
      requests_per_unit: 2
  - key: burst
    rate_limit:
      name: burst
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /p/login
    rate_limit:
      name: login
      unit: minute
      requests_per_unit: 3
`

// checkClock is where the tests freeze the server clock: 30 s into a
// minute, so every per-minute window has 30 s left and never rolls over.
var checkClock = time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)

// checkServer is a cellserver serving the check.
type checkServer struct {
	*server
	HTTP string // host:port of --http-addr
}

// startCheckServer starts cellserver with checkPolicy on a free
// --http-addr, its clock frozen at checkClock.
func startCheckServer(t *testing.T, extra ...string) *checkServer {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(checkPolicy), 0o644))
	httpAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	args := append([]string{"--in-memory", "--enable-debug-command", "local", "--policy-file", pol, "--http-addr", httpAddr}, extra...)
	s := startServer(t, args...)
	require.NoError(t, s.Client(t).Do(ctxT(t, 5*time.Second), "DEBUG", "CLOCK", "SET", checkClock.UnixNano()).Err())
	return &checkServer{server: s, HTTP: httpAddr}
}

// checkClientFrom is an HTTP client whose connections come from the loopback
// address ip (127.0.0.2, ...): a distinct client to the gateway.
func checkClientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// checkGet sends GET url with header pairs and returns the response with
// its body read.
func checkGet(t *testing.T, c *http.Client, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// checkUpstream is the application behind the gateway: it answers "app" and
// records the request headers it was given.
type checkUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newCheckUpstream(t *testing.T) *checkUpstream {
	u := &checkUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		_, _ = io.WriteString(w, "app")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *checkUpstream) last() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return nil
	}
	return u.seen[len(u.seen)-1]
}

// checkGatewayBin returns the gateway binary at path, or skips the test loudly
// when it is not installed (test.sh installs it).
func checkGatewayBin(t *testing.T, path string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("SKIPPED: %s is not installed (test.sh installs it): %v", path, err)
	}
	return path
}

// startCheckGateway runs argv in dir until the test ends (SIGTERM, then SIGKILL
// after 10 s) and waits until addr accepts connections.
func startCheckGateway(t *testing.T, dir, addr string, env []string, argv ...string) {
	t.Helper()
	out := &lockedBuffer{}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	cmd.Env = append(os.Environ(), env...)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", argv[0], out.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("%s exited at start:\n%s", argv[0], out.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return
		}
		require.True(t, time.Now().Before(deadline), "%s does not listen on %s:\n%s", argv[0], addr, out.String())
		time.Sleep(20 * time.Millisecond)
	}
}

// checkNginxConf is docs/http-check.md's nginx configuration, made runnable as
// a non-daemon in a temporary prefix.
const checkNginxConf = `{{user}}
worker_processes 1;
pid {{dir}}/nginx.pid;
error_log {{dir}}/error.log info;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path {{dir}}/body;
	proxy_temp_path {{dir}}/proxy;
	fastcgi_temp_path {{dir}}/fastcgi;
	uwsgi_temp_path {{dir}}/uwsgi;
	scgi_temp_path {{dir}}/scgi;

	upstream cellserver { server {{check}}; keepalive 8; }

	server {
		listen {{listen}};

		location / {
			auth_request /_ratelimit;
			auth_request_set $rl $upstream_http_ratelimit;
			auth_request_set $rl_policy $upstream_http_ratelimit_policy;
			auth_request_set $rl_limit $upstream_http_x_ratelimit_limit;
			auth_request_set $rl_remaining $upstream_http_x_ratelimit_remaining;
			auth_request_set $rl_used $upstream_http_x_ratelimit_used;
			auth_request_set $rl_reset $upstream_http_x_ratelimit_reset;
			auth_request_set $rl_resource $upstream_http_x_ratelimit_resource;
			auth_request_set $rl_retry_after $upstream_http_retry_after;
			add_header RateLimit $rl always;
			add_header RateLimit-Policy $rl_policy always;
			add_header X-RateLimit-Limit $rl_limit always;
			add_header X-RateLimit-Remaining $rl_remaining always;
			add_header X-RateLimit-Used $rl_used always;
			add_header X-RateLimit-Reset $rl_reset always;
			add_header X-RateLimit-Resource $rl_resource always;
			error_page 403 = @ratelimited;
			proxy_pass {{upstream}};
		}

		location = /_ratelimit {
			internal;
			proxy_pass http://cellserver/check/web?d=remote_address;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_pass_request_body off;
			proxy_set_header Content-Length "";
			proxy_set_header X-Original-URI $request_uri;
			proxy_set_header X-Original-Method $request_method;
			proxy_set_header X-Forwarded-Host $host;
			proxy_set_header X-Real-IP $remote_addr;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
			proxy_set_header X-Ratelimit-Deny-Status 403;
		}

		# Not in the doc: /p/ is limited per path (checkForgedPath).
		location /p/ {
			auth_request /_ratelimit_path;
			error_page 403 = @ratelimited;
			proxy_pass {{upstream}};
		}

		location = /_ratelimit_path {
			internal;
			proxy_pass http://cellserver/check/web?d=path;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_pass_request_body off;
			proxy_set_header Content-Length "";
			proxy_set_header X-Original-URI $request_uri;
			proxy_set_header X-Original-Method $request_method;
			proxy_set_header X-Forwarded-Host $host;
			proxy_set_header X-Ratelimit-Deny-Status 403;
		}

		location @ratelimited {
			add_header Retry-After $rl_retry_after always;
			add_header RateLimit $rl always;
			add_header RateLimit-Policy $rl_policy always;
			add_header X-RateLimit-Limit $rl_limit always;
			add_header X-RateLimit-Remaining $rl_remaining always;
			add_header X-RateLimit-Used $rl_used always;
			add_header X-RateLimit-Reset $rl_reset always;
			add_header X-RateLimit-Resource $rl_resource always;
			default_type application/problem+json;
			return 429 '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429}\n';
		}
	}
}
`

func checkFill(tmpl string, kv ...string) string {
	for i := 0; i+1 < len(kv); i += 2 {
		tmpl = strings.ReplaceAll(tmpl, "{{"+kv[i]+"}}", kv[i+1])
	}
	return tmpl
}

// startCheckNginx runs nginx in front of the check at check, proxying to
// upstreamURL; it returns its host:port.
func startCheckNginx(t *testing.T, check, upstreamURL string) string {
	t.Helper()
	bin := checkGatewayBin(t, "/usr/sbin/nginx")
	dir := t.TempDir()
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	user := "" // a non-root nginx runs as itself; root's workers would drop to nobody, who cannot read the temp dir
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	conf := filepath.Join(dir, "nginx.conf")
	require.NoError(t, os.WriteFile(conf, []byte(checkFill(checkNginxConf, "user", user, "dir", dir, "check", check,
		"listen", listen, "upstream", upstreamURL)), 0o644))
	startCheckGateway(t, dir, listen, nil, bin, "-p", dir, "-c", conf, "-g", "daemon off;")
	return listen
}

// checkCaddyfile is docs/http-check.md's Caddy configuration (admin API, HTTPS
// and config autosave kept inside the test).
const checkCaddyfile = `{
	admin off
	auto_https off
	storage file_system {{dir}}/storage
}

http://{{listen}} {
	route {
		# Not in the doc: /p/ is limited per path too (checkForgedPath).
		forward_auth /p/* {{check}} {
			uri /check/web?d=path
		}
		forward_auth {{check}} {
			uri /check/web?d=remote_address
			copy_headers RateLimit RateLimit-Policy X-RateLimit-Limit X-RateLimit-Remaining X-RateLimit-Used X-RateLimit-Reset X-RateLimit-Resource
		}
		header {
			defer
			RateLimit {http.request.header.RateLimit}
			RateLimit-Policy {http.request.header.RateLimit-Policy}
			X-RateLimit-Limit {http.request.header.X-RateLimit-Limit}
			X-RateLimit-Remaining {http.request.header.X-RateLimit-Remaining}
			X-RateLimit-Used {http.request.header.X-RateLimit-Used}
			X-RateLimit-Reset {http.request.header.X-RateLimit-Reset}
			X-RateLimit-Resource {http.request.header.X-RateLimit-Resource}
		}
		reverse_proxy {{upstream}}
	}
}
`

// startCheckCaddy runs Caddy in front of the check; it returns its host:port.
func startCheckCaddy(t *testing.T, check, upstreamHost string) string {
	t.Helper()
	bin := checkGatewayBin(t, "/usr/bin/caddy")
	dir := t.TempDir()
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	conf := filepath.Join(dir, "Caddyfile")
	require.NoError(t, os.WriteFile(conf, []byte(checkFill(checkCaddyfile, "dir", dir, "check", check, "listen", listen,
		"upstream", upstreamHost)), 0o644))
	env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}
	startCheckGateway(t, dir, listen, env, bin, "run", "--config", conf, "--adapter", "caddyfile")
	return listen
}

// checkAllowed checks a 200 through a gateway: the app's body and the
// headers of the per-ip limit with remaining left.
func checkAllowed(t *testing.T, resp *http.Response, body string, remaining int) {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "app", body)
	assert.Equal(t, fmt.Sprintf(`"per-ip";r=%d;t=30`, remaining), resp.Header.Get("RateLimit"))
	assert.Equal(t, `"per-ip";q=3;w=60;cellserver-alg="fw"`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, strconv.Itoa(remaining), resp.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, strconv.Itoa(3-remaining), resp.Header.Get("X-RateLimit-Used"))
	assert.Equal(t, strconv.FormatInt(checkClock.Unix()+30, 10), resp.Header.Get("X-RateLimit-Reset"))
	assert.Equal(t, "per-ip", resp.Header.Get("X-RateLimit-Resource"))
	assert.Empty(t, resp.Header.Get("Retry-After"))
}

// checkLimited checks a 429 through a gateway.
func checkLimited(t *testing.T, resp *http.Response, body string) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
	assert.Equal(t, "30", resp.Header.Get("Retry-After"))
	assert.Equal(t, `"per-ip";r=0;t=30`, resp.Header.Get("RateLimit"))
	assert.Equal(t, `"per-ip";q=3;w=60;cellserver-alg="fw"`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	assert.Contains(t, body, "https://iana.org/assignments/http-problem-types#quota-exceeded")
}

// The client at 127.0.0.2 forges X-Forwarded-For as 127.0.0.3 and then
// others on every request: it still spends, and exhausts, its own bucket,
// and 127.0.0.3's stays whole.
func checkForgedXFF(t *testing.T, addr string) {
	t.Helper()
	a, b := checkClientFrom(t, "127.0.0.2"), checkClientFrom(t, "127.0.0.3")
	url := "http://" + addr + "/app/page?x=1"
	for i := range 3 {
		resp, body := checkGet(t, a, url, "X-Forwarded-For", "127.0.0.3")
		checkAllowed(t, resp, body, 2-i)
	}
	for _, forged := range []string{"127.0.0.3", "127.0.0.4, 127.0.0.5", "garbage"} {
		resp, body := checkGet(t, a, url, "X-Forwarded-For", forged, "X-Real-IP", "127.0.0.3")
		checkLimited(t, resp, body)
	}
	resp, body := checkGet(t, b, url)
	checkAllowed(t, resp, body, 2)
}

// A client forging the path headers (X-Original-URI, X-Forwarded-Uri) on
// every request neither charges the /p/login bucket from another path nor
// leaves it: the path is the one it requested. Each request comes from
// another address, so that only the path bucket can refuse.
func checkForgedPath(t *testing.T, addr string) {
	t.Helper()
	n := 0
	get := func(path, forged string) int {
		t.Helper()
		n++
		c := checkClientFrom(t, fmt.Sprintf("127.0.1.%d", n))
		resp, body := checkGet(t, c, "http://"+addr+path, "X-Original-URI", forged, "X-Forwarded-Uri", forged)
		if resp.StatusCode == http.StatusOK {
			assert.Equal(t, "app", body)
		}
		return resp.StatusCode
	}
	for range 4 { // one more than /p/login's limit
		assert.Equal(t, http.StatusOK, get("/p/other", "/p/login"), "a forged /p/login charges nothing")
	}
	for range 3 {
		assert.Equal(t, http.StatusOK, get("/p/login", "/p/nope1"))
	}
	for _, forged := range []string{"/p/nope2", "/p/other", "/"} {
		assert.Equal(t, http.StatusTooManyRequests, get("/p/login", forged), "a forged %s does not leave the /p/login bucket", forged)
	}
}

func TestGatewayHTTPNginx(t *testing.T) {
	for _, hops := range []string{"0", "1"} { // X-Real-IP, and X-Forwarded-For's last entry
		t.Run("trusted-hops="+hops, func(t *testing.T) {
			// nginx overwrites X-Original-URI/-Method and passes a client's
			// X-Forwarded-Uri on.
			srv := startCheckServer(t, "--http-trusted-hops", hops, "--http-forwarded-headers", "original")
			up := newCheckUpstream(t)
			addr := startCheckNginx(t, srv.HTTP, up.URL)
			checkForgedXFF(t, addr)
			checkForgedPath(t, addr)
		})
	}
}

func TestGatewayHTTPCaddy(t *testing.T) {
	// Caddy replaces the client's X-Forwarded-For with its peer's address
	// (no trusted_proxies): one trusted hop.
	srv := startCheckServer(t, "--http-trusted-hops", "1")
	up := newCheckUpstream(t)
	addr := startCheckCaddy(t, srv.HTTP, strings.TrimPrefix(up.URL, "http://"))
	checkForgedXFF(t, addr)
	// On allow, copy_headers handed the headers to the app's request too.
	resp, _ := checkGet(t, checkClientFrom(t, "127.0.0.4"), "http://"+addr+"/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"per-ip";r=2;t=30`, up.last().Get("RateLimit"))
	// Caddy overwrites X-Forwarded-Uri/-Method and passes a client's
	// X-Original-URI on: the default --http-forwarded-headers forwarded.
	checkForgedPath(t, addr)
}

// A burst of 10x the limit at one instant, from 50 concurrent clients,
// gives exactly the limit's 200s.
func TestGatewayHTTPBurst(t *testing.T) {
	srv := startCheckServer(t)
	tr := &http.Transport{MaxIdleConnsPerHost: 50}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 4 {
				resp, err := c.Get("http://" + srv.HTTP + "/check/web?d=burst=value:all")
				if !assert.NoError(t, err) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, map[int]int{200: 20, 429: 180}, codes)
}

// checkBreakBucket makes the user bucket of u undecidable: after one check has
// made it, its key is replaced by a CL.THROTTLE (GCRA) state, which the
// check's fixed-window CL.LIMIT cannot read (the store's WRONGTYPE).
func checkBreakBucket(t *testing.T, srv *checkServer, u string) {
	t.Helper()
	resp, _ := checkGet(t, http.DefaultClient, "http://"+srv.HTTP+"/check/web?d=user=header:X-User", "X-User", u)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rdb := srv.Client(t)
	ctx := ctxT(t, 5*time.Second)
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1, "the check made one bucket")
	require.NoError(t, rdb.Del(ctx, keys[0]).Err())
	require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", keys[0], 1, 1, 60).Err())
}

func TestGatewayHTTPOnError(t *testing.T) {
	for _, c := range []struct {
		onError string
		deny    string
		want    int
	}{
		{"allow", "", 200},
		{"deny", "", 429},
		{"deny", "403", 403}, // nginx's route
	} {
		t.Run(c.onError+c.deny, func(t *testing.T) {
			srv := startCheckServer(t, "--http-on-error", c.onError)
			checkBreakBucket(t, srv, "mallory")
			hdr := []string{"X-User", "mallory"}
			if c.deny != "" {
				hdr = append(hdr, "X-Ratelimit-Deny-Status", c.deny)
			}
			resp, body := checkGet(t, http.DefaultClient, "http://"+srv.HTTP+"/check/web?d=user=header:X-User", hdr...)
			assert.Equal(t, c.want, resp.StatusCode, body)
			assert.Equal(t, "store could not decide: service: a key holds another kind of limiter state", resp.Header.Get("X-Cellserver-Error"))
			if c.want != 200 {
				assert.Equal(t, "1", resp.Header.Get("Retry-After"))
				assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			}
			require.Eventually(t, func() bool { return strings.Contains(srv.Output(), "the store could not decide") },
				5*time.Second, 10*time.Millisecond, "the fallback is logged")
			// Other buckets are decided as usual.
			resp, _ = checkGet(t, http.DefaultClient, "http://"+srv.HTTP+"/check/web?d=user=header:X-User", "X-User", "trent")
			assert.Equal(t, 200, resp.StatusCode)
			assert.Empty(t, resp.Header.Get("X-Cellserver-Error"))
			assert.Equal(t, `"per-user";r=1;t=30`, resp.Header.Get("RateLimit"))
		})
	}
}

// checkRaw sends one request on a fresh connection and reads the answer.
func checkRaw(t *testing.T, addr, req string) *http.Response {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(nc, req)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	require.NoError(t, err)
	return resp
}

func TestGatewayHTTPBounds(t *testing.T) {
	get := "GET /healthz HTTP/1.1\r\nHost: check\r\n"
	t.Run("header size", func(t *testing.T) {
		srv := startCheckServer(t)
		resp := checkRaw(t, srv.HTTP, get+"X-Big: "+strings.Repeat("b", 64<<10)+"\r\n\r\n")
		assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
		resp = checkRaw(t, srv.HTTP, get+"X-Fits: "+strings.Repeat("b", 8<<10)+"\r\n\r\n")
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		// At the edge: 16 KiB, request line and final empty line included.
		pad := func(n int) string {
			return get + "X-Pad: " + strings.Repeat("b", n-len(get)-len("X-Pad: \r\n\r\n")) + "\r\n\r\n"
		}
		require.Len(t, pad(16<<10), 16<<10)
		resp = checkRaw(t, srv.HTTP, pad(16<<10))
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		resp = checkRaw(t, srv.HTTP, pad(16<<10+1))
		assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	})
	t.Run("connections", func(t *testing.T) {
		srv := startCheckServer(t, "--http-max-conns", "2")
		// Two keep-alive connections hold both slots; a third is refused.
		for range 2 {
			resp := checkRaw(t, srv.HTTP, get+"\r\n")
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
		resp := checkRaw(t, srv.HTTP, get+"\r\n")
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, "too many connections\n", string(b))
		require.Eventually(t, func() bool { return strings.Contains(srv.Output(), "--http-max-conns reached") },
			5*time.Second, 10*time.Millisecond)
	})
}

func TestGatewayHTTPJSON(t *testing.T) {
	srv := startCheckServer(t)
	const req = `{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"json"}]}]}`
	post := func() (*http.Response, string) {
		resp, err := http.Post("http://"+srv.HTTP+"/json", "application/json", strings.NewReader(req))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	for range 2 {
		resp, body := post()
		require.Equal(t, 200, resp.StatusCode, body)
		assert.Contains(t, body, `"overallCode":"OK"`)
	}
	resp, body := post()
	assert.Equal(t, 429, resp.StatusCode, body)
	assert.Contains(t, body, `"overallCode":"OVER_LIMIT"`)
	assert.Contains(t, body, `"name":"per-user"`)

	big := strings.NewReader(`{"domain":"` + strings.Repeat("d", 2<<20) + `"}`)
	resp2, err := http.Post("http://"+srv.HTTP+"/json", "application/json", big)
	require.NoError(t, err)
	resp2.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp2.StatusCode)
}

// /metrics is on --http-addr, and alone on --metrics-addr.
func TestGatewayHTTPMetricsAddr(t *testing.T) {
	metricsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	srv := startCheckServer(t, "--metrics-addr", metricsAddr)
	onHTTP, bodyHTTP := checkGet(t, http.DefaultClient, "http://"+srv.HTTP+"/metrics")
	onMetrics, bodyMetrics := checkGet(t, http.DefaultClient, "http://"+metricsAddr+"/metrics")
	assert.Equal(t, onHTTP.StatusCode, onMetrics.StatusCode)
	assert.Equal(t, onHTTP.Header.Get("Content-Type"), onMetrics.Header.Get("Content-Type"))
	assert.Equal(t, len(bodyHTTP) > 0, len(bodyMetrics) > 0)
	for _, p := range []string{"/check/web", "/healthz", "/json"} {
		resp, _ := checkGet(t, http.DefaultClient, "http://"+metricsAddr+p)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
	resp, _ := checkGet(t, http.DefaultClient, "http://"+srv.HTTP+"/healthz")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// checkStartFails runs cellserver with checkPolicy and args and wants it to
// exit with code (2: a bad flag, 1: a failed start), at once, with want in
// its output (and no panic). It returns the output.
func checkStartFails(t *testing.T, code int, want string, args ...string) string {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(checkPolicy), 0o644))
	return startFails(t, code, want, append([]string{"--in-memory", "--addr", "127.0.0.1:" + strconv.Itoa(freePort(t)), "--policy-file", pol}, args...)...)
}

// startFails runs the binary with args and checks that it exits within
// 10 s with status code, saying want and no panic; it returns the output.
func startFails(t *testing.T, code int, want string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var out []byte
	var err error
	done := make(chan struct{})
	go func() {
		out, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("cellserver still running 10 s after start with %q; output:\n%s", args, out)
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, code, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), want)
	assert.NotContains(t, string(out), "panic")
	return string(out)
}

// A bad --http-forwarded-headers, and a taken --metrics-addr after
// --http-addr listened, stop the start with a clear message: the servers
// already started are shut down, not a nil stop called.
func TestGatewayHTTPStartFails(t *testing.T) {
	checkStartFails(t, 2, "--http-forwarded-headers must be forwarded or original, got \"both\"",
		"--http-addr", "127.0.0.1:"+strconv.Itoa(freePort(t)), "--http-forwarded-headers", "both")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	checkStartFails(t, 1, "--metrics-addr", "--http-addr", "127.0.0.1:"+strconv.Itoa(freePort(t)), "--metrics-addr", ln.Addr().String())
}
