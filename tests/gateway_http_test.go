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

// gatewayConf says which of docs/http-check.md's configurations a gateway
// runs.
type gatewayConf struct {
	// failOpen swaps in the "failing open" block of the documentation.
	failOpen bool
	// pathLimit adds, beside the documented configuration, a check of the
	// path descriptor on /p/ (checkForgedPath).
	pathLimit bool
}

// nginxPathLocations limit /p/ per path (gatewayConf.pathLimit).
const nginxPathLocations = `location /p/ {
            auth_request /_ratelimit_path;
            error_page 403 = @ratelimited;
            proxy_pass http://app;
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

        `

// startCheckNginx runs docs/http-check.md's nginx.conf in front of the
// check at check, proxying to the application at upstreamURL; it returns
// nginx's host:port. The file runs as documented, with its ports changed,
// and nginx's logs and temporary files kept in the test's folder.
func startCheckNginx(t *testing.T, check, upstreamURL string, gc gatewayConf) string {
	t.Helper()
	bin := checkGatewayBin(t, "/usr/sbin/nginx")
	dir := t.TempDir()
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	conf := docBlock(t, "http-check.md", "## nginx (`auth_request`)", "nginx")
	if gc.failOpen {
		conf = replaceBlock(t, conf, docBlock(t, "http-check.md", "### nginx, failing open", "nginx"))
	}
	conf = replaceOnce(t, conf, "listen 80;", "listen "+listen+";")
	conf = replaceOnce(t, conf, "server 127.0.0.1:8080;", "server "+check+";")
	conf = replaceOnce(t, conf, "server 127.0.0.1:8000;", "server "+strings.TrimPrefix(upstreamURL, "http://")+";")
	var paths strings.Builder
	paths.WriteString("http {\n    access_log off;\n")
	for _, p := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&paths, "    %s_temp_path %s;\n", p, filepath.Join(dir, p))
	}
	conf = replaceOnce(t, conf, "http {\n", paths.String())
	if gc.pathLimit {
		conf = replaceOnce(t, conf, "location @ratelimited {", nginxPathLocations+"location @ratelimited {")
	}
	// A non-root nginx runs as itself; root's workers would drop to nobody,
	// who cannot read the test's folder.
	global := fmt.Sprintf("daemon off; pid %s; error_log %s info;", filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "error.log"))
	if os.Geteuid() == 0 {
		global += " user root;"
	}
	file := filepath.Join(dir, "nginx.conf")
	require.NoError(t, os.WriteFile(file, []byte(conf), 0o644))
	startCheckGateway(t, dir, listen, nil, bin, "-p", dir, "-c", file, "-g", global)
	return listen
}

// startCheckCaddy runs docs/http-check.md's Caddyfile in front of the check
// at check, proxying to the application at upstreamHost; it returns Caddy's
// host:port. The file runs as documented, with its ports changed, on
// http://127.0.0.1:<port>, and a global block that keeps the admin API off
// and Caddy's storage in the test's folder.
func startCheckCaddy(t *testing.T, check, upstreamHost string, gc gatewayConf) string {
	t.Helper()
	bin := checkGatewayBin(t, "/usr/bin/caddy")
	dir := t.TempDir()
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	conf := docBlock(t, "http-check.md", "## Caddy (`forward_auth`)", "caddyfile")
	if gc.failOpen {
		conf = replaceBlock(t, conf, docBlock(t, "http-check.md", "### Caddy, failing open", "caddyfile"))
	}
	require.True(t, strings.HasPrefix(conf, ":80 {\n"), "the documented Caddyfile is one site on :80, with no global block")
	conf = "http://" + listen + strings.TrimPrefix(conf, ":80")
	conf = replaceOnce(t, conf, "127.0.0.1:8080", check)
	require.Contains(t, conf, "127.0.0.1:8000")
	conf = strings.ReplaceAll(conf, "127.0.0.1:8000", upstreamHost)
	if gc.pathLimit {
		conf = replaceOnce(t, conf, "\troute {\n", "\troute {\n\t\tforward_auth /p/* "+check+" {\n\t\t\turi /check/web?d=path\n\t\t}\n")
	}
	conf = "{\n\tadmin off\n\tstorage file_system " + filepath.Join(dir, "storage") + "\n}\n\n" + conf
	file := filepath.Join(dir, "Caddyfile")
	require.NoError(t, os.WriteFile(file, []byte(conf), 0o644))
	env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}
	startCheckGateway(t, dir, listen, env, bin, "run", "--config", file, "--adapter", "caddyfile")
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
			addr := startCheckNginx(t, srv.HTTP, up.URL, gatewayConf{pathLimit: true})
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
	addr := startCheckCaddy(t, srv.HTTP, strings.TrimPrefix(up.URL, "http://"), gatewayConf{pathLimit: true})
	checkForgedXFF(t, addr)
	// On allow, copy_headers handed the headers to the app's request too.
	resp, _ := checkGet(t, checkClientFrom(t, "127.0.0.4"), "http://"+addr+"/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"per-ip";r=2;t=30`, up.last().Get("RateLimit"))
	// Caddy overwrites X-Forwarded-Uri/-Method and passes a client's
	// X-Original-URI on: the default --http-forwarded-headers forwarded.
	checkForgedPath(t, addr)
}

// docs/http-check.md's nginx.conf and Caddyfile, and both with their
// failing-open block swapped in, are accepted as they are written by
// `nginx -t` and `caddy validate`; the other tests run them with their ports
// changed.
func TestGatewayHTTPDocConfigsAsWritten(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprintf("nginx/fail-open=%v", open), func(t *testing.T) {
			bin := checkGatewayBin(t, "/usr/sbin/nginx")
			if os.Geteuid() != 0 {
				t.Skip("SKIPPED: nginx -t of the file as written opens the system's log files: run as root")
			}
			conf := docBlock(t, "http-check.md", "## nginx (`auth_request`)", "nginx")
			if open {
				conf = replaceBlock(t, conf, docBlock(t, "http-check.md", "### nginx, failing open", "nginx"))
			}
			file := filepath.Join(t.TempDir(), "nginx.conf")
			require.NoError(t, os.WriteFile(file, []byte(conf), 0o644))
			out, err := exec.Command(bin, "-t", "-c", file).CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "test is successful")
		})
		t.Run(fmt.Sprintf("caddy/fail-open=%v", open), func(t *testing.T) {
			bin := checkGatewayBin(t, "/usr/bin/caddy")
			dir := t.TempDir()
			conf := docBlock(t, "http-check.md", "## Caddy (`forward_auth`)", "caddyfile")
			if open {
				conf = replaceBlock(t, conf, docBlock(t, "http-check.md", "### Caddy, failing open", "caddyfile"))
			}
			file := filepath.Join(dir, "Caddyfile")
			require.NoError(t, os.WriteFile(file, []byte(conf), 0o644))
			cmd := exec.Command(bin, "validate", "--config", file, "--adapter", "caddyfile")
			cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "Valid configuration")
		})
	}
}

// docs/http-check.md's nginx and Caddy files, failing closed as written and
// open with the documented block swapped in: while cellserver runs the
// check decides; once it is stopped, closed answers 503 with Retry-After
// and open lets the application answer, with no rate-limit fields. An
// application that cannot be reached is a 502 either way, not taken for a
// cellserver that cannot.
func TestGatewayHTTPUnreachable(t *testing.T) {
	for _, gw := range []string{"nginx", "caddy"} {
		for _, open := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fail-open=%v", gw, open), func(t *testing.T) {
				var srv *checkServer
				up := newCheckUpstream(t)
				var addr string
				if gw == "nginx" {
					srv = startCheckServer(t, "--http-forwarded-headers", "original")
					addr = startCheckNginx(t, srv.HTTP, up.URL, gatewayConf{failOpen: open})
				} else {
					srv = startCheckServer(t, "--http-trusted-hops", "1")
					addr = startCheckCaddy(t, srv.HTTP, strings.TrimPrefix(up.URL, "http://"), gatewayConf{failOpen: open})
				}
				c := checkClientFrom(t, "127.0.0.2")
				url := "http://" + addr + "/app/page"
				resp, body := checkGet(t, c, url)
				checkAllowed(t, resp, body, 2)

				if !open {
					up.Close()
					resp, body = checkGet(t, c, url)
					assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "the application is down, cellserver is not: %s", body)
					assert.Empty(t, resp.Header.Get("Retry-After"))
				}

				require.Equal(t, 0, srv.Stop(), "cellserver stops cleanly")
				for range 2 { // a kept-alive connection to the check does not change it
					resp, body = checkGet(t, c, url)
					if open {
						assert.Equal(t, http.StatusOK, resp.StatusCode, body)
						assert.Equal(t, "app", body)
					} else {
						assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
						assert.Equal(t, "1", resp.Header.Get("Retry-After"))
					}
					for _, h := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Remaining"} {
						assert.Empty(t, resp.Header.Get(h), h)
					}
				}
			})
		}
	}
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
	t.Run("idle connections give way", func(t *testing.T) {
		srv := startCheckServer(t, "--http-max-conns", "64")
		// 64 keep-alive connections, each answered once and left open,
		// hold every place; so do silent ones. A gateway's new connection
		// is served all the same: the one waiting longest is closed for it.
		for range 63 {
			resp := checkRaw(t, srv.HTTP, get+"\r\n")
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
		silent, err := net.DialTimeout("tcp", srv.HTTP, 5*time.Second)
		require.NoError(t, err)
		defer silent.Close()
		c := checkClientFrom(t, "127.0.0.2")
		for i := range 3 {
			resp, _ := checkGet(t, c, "http://"+srv.HTTP+"/check/web?d=remote_address", "X-Forwarded-For", "192.0.2.9")
			assert.Equal(t, http.StatusOK, resp.StatusCode, "check %d", i)
			assert.Equal(t, strconv.Itoa(2-i), resp.Header.Get("X-RateLimit-Remaining"))
		}
		require.Eventually(t, func() bool { return strings.Contains(srv.Output(), "closed the connection waiting longest") },
			5*time.Second, 10*time.Millisecond)
		assert.NotContains(t, srv.Output(), "refused a connection")
	})
	t.Run("busy connections refuse", func(t *testing.T) {
		srv := startCheckServer(t, "--http-max-conns", "2")
		// Two connections busy with a request (a /json body that does not
		// come) hold both places; a third is refused. The server's
		// "100 Continue" says that it is reading the body.
		for range 2 {
			nc, err := net.DialTimeout("tcp", srv.HTTP, 5*time.Second)
			require.NoError(t, err)
			defer nc.Close()
			require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
			_, err = io.WriteString(nc, "POST /json HTTP/1.1\r\nHost: check\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
			require.NoError(t, err)
			line, err := bufio.NewReader(nc).ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "HTTP/1.1 100 Continue\r\n", line)
		}
		resp := checkRaw(t, srv.HTTP, get+"\r\n")
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, "too many connections\n", string(b))
		assert.Equal(t, "1", resp.Header.Get("Retry-After"))
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
