package rls

import (
	"errors"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// codec is grpc's proto codec, except that a RateLimitRequest whose strings
// are not valid UTF-8 is decoded anyway, byte for byte.
//
// Envoy copies request header bytes into descriptor values as they are, and
// its C++ protobuf serialises invalid UTF-8 without complaint; protobuf-go
// refuses such a proto3 string, which grpc answers INTERNAL, which Envoy
// (failure_mode_deny false, its default) lets through: a client could
// escape its limit by sending one byte 0xff in a header. The engine's keys
// are binary-safe (the HTTP check buckets such bytes already), and a Go
// string may hold any bytes.
type codec struct{ std encoding.CodecV2 }

func newCodec() codec { return codec{std: encoding.GetCodecV2(grpcproto.Name)} }

func (c codec) Name() string { return grpcproto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.std.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.std.Unmarshal(data, v)
	req, ok := v.(*rlspb.RateLimitRequest)
	if err == nil || !ok {
		return err
	}
	// The lenient decoder differs from proto.Unmarshal only in not
	// validating UTF-8 (everything else it hands to proto.Unmarshal), so
	// if it succeeds, that was the only fault. Otherwise the original
	// error stands.
	b := data.Materialize()
	proto.Reset(req)
	if unmarshalLenient(b, req.ProtoReflect(), 0) != nil {
		proto.Reset(req)
		return err
	}
	return nil
}

// maxLenientDepth bounds the recursion of unmarshalLenient (RateLimitRequest
// nests three deep; protobuf-go's own bound is 10000).
const maxLenientDepth = 32

var errTooDeep = errors.New("rls: message nested too deep")

// unmarshalLenient merges the wire bytes b into m as proto.Unmarshal does,
// except that string fields take their bytes unvalidated: each field of
// string kind is set directly, each of message kind decoded by recursion,
// and every other field (numbers, enums, bytes, maps, unknown fields)
// handed as its own wire bytes to proto.Unmarshal with Merge.
func unmarshalLenient(b []byte, m protoreflect.Message, depth int) error {
	if depth > maxLenientDepth {
		return errTooDeep
	}
	fields := m.Descriptor().Fields()
	merge := proto.UnmarshalOptions{Merge: true}
	for len(b) > 0 {
		num, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return protowire.ParseError(tagLen)
		}
		n := protowire.ConsumeFieldValue(num, typ, b[tagLen:])
		if n < 0 {
			return protowire.ParseError(n)
		}
		field, value := b[:tagLen+n], b[tagLen:tagLen+n]
		b = b[tagLen+n:]
		fd := fields.ByNumber(num)
		switch {
		case fd == nil || typ != protowire.BytesType || fd.IsMap():
		case fd.Kind() == protoreflect.StringKind:
			s, _ := protowire.ConsumeBytes(value)
			v := protoreflect.ValueOfString(string(s))
			if fd.IsList() {
				m.Mutable(fd).List().Append(v)
			} else {
				m.Set(fd, v)
			}
			continue
		case fd.Kind() == protoreflect.MessageKind:
			s, _ := protowire.ConsumeBytes(value)
			var sub protoreflect.Message
			if fd.IsList() {
				sub = m.Mutable(fd).List().AppendMutable().Message()
			} else {
				sub = m.Mutable(fd).Message()
			}
			if err := unmarshalLenient(s, sub, depth+1); err != nil {
				return err
			}
			continue
		}
		if err := merge.Unmarshal(field, m.Interface()); err != nil {
			return err
		}
	}
	return nil
}
