package rls

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A call goes through two bounds, both over every connection:
//
//   - until its request message has arrived, it waits in pending, whose
//     size is bounded by evicting the call that has waited longest and
//     whose time is bounded by RecvTimeout;
//   - once the request is there, it takes a slot of its kind (slots) for
//     as long as it is served: a rate-limit decision, a health check, an
//     open health watch; its connection is busy meanwhile (conns).
//
// So a client that sends headers and no message, or part of one, holds no
// slot, nor keeps its connection from giving way to a new one, and cannot
// refuse the calls of others: a legitimate call's message
// arrives with its headers, so it is always the newest waiting call and
// never the one evicted, and it is decided in well under a millisecond.
//
// Both are enforced in the method handlers the services are registered
// with, not in interceptors or a tap: grpc-go calls a unary method's
// handler before the request message is read (the generated handler reads
// it with dec), and interceptors only after. A slot taken and given back in
// that one function cannot leak, whatever way the call ends (cancelled,
// reset, timed out, evicted, panicking); a call to an unknown method never
// gets one.

// slots bounds the calls of one kind served at once.
type slots struct {
	ch  chan struct{} // one element per call served
	err error         // what a call past the bound gets
}

func newSlots(max int, err error) *slots {
	return &slots{ch: make(chan struct{}, max), err: err}
}

// inFlight is the number of slots taken (tests).
func (s *slots) inFlight() int { return len(s.ch) }

// acquire takes a slot, or refuses at once when none is free: waiting
// would hold the call's memory all the same, and Envoy's own timeout
// (20 ms by default) is shorter than any useful wait.
func (s *slots) acquire() error {
	select {
	case s.ch <- struct{}{}:
		return nil
	default:
		return s.err
	}
}

func (s *slots) release() { <-s.ch }

// errTooManyCalls is what a call past a bound of calls in flight gets.
func errTooManyCalls(what string, max int) error {
	return status.Errorf(codes.ResourceExhausted, "rls: too many %s in flight (at most %d)", what, max)
}

// pending holds the calls whose first request message has not arrived.
type pending struct {
	max     int
	timeout time.Duration
	log     *slog.Logger
	evicts  *everyLog

	mu    sync.Mutex
	queue list.List // of *waiter, the one waiting longest first
}

type waiter struct {
	elem    *list.Element // in the queue; nil once out of it
	evicted chan struct{} // closed when evicted
}

func newPending(max int, timeout time.Duration, log *slog.Logger) *pending {
	return &pending{max: max, timeout: timeout, log: log, evicts: newEveryLog(log, time.Second)}
}

// waiting is the number of calls waiting (tests).
func (p *pending) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queue.Len()
}

// enter queues a new waiter, evicting the oldest past max.
func (p *pending) enter() *waiter {
	w := &waiter{evicted: make(chan struct{})}
	var victim *waiter
	p.mu.Lock()
	w.elem = p.queue.PushBack(w)
	if p.queue.Len() > p.max {
		victim = p.queue.Remove(p.queue.Front()).(*waiter)
		victim.elem = nil
	}
	p.mu.Unlock()
	if victim != nil {
		close(victim.evicted)
		p.evicts.Warn("rls: ended the call waiting longest for its request, to admit a new one: too many calls waiting", "max", p.max)
	}
	return w
}

// leave takes w out of the queue if it is still in it.
func (p *pending) leave(w *waiter) {
	p.mu.Lock()
	if w.elem != nil {
		p.queue.Remove(w.elem)
		w.elem = nil
	}
	p.mu.Unlock()
}

// recv runs read(m) as a waiting call: it gives up after the timeout, or
// when evicted. The read itself waits on the transport stream's own
// context, which nothing but the end of the call cancels (not the
// handler's context, nor a stats.Handler's): a client that announces a
// message and never completes it, or sends only headers, would hold the
// call and its buffered bytes as long as the connection lives. So the read
// runs on its own goroutine, and the handler returns without it: grpc-go
// then writes the status and resets the stream, which ends the read.
func (p *pending) recv(read func(any) error, m any) error {
	w := p.enter()
	defer p.leave(w)
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				// The codec runs here, off the handler's goroutine
				// and so out of recoverUnary's reach.
				p.log.Error("rls: decoding a request panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				done <- errPanicked
			}
		}()
		done <- read(m)
	}()
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	timedOut := false
	select {
	case err := <-done:
		return err
	case <-t.C:
		timedOut = true
	case <-w.evicted:
	}
	// A request that arrived at the same moment is served.
	select {
	case err := <-done:
		return err
	default:
	}
	if timedOut {
		return status.Errorf(codes.DeadlineExceeded, "rls: the request was not received within %s", p.timeout)
	}
	return status.Errorf(codes.ResourceExhausted, "rls: the request was not received before %d newer calls waited for theirs", p.max)
}

// guards are what every call goes through, whatever its kind.
type guards struct {
	pending *pending
	conns   *conns // nil: connections not followed
}

// serve takes a slot of s (nil: none) for a call whose request has
// arrived, and counts the call as served on its connection (c; nil when
// not followed). done gives both back.
func (g *guards) serve(ctx context.Context, s *slots) (c *conn, err error) {
	if s != nil {
		if err := s.acquire(); err != nil {
			return nil, err
		}
	}
	if g.conns != nil {
		c = g.conns.begin(ctx)
	}
	return c, nil
}

func (g *guards) done(s *slots, c *conn) {
	if g.conns != nil {
		g.conns.end(c)
	}
	if s != nil {
		s.release()
	}
}

// unary wraps a unary method's handler: the request awaited in pending,
// then a slot of s until the call ends.
func (g *guards) unary(h grpc.MethodHandler, s *slots) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		var served bool
		var c *conn
		defer func() {
			if served {
				g.done(s, c)
			}
		}()
		return h(srv, ctx, func(m any) error {
			if err := g.pending.recv(dec, m); err != nil {
				return err
			}
			var err error
			c, err = g.serve(ctx, s)
			served = err == nil
			return err
		}, ic)
	}
}

// stream wraps a streaming method's handler: its first request message
// awaited in pending, then a slot of s (nil: none) until the stream ends.
func (g *guards) stream(h grpc.StreamHandler, s *slots) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		fs := &firstRecv{ServerStream: ss, g: g, slots: s}
		defer func() {
			if fs.served {
				g.done(s, fs.conn)
			}
		}()
		return h(srv, fs)
	}
}

// firstRecv is a stream whose first RecvMsg waits in pending and then
// takes a slot. The generated handlers call RecvMsg on the handler's own
// goroutine, so its fields need no lock.
type firstRecv struct {
	grpc.ServerStream
	g      *guards
	slots  *slots
	done   bool  // the first RecvMsg has run
	served bool  // its message arrived and serve took its slot
	conn   *conn // from serve
}

func (s *firstRecv) RecvMsg(m any) error {
	if s.done {
		return s.ServerStream.RecvMsg(m)
	}
	s.done = true
	if err := s.g.pending.recv(s.ServerStream.RecvMsg, m); err != nil {
		return err
	}
	var err error
	s.conn, err = s.g.serve(s.Context(), s.slots)
	s.served = err == nil
	return err
}

// guard returns a copy of desc whose methods are guarded by g: a unary
// call holds a slot of unary once its request has arrived, a streaming
// one a slot of stream (nil: none) once its first message has. The
// handlers are wrapped, not rewritten, so a method grpc adds to a
// generated service is guarded too.
func guard(desc *grpc.ServiceDesc, g *guards, unary, stream *slots) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		out.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: g.unary(m.Handler, unary)}
	}
	out.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		s.Handler = g.stream(s.Handler, stream)
		out.Streams[i] = s
	}
	return &out
}

// everyLog logs at most one line per period; the lines it drops are
// counted into the next one it writes.
type everyLog struct {
	log    *slog.Logger
	period time.Duration

	mu      sync.Mutex
	last    time.Time
	dropped int64
}

func newEveryLog(log *slog.Logger, period time.Duration) *everyLog {
	return &everyLog{log: log, period: period}
}

// Warn logs msg unless a line was logged less than a period ago.
func (l *everyLog) Warn(msg string, args ...any) {
	l.mu.Lock()
	t := time.Now()
	if !l.last.IsZero() && t.Sub(l.last) < l.period {
		l.dropped++
		l.mu.Unlock()
		return
	}
	n := l.dropped
	l.last, l.dropped = t, 0
	l.mu.Unlock()
	l.log.Warn(msg, append(args, "similar_since_last_line", n)...)
}
