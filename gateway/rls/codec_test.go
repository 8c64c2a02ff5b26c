package rls

import (
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rawCodec passes []byte through, so that a test sends what Envoy's C++
// protobuf would and protobuf-go would not.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }

func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}

// rawRequest encodes RateLimitRequest{domain, descriptors: [{entries:
// [{key, value}]}], hits_addend} by hand.
func rawRequest(domain, key, value string, hits uint64) []byte {
	var entry, d, req []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, key)
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, value)
	d = protowire.AppendTag(d, 1, protowire.BytesType)
	d = protowire.AppendBytes(d, entry)
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendString(req, domain)
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	req = protowire.AppendBytes(req, d)
	if hits > 0 {
		req = protowire.AppendTag(req, 3, protowire.VarintType)
		req = protowire.AppendVarint(req, hits)
	}
	return req
}

// Descriptor values that are not UTF-8 are bucketed byte for byte like any
// other, not refused with INTERNAL (which Envoy lets through by default).
func TestNonUTF8Values(t *testing.T) {
	h := newHarness(t)
	require.Error(t, proto.Unmarshal(rawRequest("rls", "user", "\xff\xfe", 0), &rlspb.RateLimitRequest{}),
		"protobuf-go itself refuses it")
	call := func(value string, hits uint64) *rlspb.RateLimitResponse {
		t.Helper()
		in, out := rawRequest("rls", "user", value, hits), []byte(nil)
		require.NoError(t, h.conn.Invoke(ctxT(t), rlsMethod, &in, &out, grpc.ForceCodec(rawCodec{})))
		resp := &rlspb.RateLimitResponse{}
		require.NoError(t, proto.Unmarshal(out, resp))
		require.Len(t, resp.Statuses, 1)
		return resp
	}
	for i := 1; i <= 3; i++ {
		resp := call("\xff\xfe", 0)
		assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
		assert.Equal(t, "per_minute", resp.Statuses[0].GetCurrentLimit().GetName())
		assert.Equal(t, uint32(3-i), resp.Statuses[0].LimitRemaining, "call %d", i)
	}
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call("\xff\xfe", 0).OverallCode, "charged like any value")
	// Another invalid value is another bucket, and so is the value's
	// valid-UTF-8 replacement: the bytes are kept, not repaired.
	resp := call("\xff\xfd", 2) // hits_addend decoded too
	assert.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining)
	resp = h.call(t, 0, desc("user", "\uFFFD\uFFFD"))
	assert.Equal(t, uint32(2), resp.Statuses[0].LimitRemaining)
	// Health and the typed client keep the standard codec.
	_, err := h.health.Check(ctxT(t), nil)
	require.NoError(t, err)
}

// On valid input the lenient decoder gives what proto.Unmarshal gives,
// every field kind of the request included (and unknown fields kept).
func TestLenientMatchesProto(t *testing.T) {
	d := desc("k1", "v1", "k2", "v2")
	d.HitsAddend = wrapperspb.UInt64(7)
	d.IsNegativeHits = true
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 9, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(2)}
	in := &rlspb.RateLimitRequest{Domain: "dom", Descriptors: []*rlv3.RateLimitDescriptor{d, desc("a", "b")}, HitsAddend: 4}
	b, err := proto.Marshal(in)
	require.NoError(t, err)
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendString(b, "unknown")
	want, got := &rlspb.RateLimitRequest{}, &rlspb.RateLimitRequest{}
	require.NoError(t, proto.Unmarshal(b, want))
	require.NoError(t, unmarshalLenient(b, got.ProtoReflect(), 0))
	assert.True(t, proto.Equal(want, got), "got %v, want %v", got, want)
	assert.Equal(t, want.ProtoReflect().GetUnknown(), got.ProtoReflect().GetUnknown())

	// Malformed wire bytes are still refused.
	require.Error(t, unmarshalLenient(b[:len(b)-3], (&rlspb.RateLimitRequest{}).ProtoReflect(), 0))
}
