package httpcheck

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/rls"
)

// MaxJSONBody is the largest /json request body: 16 descriptors of 16
// entries need far less. It is also what a connection sending a body slowly
// can hold until the read times out, times --http-max-conns connections
// (at 1 MiB, 300 stalled bodies held 380 MB), so it is the gRPC service's
// message bound, not more.
const MaxJSONBody = 64 << 10

// json is envoyproxy/ratelimit's /json endpoint: a RateLimitRequest in
// proto JSON, answered with the RateLimitResponse in proto JSON, status
// 429 when OVER_LIMIT (200 otherwise), as its server_impl.go does.
// cellserver differs where that one answers 400 to everything: 413 for a
// body over MaxJSONBody, 503 when the store cannot answer (a client can
// retry), 400 for a bad request. The response's headers
// (response_headers_to_add) are also set on the HTTP response.
//
//	POST /json
func (h *Handler) json(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("request body over %d bytes", MaxJSONBody), http.StatusRequestEntityTooLarge)
			return
		}
		badRequest(w, fmt.Errorf("reading the body: %v", err))
		return
	}
	var in rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &in); err != nil {
		badRequest(w, fmt.Errorf("not a RateLimitRequest in proto JSON: %v", err))
		return
	}
	req, err := rls.Request(&in)
	if err != nil {
		badRequest(w, err)
		return
	}
	d, err := h.eng.Check(Frontend, req)
	if err != nil {
		if gateway.IsUnavailable(err) {
			h.jsonLog.Warn("http /json: the store could not decide; answered 503", "err", err.Error())
			http.Error(w, oneLine("store could not decide: "+err.Error()), http.StatusServiceUnavailable)
			return
		}
		badRequest(w, err)
		return
	}
	v := d.Values()
	fields := h.conv.Append(nil, &v)
	out, err := protojson.Marshal(rls.Response(d, h.conv))
	if err != nil { // messages of plain fields: cannot fail
		http.Error(w, "encoding the response failed", http.StatusInternalServerError)
		return
	}
	writeFields(w.Header(), fields)
	w.Header().Set("Content-Type", "application/json")
	if d.Overall == gateway.OverLimit {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
}
