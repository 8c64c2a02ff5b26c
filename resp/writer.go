package resp

import (
	"context"

	"github.com/panjf2000/gnet/v2"
)

// A connection's replies are not written the moment its pipeline has run:
// the connection joins its loop's list, and the loop writes every listed
// connection's replies in one go once it has read from every connection
// that was ready, as Redis does before it sleeps
// (handleClientsWithPendingWrites). Over loopback, the kernel runs the
// receiving side's TCP and wakes the client inside the server's write; a
// client that is awake takes the next reply without being woken again.
// Replies written between reads spread out, so that the clients have gone
// back to sleep and each write pays a wake-up across cores, dear on a VM
// (measured in docs/performance.md, issue #19).
//
// gnet has no hook for "every ready connection was read": the list's
// write-out is a task queued on the loop (Execute), which runs after the
// events of the loop's next poll. That costs one eventfd write per round
// of the loop, not per request.

// deferMax is the most reply bytes a connection leaves in its buffer for
// the round's write-out; more is written at once, as a large reply gains
// nothing from waiting and must not sit in memory longer than it has to.
const deferMax = 64 << 10

// loopWriter is one event loop's list of connections whose replies wait
// for the end of the round; used only on that loop.
type loopWriter struct {
	s      *Server
	el     gnet.EventLoop
	q      []gnet.Conn // connections listed this round
	spare  []gnet.Conn
	run    gnet.Runnable
	queued bool // run is queued on the loop
}

func newLoopWriter(s *Server, el gnet.EventLoop) *loopWriter {
	w := &loopWriter{s: s, el: el}
	w.run = gnet.RunnableFunc(func(context.Context) error {
		w.writeOut()
		return nil
	})
	return w
}

// writerOf returns gc's loop's writer, creating it on the loop's first
// connection; with connsMu held.
func (s *Server) writerOf(gc gnet.Conn) *loopWriter {
	el := gc.EventLoop()
	w := s.writers[el]
	if w == nil {
		w = newLoopWriter(s, el)
		s.writers[el] = w
	}
	return w
}

// later leaves c's replies for the round's write-out. false: write them
// now (they reference request bytes the next read may overwrite, they are
// large, or the loop is stopping).
func (w *loopWriter) later(gc gnet.Conn, c *conn) bool {
	if c.out.Refs() || c.out.Len() > deferMax {
		return false
	}
	if c.listed {
		return true
	}
	if !w.queued {
		// Counted as a held reply, so that Shutdown lets the loop write
		// it before it stops.
		w.s.waiting.Add(1)
		if w.el.Execute(context.Background(), w.run) != nil {
			w.s.waiting.Add(-1)
			return false
		}
		w.queued = true
	}
	c.listed = true
	w.q = append(w.q, gc)
	return true
}

// writeOut writes the replies of every listed connection, on the loop.
func (w *loopWriter) writeOut() {
	q := w.q
	w.q, w.spare = w.spare[:0], nil
	w.queued = false
	for _, gc := range q {
		// A connection that closed meanwhile is gone; one that became
		// busy has its replies written when it is done (replied).
		c, ok := gc.Context().(*conn)
		if !ok {
			continue
		}
		c.listed = false
		if c.busy {
			continue
		}
		if !w.s.flush(gc, c) {
			_ = gc.Close()
		}
	}
	clear(q)
	w.spare = q[:0]
	w.s.waiting.Add(-1)
}
