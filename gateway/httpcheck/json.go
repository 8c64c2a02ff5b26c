package httpcheck

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/gateway/policy"
)

// MaxJSONBody is the largest /json request body: 16 descriptors of 16
// entries need far less.
const MaxJSONBody = 1 << 20

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
	req, err := fromProto(&in)
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
	out, err := protojson.Marshal(toProto(d, fields))
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

// fromProto is the engine's request for an RLS request; what it cannot
// express (negative hits, a unit multiplier) is refused, not ignored.
func fromProto(in *rlsv3.RateLimitRequest) (*gateway.Request, error) {
	if len(in.GetDescriptors()) == 0 {
		return nil, errors.New("the request has no descriptors")
	}
	if len(in.GetDescriptors()) > gateway.MaxDescriptors {
		return nil, gateway.ErrTooManyDescriptors
	}
	req := &gateway.Request{Domain: in.GetDomain(), HitsAddend: uint64(in.GetHitsAddend())}
	req.Descriptors = make([]policy.Descriptor, len(in.GetDescriptors()))
	for i, pd := range in.GetDescriptors() {
		d := &req.Descriptors[i]
		if len(pd.GetEntries()) > MaxEntries {
			return nil, fmt.Errorf("descriptor %d has %d entries, at most %d are allowed", i, len(pd.GetEntries()), MaxEntries)
		}
		if pd.GetIsNegativeHits() {
			return nil, fmt.Errorf("descriptor %d: negative hits are not supported", i)
		}
		for _, e := range pd.GetEntries() {
			d.Entries = append(d.Entries, policy.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if pd.GetHitsAddend() != nil {
			d.HitsAddend, d.HasHits = pd.GetHitsAddend().GetValue(), true
		}
		if o := pd.GetLimit(); o != nil {
			if m := o.GetUnitMultiplier(); m != nil && m.GetValue() != 1 {
				return nil, fmt.Errorf("descriptor %d: a limit override's unit_multiplier is not supported", i)
			}
			u, ok := unitFromProto[o.GetUnit()]
			if !ok {
				// A unit this build does not know (a later Envoy's):
				// refused rather than decided as some other window.
				return nil, fmt.Errorf("descriptor %d: a limit override with unknown unit %d", i, int32(o.GetUnit()))
			}
			d.Override = &policy.Override{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u}
		}
	}
	return req, nil
}

// unitFromProto are the units a limit override may name, as the gRPC
// service's (gateway/rls): UNKNOWN (no unit given) is passed on, and the
// policy then ignores the override and applies the file's rule, as
// envoyproxy/ratelimit does.
var unitFromProto = map[typev3.RateLimitUnit]policy.Unit{
	typev3.RateLimitUnit_UNKNOWN: policy.UnitUnknown,
	typev3.RateLimitUnit_SECOND:  policy.Second,
	typev3.RateLimitUnit_MINUTE:  policy.Minute,
	typev3.RateLimitUnit_HOUR:    policy.Hour,
	typev3.RateLimitUnit_DAY:     policy.Day,
	typev3.RateLimitUnit_MONTH:   policy.Month,
	typev3.RateLimitUnit_YEAR:    policy.Year,
}

var unitToProto = map[policy.Unit]rlsv3.RateLimitResponse_RateLimit_Unit{
	policy.Second: rlsv3.RateLimitResponse_RateLimit_SECOND,
	policy.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	policy.Hour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	policy.Day:    rlsv3.RateLimitResponse_RateLimit_DAY,
	policy.Week:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	policy.Month:  rlsv3.RateLimitResponse_RateLimit_MONTH,
	policy.Year:   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// toProto is the RLS response of a decision, fields its headers.
func toProto(d *gateway.Decision, fields []header.Field) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(d.Overall)}
	for _, s := range d.Statuses {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           rlsv3.RateLimitResponse_Code(s.Code),
			LimitRemaining: s.Remaining,
		}
		if s.Limit != nil {
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
				Name:            s.Limit.Name,
				RequestsPerUnit: s.Limit.RequestsPerUnit,
				Unit:            unitToProto[s.Limit.Unit],
			}
			if s.Limit.Unlimited {
				st.LimitRemaining = math.MaxUint32
			} else {
				st.DurationUntilReset = durationpb.New(s.ResetAfter)
			}
		}
		out.Statuses = append(out.Statuses, st)
	}
	for _, f := range fields {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: f.Name, Value: f.Value})
	}
	return out
}
