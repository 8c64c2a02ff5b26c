package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// metricsPolicy is the policy of the Prometheus test's gateway calls: two
// requests an hour per user, and a shadow-mode limit of one.
const metricsPolicy = `
domain: metrics
descriptors:
  - key: user
    rate_limit:
      name: per-hour
      unit: hour
      requests_per_unit: 2
  - key: canary
    shadow_mode: true
    rate_limit:
      name: canary
      unit: hour
      requests_per_unit: 1
`

// prometheusBin is Debian's Prometheus (test.sh installs it).
const prometheusBin = "/usr/bin/prometheus"

// startMetricsServer starts cellserver serving /metrics on a free port of
// its own (--metrics-addr) and returns it and the metrics address.
func startMetricsServer(t *testing.T, extra ...string) (*server, string) {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		maddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		args := append([]string{"--data-dir", t.TempDir(), "--metrics-addr", maddr}, extra...)
		s, err := tryStartServer(t, "127.0.0.1", args)
		if err == nil {
			return s, maddr
		}
		lastErr = err
	}
	t.Fatalf("cellserver with --metrics-addr did not start: %v", lastErr)
	return nil, ""
}

// promProc is one running Prometheus process.
type promProc struct {
	url string // http://host:port
	out *lockedBuffer
}

// startPrometheus runs Prometheus scraping target's /metrics every second,
// its storage in a temporary directory; it is killed at cleanup.
func startPrometheus(t *testing.T, target string) *promProc {
	t.Helper()
	if _, err := os.Stat(prometheusBin); err != nil {
		t.Skipf("SKIPPED: %s is not installed (apt-get install prometheus; test.sh installs it): the Prometheus scrape test did not run", prometheusBin)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: cellserver
    static_configs:
      - targets: [%q]
`, target)), 0o644))
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	p := &promProc{url: "http://" + addr, out: &lockedBuffer{}}
	cmd := exec.Command(prometheusBin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus output:\n%s", p.out.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited early:\n%s", p.out.String())
		default:
		}
		if res, err := http.Get(p.url + "/-/ready"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready on %s within 60s:\n%s", addr, p.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// query runs an instant query and returns the single sample's value, or ""
// when the result is empty.
func (p *promProc) query(t *testing.T, q string) (string, error) {
	t.Helper()
	res, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return "", err
	}
	if body.Status != "success" {
		return "", fmt.Errorf("query %s: %s", q, body.Error)
	}
	switch len(body.Data.Result) {
	case 0:
		return "", nil
	case 1:
		v, _ := body.Data.Result[0].Value[1].(string)
		return v, nil
	}
	return "", fmt.Errorf("query %s: %d series, want one", q, len(body.Data.Result))
}

// waitQuery polls q until Prometheus answers want (a scrape happens every
// second), failing after a deadline with the last answer.
func (p *promProc) waitQuery(t *testing.T, q, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got string
	var err error
	for time.Now().Before(deadline) {
		if got, err = p.query(t, q); err == nil && got == want {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("prometheus: %s = %q (err %v), want %q within 30s", q, got, err, want)
}

// TestPrometheusScrapesDecisions: a real Prometheus scraping the real
// binary's /metrics (--metrics-addr) returns the allowed and limited
// counts the test produced, over RESP (CL.THROTTLE, CL.LIMIT), Envoy's
// RLS gRPC and the HTTP check, the same the server's INFO ratelimit and
// /metrics show.
func TestPrometheusScrapesDecisions(t *testing.T) {
	if _, err := os.Stat(prometheusBin); err != nil {
		t.Skipf("SKIPPED: %s is not installed (apt-get install prometheus; test.sh installs it): the Prometheus scrape test did not run", prometheusBin)
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(metricsPolicy), 0o644))
	gaddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	haddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	srv, maddr := startMetricsServer(t, "--policy-file", pol, "--grpc-addr", gaddr, "--http-addr", haddr)
	rdb := srv.Client(t)
	ctx := context.Background()

	// CL.THROTTLE with a burst of 4 in an hour: 5 allowed, then limited;
	// CL.LIMIT FW 3 an hour: 3 allowed, then limited.
	const throttles, limits = 8, 5
	for i := 0; i < throttles; i++ {
		require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", "metrics:t", 4, 1, 3600).Err())
	}
	for i := 0; i < limits; i++ {
		require.NoError(t, rdb.Do(ctx, "CL.LIMIT", "metrics:l", "FW", 3, 3600).Err())
	}
	// Envoy's side: per-hour admits 2 of 5; the shadow limit (1 an hour)
	// is charged by the first passing request and would refuse the second.
	conn, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	user := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ann"}}}
	canary := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "canary", Value: "x"}}}
	var over int
	for i := 0; i < 5; i++ {
		ds := []*rlv3.RateLimitDescriptor{user}
		if i < 2 {
			ds = append(ds, canary)
		}
		res, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "metrics", Descriptors: ds})
		require.NoError(t, err)
		if res.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	require.Equal(t, 3, over, "per-hour admits 2 of 5")
	// A domain the policy does not have: counted, but not as a label.
	_, err = rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "made-up", Descriptors: []*rlv3.RateLimitDescriptor{user}})
	require.NoError(t, err)
	// The HTTP check (forward-auth): per-hour admits 2 of 4 for bob.
	codes := map[int]int{}
	for i := 0; i < 4; i++ {
		req, err := http.NewRequest(http.MethodGet, "http://"+haddr+"/check/metrics?d=user=header:X-User", nil)
		require.NoError(t, err)
		req.Header.Set("X-User", "bob")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		codes[res.StatusCode]++
	}
	require.Equal(t, map[int]int{http.StatusOK: 2, http.StatusTooManyRequests: 2}, codes)

	want := map[string]string{
		`{domain="",frontend="resp",limit="cl.throttle",outcome="allowed"}`:          "5",
		`{domain="",frontend="resp",limit="cl.throttle",outcome="limited"}`:          "3",
		`{domain="",frontend="resp",limit="cl.limit",outcome="allowed"}`:             "3",
		`{domain="",frontend="resp",limit="cl.limit",outcome="limited"}`:             "2",
		`{domain="metrics",frontend="grpc",limit="per-hour",outcome="allowed"}`:      "2",
		`{domain="metrics",frontend="grpc",limit="per-hour",outcome="limited"}`:      "3",
		`{domain="metrics",frontend="grpc",limit="canary",outcome="allowed"}`:        "1",
		`{domain="metrics",frontend="grpc",limit="canary",outcome="shadow_limited"}`: "1",
		`{domain="",frontend="grpc",limit="",outcome="allowed"}`:                     "1",
	}

	// /metrics itself, and INFO ratelimit: the same counters.
	res, err := http.Get("http://" + maddr + "/metrics")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.NotContains(t, string(page), `domain="made-up"`, "a client-named domain must not become a label")
	// /metrics on --http-addr is the same registry.
	res, err = http.Get("http://" + haddr + "/metrics")
	require.NoError(t, err)
	onHTTP, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	assert.Contains(t, string(onHTTP), "\ncellserver_ratelimit_decisions_total{domain=\"metrics\",frontend=\"http\",limit=\"per-hour\",outcome=\"limited\"} 2\n")
	info, err := rdb.Info(ctx, "ratelimit").Result()
	require.NoError(t, err)
	for sel, v := range want {
		assert.True(t, strings.Contains(string(page), "\ncellserver_ratelimit_decisions_total"+sel+" "+v+"\n"), "/metrics lacks %s %s", sel, v)
		assert.Contains(t, info, "cellserver_ratelimit_decisions_total"+sel+":"+v+"\r\n")
	}

	prom := startPrometheus(t, maddr)
	prom.waitQuery(t, `up{job="cellserver"}`, "1")
	for sel, v := range want {
		prom.waitQuery(t, "cellserver_ratelimit_decisions_total"+sel, v)
	}
	prom.waitQuery(t, `cellserver_decision_duration_seconds_count{frontend="resp"}`, strconv.Itoa(throttles+limits))
	prom.waitQuery(t, `cellserver_decision_duration_seconds_count{frontend="grpc"}`, "6")
	prom.waitQuery(t, `cellserver_decision_duration_seconds_count{frontend="http"}`, "4")
	prom.waitQuery(t, `count(cellserver_connections > 0)`, "1")
	prom.waitQuery(t, `cellserver_persistence_enabled`, "1")

	// More traffic: the next scrapes follow.
	require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", "metrics:t", 4, 1, 3600).Err())
	prom.waitQuery(t, `cellserver_ratelimit_decisions_total{frontend="resp",limit="cl.throttle",outcome="limited"}`, "4")
}
