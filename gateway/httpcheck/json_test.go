package httpcheck

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
)

func (f *fixture) post(t *testing.T, body string) (*http.Response, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body))
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	resp := w.Result()
	return resp, w.Body.String()
}

func TestJSONMirrorsEnvoyRatelimit(t *testing.T) {
	f := newFixture(t)
	const req = `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"dora"}]},{"entries":[{"key":"nosuch"}]}]}`
	for i, want := range []struct {
		status    int
		overall   rlsv3.RateLimitResponse_Code
		remaining uint32
	}{
		{200, rlsv3.RateLimitResponse_OK, 2},
		{200, rlsv3.RateLimitResponse_OK, 1},
		{200, rlsv3.RateLimitResponse_OK, 0},
		{429, rlsv3.RateLimitResponse_OVER_LIMIT, 0},
	} {
		resp, body := f.post(t, req)
		require.Equal(t, want.status, resp.StatusCode, "request %d: %s", i, body)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var out rlsv3.RateLimitResponse
		require.NoError(t, protojson.Unmarshal([]byte(body), &out), body)
		assert.Equal(t, want.overall, out.GetOverallCode(), "request %d", i)
		require.Len(t, out.GetStatuses(), 2)
		st := out.GetStatuses()[0]
		assert.Equal(t, want.overall, st.GetCode())
		assert.Equal(t, "per-user", st.GetCurrentLimit().GetName())
		assert.Equal(t, uint32(3), st.GetCurrentLimit().GetRequestsPerUnit())
		assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, st.GetCurrentLimit().GetUnit())
		assert.Equal(t, want.remaining, st.GetLimitRemaining())
		assert.Equal(t, 30*time.Second, st.GetDurationUntilReset().AsDuration())
		// The unmatched descriptor: OK, no limit.
		assert.Equal(t, rlsv3.RateLimitResponse_OK, out.GetStatuses()[1].GetCode())
		assert.Nil(t, out.GetStatuses()[1].GetCurrentLimit())
		// The headers, in the body and on the response.
		hdr := map[string]string{}
		for _, h := range out.GetResponseHeadersToAdd() {
			hdr[h.GetKey()] = h.GetValue()
		}
		assert.Equal(t, resp.Header.Get("RateLimit"), hdr["RateLimit"])
		assert.Contains(t, hdr["RateLimit-Policy"], `"per-user";q=3;w=60`)
		if want.status == 429 {
			assert.Equal(t, "30", hdr["Retry-After"])
		}
	}
}

func TestJSONUnlimited(t *testing.T) {
	f := newFixture(t)
	resp, body := f.post(t, `{"domain":"api","descriptors":[{"entries":[{"key":"vip","value":"v"}]}]}`)
	require.Equal(t, 200, resp.StatusCode, body)
	var out rlsv3.RateLimitResponse
	require.NoError(t, protojson.Unmarshal([]byte(body), &out), body)
	st := out.GetStatuses()[0]
	assert.Equal(t, rlsv3.RateLimitResponse_OK, st.GetCode())
	assert.Equal(t, uint32(math.MaxUint32), st.GetLimitRemaining())
	assert.Nil(t, st.GetDurationUntilReset())
	assert.Empty(t, out.GetResponseHeadersToAdd(), "an unlimited limit adds no headers")
}

func TestJSONHitsAndOverride(t *testing.T) {
	f := newFixture(t)
	// A descriptor's own hits_addend (a string in proto JSON: a UInt64Value).
	resp, body := f.post(t, `{"domain":"api","hits_addend":1,"descriptors":[{"entries":[{"key":"user","value":"eve"}],"hits_addend":4}]}`)
	assert.Equal(t, 429, resp.StatusCode, body)
	resp, body = f.post(t, `{"domain":"api","hits_addend":3,"descriptors":[{"entries":[{"key":"user","value":"eve"}]}]}`)
	assert.Equal(t, 200, resp.StatusCode, "the refusal charged nothing: %s", body)

	// A limit override replaces the configured 3 a minute by 1 a minute.
	const over = `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"frank"}],"limit":{"requests_per_unit":1,"unit":"MINUTE"}}]}`
	resp, body = f.post(t, over)
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.Contains(t, body, `"requestsPerUnit":1`)
	resp, body = f.post(t, over)
	assert.Equal(t, 429, resp.StatusCode, body)
}

// An override with unit UNKNOWN (none given) is ignored, as the gRPC
// service and envoyproxy/ratelimit do: the file's 3 a minute applies.
func TestJSONOverrideWithoutUnitIsIgnored(t *testing.T) {
	f := newFixture(t)
	for _, limit := range []string{`{"requests_per_unit":1}`, `{"requests_per_unit":1,"unit":"UNKNOWN"}`} {
		user := fmt.Sprintf("u%d", len(limit))
		req := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"` + user + `"}],"limit":` + limit + `}]}`
		for i := range 3 {
			resp, body := f.post(t, req)
			require.Equal(t, 200, resp.StatusCode, "%s #%d: %s", limit, i, body)
			var out rlsv3.RateLimitResponse
			require.NoError(t, protojson.Unmarshal([]byte(body), &out))
			cl := out.GetStatuses()[0].GetCurrentLimit()
			assert.Equal(t, "per-user", cl.GetName())
			assert.Equal(t, uint32(3), cl.GetRequestsPerUnit())
			assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, cl.GetUnit())
			assert.Equal(t, uint32(2-i), out.GetStatuses()[0].GetLimitRemaining())
		}
		resp, body := f.post(t, req)
		assert.Equal(t, 429, resp.StatusCode, "%s: %s", limit, body)
	}
}

func TestJSONErrors(t *testing.T) {
	f := newFixture(t)
	many := strings.Repeat(`{"entries":[{"key":"user","value":"x"}]},`, 17)
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{`, 400, "not a RateLimitRequest in proto JSON"},
		{`{"domain":"api","nosuch":1}`, 400, "not a RateLimitRequest"},
		{`{"domain":"api","descriptors":[]}`, 400, "no descriptors"},
		{`{"domain":"","descriptors":[{"entries":[{"key":"user","value":"x"}]}]}`, 400, "names no domain"},
		{`{"domain":"api","descriptors":[` + strings.TrimSuffix(many, ",") + `]}`, 400, "more than 16 descriptors"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"x"}],"is_negative_hits":true}]}`, 400, "is_negative_hits (giving quota back) is not supported"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"x"}],"limit":{"requests_per_unit":1,"unit":"SECOND","unit_multiplier":2}}]}`, 400, "unit_multiplier"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"x"}],"limit":{"requests_per_unit":1,"unit":99}}]}`, 400, "unknown unit 99"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"` + strings.Repeat("v", 300) + `"}]}]}`, 400, "key exceeds"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"` + strings.Repeat("v", MaxJSONBody) + `"}]}]}`, 413, "request body over 65536 bytes"},
	} {
		resp, body := f.post(t, c.body)
		assert.Equal(t, c.status, resp.StatusCode, "%.80s: %s", c.body, body)
		assert.Contains(t, body, c.want, "%.80s", c.body)
		assert.Equal(t, 1, strings.Count(body, "\n"), "one line: %.200q", body)
	}
	resp, _ := f.post(t, ``)
	assert.Equal(t, 400, resp.StatusCode, "an empty body is no request")

	r := httptest.NewRequest(http.MethodGet, "/json", nil)
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
}

func TestJSONStoreClosedIs503(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.st.Close())
	resp, body := f.post(t, `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"x"}]}]}`)
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "store could not decide: service: shutting down\n", body)
	assert.Contains(t, f.logged(), "http /json: the store could not decide")
}
