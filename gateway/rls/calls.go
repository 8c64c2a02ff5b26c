package rls

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// calls bounds the calls of one kind in flight over every connection, and
// how long each may take to deliver its request.
//
// Both are enforced in the method handlers the service is registered with,
// not in interceptors or a tap: grpc-go calls a unary method's handler
// before the request message is read (the generated handler reads it with
// dec), and interceptors only after. A slot taken and given back in that one
// function cannot leak, whatever way the call ends (cancelled, reset,
// timed out, panicking); a call to an unknown method never gets one.
type calls struct {
	slots       chan struct{} // one element per call in flight
	recvTimeout time.Duration
	what        string // "rate-limit calls", in errors
	log         *slog.Logger
}

func newCalls(max int, recvTimeout time.Duration, what string, log *slog.Logger) *calls {
	return &calls{slots: make(chan struct{}, max), recvTimeout: recvTimeout, what: what, log: log}
}

// inFlight is the number of slots taken (tests).
func (c *calls) inFlight() int { return len(c.slots) }

// acquire takes a slot, or refuses at once when none is free: waiting
// would hold the call's memory all the same, and Envoy's own timeout
// (20 ms by default) is shorter than any useful wait.
func (c *calls) acquire() error {
	select {
	case c.slots <- struct{}{}:
		return nil
	default:
		return status.Errorf(codes.ResourceExhausted, "rls: too many %s in flight (at most %d)", c.what, cap(c.slots))
	}
}

func (c *calls) release() { <-c.slots }

// unary wraps a unary method's handler: a slot for the whole call, and
// the request read within recvTimeout.
func (c *calls) unary(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		if err := c.acquire(); err != nil {
			return nil, err
		}
		defer c.release()
		return h(srv, ctx, func(m any) error { return c.recv(dec, m) }, ic)
	}
}

// stream wraps a streaming method's handler so that its first request
// message is read within recvTimeout (the count of such streams is the
// interceptor's business: see watches).
func (c *calls) stream(h grpc.StreamHandler) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		return h(srv, &firstRecvTimed{ServerStream: ss, c: c})
	}
}

type firstRecvTimed struct {
	grpc.ServerStream
	c    *calls
	done bool
}

func (s *firstRecvTimed) RecvMsg(m any) error {
	if s.done {
		return s.ServerStream.RecvMsg(m)
	}
	s.done = true
	return s.c.recv(s.ServerStream.RecvMsg, m)
}

// recv runs read(m) and gives up after recvTimeout. The read itself waits
// on the transport stream's own context, which nothing but the end of the
// call cancels (not the handler's context, nor a stats.Handler's): a
// client that announces a message and never completes it, or sends only
// headers, would hold the call and its buffered bytes as long as the
// connection lives. So the read runs on its own goroutine, and the handler
// returns without it: grpc-go then writes the status and resets the
// stream, which ends the read.
func (c *calls) recv(read func(any) error, m any) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				// The codec runs here, off the handler's goroutine
				// and so out of recoverUnary's reach.
				c.log.Error("rls: decoding a request panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				done <- errPanicked
			}
		}()
		done <- read(m)
	}()
	t := time.NewTimer(c.recvTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return status.Errorf(codes.DeadlineExceeded, "rls: the request was not received within %s", c.recvTimeout)
	}
}

// guard returns a copy of desc whose unary methods are counted and timed
// by c and whose streaming methods' first message is timed by c. The
// handlers are wrapped, not rewritten, so a method grpc adds to a
// generated service is guarded too.
func guard(desc *grpc.ServiceDesc, c *calls) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		out.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: c.unary(m.Handler)}
	}
	out.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		s.Handler = c.stream(s.Handler)
		out.Streams[i] = s
	}
	return &out
}
