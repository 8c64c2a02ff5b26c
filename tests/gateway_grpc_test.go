package tests

// End-to-end tests of Envoy's rate-limit service (--grpc-addr): the real
// binary with a policy file, and a client built from go-control-plane's RLS
// types playing Envoy's ratelimit filter.

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cellserver/cellserver/gateway/header/headertest"
)

// rlsPolicy is an envoyproxy/ratelimit configuration, unchanged.
const rlsPolicy = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      name: per-minute
      unit: minute
      requests_per_unit: 3
  - key: user
    rate_limit:
      name: per-day
      unit: day
      requests_per_unit: 100
  - key: canary
    shadow_mode: true
    rate_limit:
      name: canary
      unit: minute
      requests_per_unit: 1
  - key: internal
    rate_limit:
      unlimited: true
`

// rlsT0 is a UTC midnight in ns: the server clock is frozen there, so every
// fixed window starts at it and the counts and resets are exact.
const rlsT0 = int64(1_699_920_000) * int64(time.Second)

type rlsServer struct {
	*server
	GRPCAddr string
	RLS      rlspb.RateLimitServiceClient
	Health   healthpb.HealthClient
}

// startRLS starts cellserver with rlsPolicy and --grpc-addr (plus args),
// with its clock frozen at rlsT0 unless frozen is false.
func startRLS(t *testing.T, frozen bool, args ...string) *rlsServer {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(rlsPolicy), 0o600))
	grpcAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	args = append([]string{"--policy-file", pol, "--grpc-addr", grpcAddr, "--enable-debug-command", "yes"}, args...)
	s := startServer(t, args...)
	if frozen {
		rdb := s.Client(t)
		require.NoError(t, rdb.Do(ctxT(t, 10*time.Second), "DEBUG", "CLOCK", "SET", rlsT0).Err())
		require.NoError(t, rdb.Close())
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &rlsServer{server: s, GRPCAddr: grpcAddr, RLS: rlspb.NewRateLimitServiceClient(conn), Health: healthpb.NewHealthClient(conn)}
}

// rlsDesc is one descriptor of key=value entries, as Envoy's actions build
// them (remote_address, request_headers, generic_key, ...).
func rlsDesc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (s *rlsServer) limit(t *testing.T, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := s.RLS.ShouldRateLimit(ctxT(t, 10*time.Second), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits})
	require.NoError(t, err)
	require.Len(t, resp.Statuses, len(ds))
	return resp
}

// rlsHeaders returns response_headers_to_add by lower-case name (Envoy's
// header maps are case-insensitive); a name sent twice fails.
func rlsHeaders(t *testing.T, resp *rlspb.RateLimitResponse) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		k := strings.ToLower(h.Key)
		_, dup := m[k]
		require.False(t, dup, "%s sent twice", k)
		m[k] = h.Value
	}
	return m
}

// parseRLSList parses a RateLimit or RateLimit-Policy value.
func parseRLSList(t *testing.T, v string) []headertest.Item {
	t.Helper()
	items, err := headertest.ParseList(v)
	require.NoError(t, err)
	return items
}

func paramInt(t *testing.T, it headertest.Item, k string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(it.Params[k], 10, 64)
	require.NoError(t, err, "%s=%q of %q", k, it.Params[k], it.Name)
	return n
}

func headerInt(t *testing.T, hs map[string]string, k string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(hs[k], 10, 64)
	require.NoError(t, err, "%s: %q", k, hs[k])
	return n
}

func TestGRPCRateLimitService(t *testing.T) {
	t.Parallel()
	s := startRLS(t, true)
	const day = int64(24 * 3600)

	t.Run("statuses in order", func(t *testing.T) {
		resp := s.limit(t, 0,
			rlsDesc("user", "u-order"),
			rlsDesc("internal", "batch"),
			rlsDesc("nothing", "matches"),
			rlsDesc("remote_address", "10.0.0.1"),
		)
		assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
		st := resp.Statuses
		require.NotNil(t, st[0].CurrentLimit)
		assert.Equal(t, "per-day", st[0].CurrentLimit.Name)
		assert.Equal(t, uint32(100), st[0].CurrentLimit.RequestsPerUnit)
		assert.Equal(t, rlspb.RateLimitResponse_RateLimit_DAY, st[0].CurrentLimit.Unit)
		assert.Equal(t, uint32(99), st[0].LimitRemaining)
		assert.Equal(t, 24*time.Hour, st[0].DurationUntilReset.AsDuration())

		assert.Equal(t, rlspb.RateLimitResponse_OK, st[1].Code)
		assert.Equal(t, uint32(math.MaxUint32), st[1].LimitRemaining, "unlimited")
		assert.Nil(t, st[1].CurrentLimit)

		assert.Equal(t, rlspb.RateLimitResponse_OK, st[2].Code)
		assert.Nil(t, st[2].CurrentLimit, "no limit matched")

		require.NotNil(t, st[3].CurrentLimit)
		assert.Equal(t, "per-minute", st[3].CurrentLimit.Name)
		assert.Equal(t, rlspb.RateLimitResponse_RateLimit_MINUTE, st[3].CurrentLimit.Unit)
		assert.Equal(t, uint32(2), st[3].LimitRemaining)
		assert.Equal(t, time.Minute, st[3].DurationUntilReset.AsDuration())
	})

	t.Run("minute refusal leaves the day", func(t *testing.T) {
		ip, user := rlsDesc("remote_address", "10.0.0.2"), rlsDesc("user", "u-day")
		var over int
		for i := 1; i <= 6; i++ {
			resp := s.limit(t, 0, ip, user)
			if i <= 3 {
				require.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode, "request %d", i)
				assert.Equal(t, uint32(100-i), resp.Statuses[1].LimitRemaining, "request %d charges the day", i)
				continue
			}
			over++
			assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.OverallCode, "request %d", i)
			assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.Statuses[0].Code)
			assert.Equal(t, rlspb.RateLimitResponse_OK, resp.Statuses[1].Code)
			assert.Equal(t, uint32(97), resp.Statuses[1].LimitRemaining, "request %d: the day is not charged", i)
		}
		assert.Equal(t, 3, over)
		// The day alone still has exactly what the three admitted requests left.
		assert.Equal(t, uint32(96), s.limit(t, 0, user).Statuses[0].LimitRemaining)
	})

	t.Run("shadow mode", func(t *testing.T) {
		for i := range 3 {
			resp := s.limit(t, 0, rlsDesc("canary", "c1"))
			assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode, "call %d", i)
			assert.Equal(t, rlspb.RateLimitResponse_OK, resp.Statuses[0].Code, "call %d", i)
			assert.Empty(t, resp.ResponseHeadersToAdd, "no headers from a shadow limit (call %d)", i)
			assert.Empty(t, resp.RawBody)
		}
		// Beside an enforced limit only the enforced one shows.
		hs := rlsHeaders(t, s.limit(t, 0, rlsDesc("canary", "c1"), rlsDesc("user", "u-canary")))
		pol := parseRLSList(t, hs["ratelimit-policy"])
		require.Len(t, pol, 1)
		assert.Equal(t, "per-day", pol[0].Name)
	})

	t.Run("unlimited", func(t *testing.T) {
		for range 3 {
			resp := s.limit(t, 1000, rlsDesc("internal", "batch"))
			assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
			assert.Equal(t, uint32(math.MaxUint32), resp.Statuses[0].LimitRemaining)
			assert.Empty(t, resp.ResponseHeadersToAdd)
		}
	})

	t.Run("hits_addend", func(t *testing.T) {
		resp := s.limit(t, 2, rlsDesc("remote_address", "10.0.0.3"), rlsDesc("user", "u-hits"))
		assert.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining)
		assert.Equal(t, uint32(98), resp.Statuses[1].LimitRemaining)
		// A descriptor's own hits_addend wins over the request's.
		own := rlsDesc("user", "u-hits")
		own.HitsAddend = wrapperspb.UInt64(10)
		resp = s.limit(t, 1, rlsDesc("remote_address", "10.0.0.3"), own)
		assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
		assert.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining)
		assert.Equal(t, uint32(88), resp.Statuses[1].LimitRemaining)
		// Set to 0 it checks without charging.
		own.HitsAddend = wrapperspb.UInt64(0)
		assert.Equal(t, uint32(88), s.limit(t, 7, own).Statuses[0].LimitRemaining)
	})

	t.Run("headers", func(t *testing.T) {
		ip, user := rlsDesc("remote_address", "10.0.0.4"), rlsDesc("user", "u-headers")
		for i := 1; i <= 3; i++ {
			resp := s.limit(t, 0, ip, user)
			require.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
			hs := rlsHeaders(t, resp)
			assert.NotContains(t, hs, "retry-after")
			assert.NotContains(t, hs, "content-type")
			pol := parseRLSList(t, hs["ratelimit-policy"])
			require.Len(t, pol, 2, hs["ratelimit-policy"])
			for j, want := range []struct {
				name string
				q, w int64
			}{{"per-minute", 3, 60}, {"per-day", 100, day}} {
				assert.Equal(t, want.name, pol[j].Name)
				assert.Equal(t, want.q, paramInt(t, pol[j], "q"), want.name)
				assert.Equal(t, want.w, paramInt(t, pol[j], "w"), want.name)
			}
			// The minute is the closest to refusing.
			rl := parseRLSList(t, hs["ratelimit"])
			require.Len(t, rl, 1)
			assert.Equal(t, "per-minute", rl[0].Name)
			assert.Equal(t, int64(resp.Statuses[0].LimitRemaining), paramInt(t, rl[0], "r"))
			assert.Equal(t, int64(3-i), paramInt(t, rl[0], "r"))
			assert.Equal(t, int64(60), paramInt(t, rl[0], "t"))
			assert.Equal(t, int64(3), headerInt(t, hs, "x-ratelimit-limit"))
			assert.Equal(t, int64(3-i), headerInt(t, hs, "x-ratelimit-remaining"))
			assert.Equal(t, int64(i), headerInt(t, hs, "x-ratelimit-used"))
			assert.Equal(t, rlsT0/int64(time.Second)+60, headerInt(t, hs, "x-ratelimit-reset"), "UTC epoch seconds")
			assert.Equal(t, "per-minute", hs["x-ratelimit-resource"])
		}
	})

	t.Run("over limit body", func(t *testing.T) {
		ip := rlsDesc("remote_address", "10.0.0.4") // spent by "headers"
		resp := s.limit(t, 0, ip, rlsDesc("user", "u-headers"))
		require.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
		hs := rlsHeaders(t, resp)
		assert.Equal(t, "application/problem+json", hs["content-type"])
		assert.Equal(t, int64(60), headerInt(t, hs, "retry-after"))
		rl := parseRLSList(t, hs["ratelimit"])
		require.Len(t, rl, 1)
		assert.Equal(t, int64(0), paramInt(t, rl[0], "r"))
		assert.Equal(t, int64(60), paramInt(t, rl[0], "t"), "t never later than Retry-After")
		var p struct {
			Type       string   `json:"type"`
			Status     int      `json:"status"`
			Violated   []string `json:"violated-policies"`
			RetryAfter int64    `json:"retry-after"`
		}
		require.NoError(t, json.Unmarshal(resp.RawBody, &p), "%s", resp.RawBody)
		assert.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", p.Type)
		assert.Equal(t, 429, p.Status)
		assert.Equal(t, []string{"per-minute"}, p.Violated)
		assert.Equal(t, int64(60), p.RetryAfter)
	})

	t.Run("bad requests", func(t *testing.T) {
		for name, req := range map[string]*rlspb.RateLimitRequest{
			"no domain":      {Descriptors: []*rlv3.RateLimitDescriptor{rlsDesc("user", "x")}},
			"no descriptors": {Domain: "edge"},
		} {
			_, err := s.RLS.ShouldRateLimit(ctxT(t, 10*time.Second), req)
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
		}
	})
}

func TestGRPCHealthAndShutdown(t *testing.T) {
	t.Parallel()
	s := startRLS(t, false)
	for _, name := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		r, err := s.Health.Check(ctxT(t, 10*time.Second), &healthpb.HealthCheckRequest{Service: name})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status, "%q", name)
	}
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	defer cancel()
	w, err := s.Health.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	r, err := w.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status)

	start := time.Now()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	r, err = w.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, r.Status, "shutting down")
	// The server ends the watch once it has said NOT_SERVING: the graceful
	// stop then finishes at once.
	_, err = w.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Equal(t, 0, s.Stop())
	assert.Less(t, time.Since(start), 3*time.Second, "the stop did not wait out its 5 s grace period")
}

// A node that serves no hash slot cannot decide: UNAVAILABLE, so that
// Envoy's failure_mode_deny chooses.
func TestGRPCUnavailable(t *testing.T) {
	t.Parallel()
	s := startRLS(t, false, "--cluster", "yes")
	_, err := s.RLS.ShouldRateLimit(ctxT(t, 10*time.Second), &rlspb.RateLimitRequest{
		Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{rlsDesc("user", "u1")}})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.NotContains(t, status.Convert(err).Message(), "\n")
}

// A taken --grpc-addr stops the start with a clear message.
func TestGRPCAddrTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	out := checkStartFails(t, 1, "--grpc-addr", "--grpc-addr", ln.Addr().String())
	assert.Contains(t, out, "address already in use")
}
