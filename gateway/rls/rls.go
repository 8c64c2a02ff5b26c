// Package rls is Envoy's global rate-limit service (RLS v3,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on
// cellserver's gateway engine: the request's descriptors are decided in one
// all-or-nothing step (package gateway), and the decision is answered in
// Envoy's terms, with the IETF RateLimit/RateLimit-Policy and X-RateLimit-*
// headers in response_headers_to_add and a problem+json body on OVER_LIMIT.
//
// Quick start (cmd/cellserver does this for --grpc-addr):
//
//	srv, err := rls.New(rls.Config{Engine: eng, Headers: header.Default})
//	ln, err := net.Listen("tcp", ":8081")
//	go srv.Serve(ln)
//	defer srv.Shutdown(5 * time.Second)
//
// The mapping follows envoyproxy/ratelimit (src/service/ratelimit.go) where
// the RLS contract leaves a choice: statuses in descriptor order, a
// descriptor that matches no limit answered OK with no current_limit, an
// unlimited one OK with limit_remaining MaxUint32, a shadow-mode one OK
// whatever its count; overall_code OVER_LIMIT when any enforced limit
// refuses. Unlike it, a refused request charges none of its limits.
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/gateway/policy"
)

// Frontend is the front-end name the engine's observer (metrics) sees.
const Frontend = "grpc"

// MaxEntries is the most entries one descriptor may carry. Envoy builds one
// entry per rate_limits action, and a policy tree is only a few levels
// deep: a longer descriptor can match nothing and is refused as malformed.
const MaxEntries = 64

// Errors of a request that cannot be decided as sent (InvalidArgument).
var (
	ErrNoDescriptors = errors.New("rls: the request has no descriptors")
	ErrNegativeHits  = errors.New("rls: is_negative_hits (giving quota back) is not supported")
)

// Service implements rlspb.RateLimitServiceServer on an engine. Safe for
// concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	eng  *gateway.Engine
	conv header.Convention
	log  *slog.Logger
}

// NewService returns the RLS handler deciding with eng and writing the
// header sets of conv. log may be nil (no logging).
func NewService(eng *gateway.Engine, conv header.Convention, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{eng: eng, conv: conv, log: log}
}

// ShouldRateLimit decides one request. Its errors are gRPC statuses:
// InvalidArgument for a request that cannot be decided as sent (no domain,
// no descriptors, too many, a key too long, an unsupported field),
// Unavailable when the store cannot answer (Envoy then applies its
// failure_mode_deny), and the context's own status when Envoy has given up
// on the call before it was decided (nothing is charged then).
func (s *Service) ShouldRateLimit(ctx context.Context, in *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	// Envoy waits 20 ms by default and then fails open or closed on its
	// own: a call it no longer waits for must not spend quota.
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	req, err := Request(in)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	d, err := s.eng.Check(Frontend, req)
	if err != nil {
		if gateway.IsUnavailable(err) {
			s.log.Debug("rls: the store cannot decide", "domain", in.GetDomain(), "err", err)
			return nil, status.Error(codes.Unavailable, "rls: the rate-limit store cannot decide: "+err.Error())
		}
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return Response(d, s.conv), nil
}

// Request converts Envoy's request to the engine's, refusing what the
// engine cannot decide as meant (the error is one line). The HTTP check's
// /json, envoyproxy/ratelimit's RLS over JSON, uses it too.
func Request(in *rlspb.RateLimitRequest) (*gateway.Request, error) {
	if in.GetDomain() == "" {
		return nil, gateway.ErrEmptyDomain
	}
	ds := in.GetDescriptors()
	switch {
	case len(ds) == 0:
		return nil, ErrNoDescriptors // envoyproxy/ratelimit refuses it too
	case len(ds) > gateway.MaxDescriptors:
		return nil, gateway.ErrTooManyDescriptors
	}
	req := &gateway.Request{
		Domain:      in.GetDomain(),
		Descriptors: make([]policy.Descriptor, len(ds)),
		HitsAddend:  uint64(in.GetHitsAddend()), // 0 means 1: the engine's rule
	}
	for i, d := range ds {
		if err := descriptor(d, &req.Descriptors[i]); err != nil {
			return nil, fmt.Errorf("descriptor %d: %w", i, err)
		}
	}
	return req, nil
}

func descriptor(in *rlv3.RateLimitDescriptor, out *policy.Descriptor) error {
	es := in.GetEntries()
	if len(es) > MaxEntries {
		return fmt.Errorf("more than %d entries", MaxEntries)
	}
	if in.GetIsNegativeHits() {
		return ErrNegativeHits
	}
	out.Entries = make([]policy.Entry, len(es))
	for j, e := range es {
		out.Entries[j] = policy.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	if h := in.GetHitsAddend(); h != nil {
		out.HitsAddend, out.HasHits = h.GetValue(), true
	}
	if l := in.GetLimit(); l != nil {
		u, ok := overrideUnits[l.GetUnit()]
		if !ok {
			// A unit this build does not know (a later Envoy's): refused
			// rather than decided as some other window.
			return fmt.Errorf("limit override with unknown unit %d", int32(l.GetUnit()))
		}
		if m := l.GetUnitMultiplier(); m != nil && m.GetValue() != 1 {
			// A window of m units is no fixed window of one unit: deciding
			// it as one would answer another limit than the one asked for.
			return fmt.Errorf("limit override with unit_multiplier %d (only 1 is supported)", m.GetValue())
		}
		out.Override = &policy.Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: u}
	}
	return nil
}

// overrideUnits are the units a limit override may name (envoy.type.v3
// has no week). UNKNOWN is passed on: the policy then ignores the
// override and applies the file's rule, as envoyproxy/ratelimit does.
var overrideUnits = map[typev3.RateLimitUnit]policy.Unit{
	typev3.RateLimitUnit_UNKNOWN: policy.UnitUnknown,
	typev3.RateLimitUnit_SECOND:  policy.Second,
	typev3.RateLimitUnit_MINUTE:  policy.Minute,
	typev3.RateLimitUnit_HOUR:    policy.Hour,
	typev3.RateLimitUnit_DAY:     policy.Day,
	typev3.RateLimitUnit_MONTH:   policy.Month,
	typev3.RateLimitUnit_YEAR:    policy.Year,
}

// responseUnits are current_limit's units.
var responseUnits = map[policy.Unit]rlspb.RateLimitResponse_RateLimit_Unit{
	policy.Second: rlspb.RateLimitResponse_RateLimit_SECOND,
	policy.Minute: rlspb.RateLimitResponse_RateLimit_MINUTE,
	policy.Hour:   rlspb.RateLimitResponse_RateLimit_HOUR,
	policy.Day:    rlspb.RateLimitResponse_RateLimit_DAY,
	policy.Week:   rlspb.RateLimitResponse_RateLimit_WEEK,
	policy.Month:  rlspb.RateLimitResponse_RateLimit_MONTH,
	policy.Year:   rlspb.RateLimitResponse_RateLimit_YEAR,
}

func code(c gateway.Code) rlspb.RateLimitResponse_Code {
	switch c {
	case gateway.OK:
		return rlspb.RateLimitResponse_OK
	case gateway.OverLimit:
		return rlspb.RateLimitResponse_OVER_LIMIT
	}
	return rlspb.RateLimitResponse_UNKNOWN
}

// Response maps a decision, with the header sets of conv. The headers are the enforced limits' (shadow
// and unlimited ones show none, so a shadow-only request gets none); on
// OVER_LIMIT Envoy sends raw_body as the 429's body, and takes the body's
// content-type from response_headers_to_add (it drops its own text/plain
// for it), so the header goes with the body and only then: on OK Envoy
// copies these headers onto the upstream's response, whose own
// content-type they must not replace.
func Response(d *gateway.Decision, conv header.Convention) *rlspb.RateLimitResponse {
	out := &rlspb.RateLimitResponse{
		OverallCode: code(d.Overall),
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(d.Statuses)),
	}
	for i := range d.Statuses {
		out.Statuses[i] = descriptorStatus(&d.Statuses[i])
	}
	v := d.Values()
	fields := conv.Append(make([]header.Field, 0, 8), &v)
	if d.Overall == gateway.OverLimit {
		out.RawBody = header.ProblemJSON(&v, d.Violated())
		fields = append(fields, header.Field{Name: "content-type", Value: header.ContentTypeProblem})
	}
	if len(fields) > 0 {
		out.ResponseHeadersToAdd = make([]*corev3.HeaderValue, len(fields))
		for i, f := range fields {
			out.ResponseHeadersToAdd[i] = &corev3.HeaderValue{Key: f.Name, Value: f.Value}
		}
	}
	return out
}

// descriptorStatus maps one status. A descriptor that matched no limit
// (or whose limit another replaced) has no current_limit; an unlimited one
// neither, with limit_remaining MaxUint32 (the engine's), as
// envoyproxy/ratelimit answers both.
func descriptorStatus(st *gateway.Status) *rlspb.RateLimitResponse_DescriptorStatus {
	out := &rlspb.RateLimitResponse_DescriptorStatus{Code: code(st.Code), LimitRemaining: st.Remaining}
	l := st.Limit
	if l == nil || l.Unlimited {
		return out
	}
	out.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{
		Name:            l.Name,
		RequestsPerUnit: l.RequestsPerUnit,
		Unit:            responseUnits[l.Unit],
	}
	out.DurationUntilReset = durationpb.New(st.ResetAfter)
	return out
}
