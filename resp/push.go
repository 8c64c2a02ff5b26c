package resp

import (
	"context"
	"sync"

	"github.com/panjf2000/gnet/v2"
)

// pushes is a connection's queue of push messages (CLIENT TRACKING's
// invalidations), which arrive on any goroutine (a shard's, mostly) and
// must never wait for the connection: they are appended here and written
// by the connection's event loop, between pipelines, so a push never lands
// inside a reply. One wake-up of the loop drains everything queued since.
//
// What waits here counts against the hard output limit: a client that
// does not read is disconnected, as Redis's output buffer limit does,
// rather than buffered without bound.
type pushes struct {
	mu        sync.Mutex
	buf       []byte
	spare     []byte // the buffer written last, reused for the next
	scheduled bool   // a drain is queued on the event loop
	over      bool   // past the hard limit: the drain closes the connection
}

// maxKeptPushBuffer is the push buffer capacity a connection keeps between
// drains: a few invalidations' worth, as most drains carry one or two; ten
// thousand tracking clients then keep at most 40 MiB.
const maxKeptPushBuffer = 4 << 10

// pusher returns the function the command layer calls to push msg to gc.
func (s *Server) pusher(gc gnet.Conn, c *conn) func(msg []byte) {
	return func(msg []byte) {
		q := &c.push
		q.mu.Lock()
		if q.over {
			q.mu.Unlock()
			return
		}
		if s.cfg.OutputHard > 0 && int64(len(q.buf)+len(msg)) > s.cfg.OutputHard {
			q.over, q.buf = true, nil
		} else {
			q.buf = append(q.buf, msg...)
		}
		wake := !q.scheduled
		q.scheduled = true
		q.mu.Unlock()
		if wake {
			// Execute queues the task and wakes the loop; it never waits.
			// It fails only once the engine stopped, when nothing is
			// written anyway.
			_ = gc.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				if gc.Context() == c && !s.drainPushes(gc, c) {
					_ = gc.Close()
				}
				return nil
			}))
		}
	}
}

// drainPushes writes the queued pushes, on gc's event loop. false: the
// client went over its output limit and must be closed.
func (s *Server) drainPushes(gc gnet.Conn, c *conn) bool {
	q := &c.push
	q.mu.Lock()
	if c.busy {
		// A detached pipeline's replies are not written yet, and a push
		// about a key one of them read must not come first (the client
		// would keep the read value): detach's completion drains them.
		q.scheduled = false
		q.mu.Unlock()
		return true
	}
	b, over := q.buf, q.over
	q.buf, q.scheduled = nil, false
	if cap(b) <= maxKeptPushBuffer {
		q.buf = q.spare[:0]
		q.spare = b
	}
	q.mu.Unlock()
	if over {
		s.overOutput(c, s.cfg.OutputHard)
		return false
	}
	if len(b) == 0 {
		return true
	}
	// Replies left for the loop's round go first: a push about a key
	// they read must follow them.
	if !s.flush(gc, c) {
		return false
	}
	if _, err := gc.Write(b); err != nil {
		return false
	}
	s.exec.CountNet(0, len(b))
	return s.outputOK(gc, c)
}
