package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/middleware"
)

// With no cellserver to reach, the example's routes do what they promise:
// /api/ fails open under its local ceiling, /login fails closed, and
// /metrics counts the fallbacks.
func TestRoutesWithoutCellserver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nobody listens there now
	rdb := redis.NewClient(middleware.ClientOptions(addr))
	defer rdb.Close()
	mux, err := newMux(rdb, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)

	get := func(method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "192.0.2.1:4000"
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	codes := map[int]int{}
	for i := 0; i < 25; i++ {
		codes[get("GET", "/api/things").Code]++
	}
	assert.Equal(t, map[int]int{200: 20, 429: 5}, codes, "the local GCRA: a burst of 20")
	rec := get("POST", "/login")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))

	body := get("GET", "/metrics").Body.String()
	assert.Contains(t, body, `cellserver_middleware_requests_total{decided_by="local",outcome="allowed",route="api"} 20`)
	assert.Contains(t, body, `cellserver_middleware_requests_total{decided_by="closed",outcome="refused",route="login"} 1`)
	assert.True(t, strings.Contains(body, `cellserver_middleware_fallbacks_total{reason="unreachable",route="api"}`), body)
}
