package resp

import (
	"context"
	"fmt"
	"net"
	"runtime/debug"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/cellserver/cellserver/store"
)

// Each event loop hosts one store owner (Config.Owners): the loop's
// goroutine runs the owner's shards, so a command whose keys live there
// runs inline while the loop serves its connection, with no hand-off to
// another thread and back (two cross-thread wake-ups per unpipelined
// request otherwise). Commands for another loop's shards are handed to that
// loop as one batch per pipeline and answered when it is done, in request
// order.
//
// gnet gives no handle on a loop before a connection lands on it, so
// Listen enrolls one loopback connection per loop first (gnet hands
// enrolled connections to its loops round robin, starting at the first)
// and takes each one's loop as its owner's host.

// ctlConn marks a loop's control connection (its Context): not a client.
type ctlConn struct{}

// loopHost runs an owner's Serve on one event loop.
type loopHost struct {
	s   *Server
	el  gnet.EventLoop
	run gnet.Runnable
}

// Wake queues the owner's Serve on the loop. Once the engine is stopping
// the call fails and is dropped: Shutdown detaches the owners afterwards,
// and their own goroutines serve what is left.
func (h *loopHost) Wake() { _ = h.el.Execute(context.Background(), h.run) }

func newLoopHost(s *Server, el gnet.EventLoop, o *store.Owner) *loopHost {
	h := &loopHost{s: s, el: el}
	h.run = gnet.RunnableFunc(func(context.Context) error {
		defer func() {
			// Requests recover their own panics; this is the owner's
			// machinery, where a panic is a bug. The loop must survive it.
			if r := recover(); r != nil {
				s.cfg.Logger.Error("store owner panicked on its event loop", "owner", o.ID(), "panic", r, "stack", string(debug.Stack()))
			}
		}()
		o.Serve()
		return nil
	})
	return h
}

// hostOwners gives each event loop its owner; before any client connects.
func (s *Server) hostOwners() error {
	owners := s.cfg.Owners
	if len(owners) == 0 {
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("resp: a loopback listener for the event loops' control connections: %w", err)
	}
	defer ln.Close()
	s.homes = make(map[gnet.EventLoop]*store.Owner, len(owners))
	for _, o := range owners {
		nc, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return fmt.Errorf("resp: a control connection for an event loop: %w", err)
		}
		peer, err := ln.Accept()
		if err != nil {
			_ = nc.Close()
			return fmt.Errorf("resp: a control connection for an event loop: %w", err)
		}
		s.ctlPeers = append(s.ctlPeers, peer)
		gc, err := s.cli.EnrollContext(nc, ctlConn{})
		if err != nil {
			return fmt.Errorf("resp: a control connection for an event loop: %w", err)
		}
		el := gc.EventLoop()
		if _, dup := s.homes[el]; dup {
			return fmt.Errorf("resp: two store owners landed on one event loop (gnet no longer assigns round robin)")
		}
		s.homes[el] = o
		s.hosts = append(s.hosts, o)
	}
	for el, o := range s.homes {
		o.Adopt(newLoopHost(s, el, o))
	}
	return nil
}

// detachOwners hands the owners back to goroutines of their own, once the
// event loops have stopped: the store's Close, and any front end still
// calling it, are then served.
func (s *Server) detachOwners() {
	for _, o := range s.hosts {
		o.Detach()
	}
	s.hosts = nil
	for _, p := range s.ctlPeers {
		_ = p.Close()
	}
	s.ctlPeers = nil
}

// homeOf is the owner a connection's loop hosts (nil: none).
func (s *Server) homeOf(gc gnet.Conn) *store.Owner { return s.homes[gc.EventLoop()] }

// closeAll closes every client connection on its own loop and waits until
// all are gone (or ctx ends).
func (s *Server) closeAll(ctx context.Context) {
	if len(s.hosts) == 0 {
		return // nothing a closing client runs needs the loops
	}
	s.connsMu.Lock()
	gcs := make([]gnet.Conn, 0, len(s.conns))
	for _, gc := range s.conns {
		gcs = append(gcs, gc)
	}
	s.connsMu.Unlock()
	for _, gc := range gcs {
		_ = gc.Close() // runs on gc's loop; a no-op if it is closed already
	}
	for s.nconns.Load() > 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

// synced writes a connection's replies once their changes are synced (see
// process), on its loop, then runs what it sent meanwhile. It is called on
// the committer's goroutine.
func (s *Server) synced(gc gnet.Conn, c *conn) {
	err := gc.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		s.unhold(c)
		lost := c.cl.SyncLost()
		if lost {
			c.out.Reset(0) // not on disk: no acknowledgement
		}
		if c.closed {
			s.hungUp(c, nil)
			return nil
		}
		if lost {
			return gc.Close()
		}
		if s.replied(gc, c, nil) == gnet.Close {
			return gc.Close()
		}
		return nil
	}))
	if err != nil {
		// The engine is stopping: the connection is gone and the callback
		// will not run. Closing the client runs store sessions (its
		// watches are withdrawn): not here, on the committer, which they
		// may wait for; nor with the loop's home, which is not this
		// goroutine.
		go closeOffLoop(c)
	}
}

// closeOffLoop closes a client whose loop has stopped (once per
// connection, at shutdown).
func closeOffLoop(c *conn) {
	c.cl.SetOffLoop(true)
	c.cl.Close()
}

// pend leaves a pipeline pending for another loop's shards: the connection
// is busy, and buf (c.buf: its requests and their replies read it) is
// pinned until it is answered, the unparsed rest moving to the spare.
func (s *Server) pend(c *conn, buf []byte, start int, perr error) {
	s.hold(c)
	c.perr, c.swapped = perr, true
	c.pinned = buf
	c.buf = append(c.alt[:0], buf[start:]...)
	c.alt = nil
}

// remoteDone is called by the last other loop to run one of a pending
// pipeline's batches: the replies are written on the connection's loop.
func (s *Server) remoteDone(gc gnet.Conn, c *conn) {
	err := gc.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		s.finishRemote(gc, c)
		return nil
	}))
	if err != nil {
		// The engine is stopping: the connection is gone and the task will
		// not run (see synced).
		go closeOffLoop(c)
	}
}

// finishRemote writes a pending pipeline's replies (as process does after
// a pipeline), then runs what the connection sent meanwhile.
func (s *Server) finishRemote(gc gnet.Conn, c *conn) {
	var action gnet.Action
	defer func() {
		if action == gnet.Close {
			// Not busy any more, so that OnClose releases the client.
			s.unhold(c)
			_ = gc.Close()
		}
	}()
	defer s.recoverConn(c, &action)
	s.exec.Resume(c.cl, &c.out)
	if cap(c.pinned) <= 4*initialReadBuffer {
		c.alt = c.pinned[:0]
	}
	c.pinned = nil
	c.p.giveBack(c.pinnedArgs)
	c.pinnedArgs = nil
	// A connection the client shut down meanwhile (closed) has its replies
	// go to the socket it kept, once synced as any client's (hangup.go).
	if !c.closed && c.room > 0 && c.out.Len() > c.room {
		s.overOutput(c, int64(c.out.Len())+int64(gc.OutboundBuffered()))
		c.out.Reset(0)
		action = gnet.Close
		return
	}
	perr := c.perr
	c.perr = nil
	if perr == nil && !c.cl.Closing() && !c.out.Refs() && c.cl.AwaitSync(c.syncDone) {
		return // still busy: synced writes the replies
	}
	c.cl.WaitSync()
	s.unhold(c)
	if c.closed {
		s.hungUp(c, perr)
		return
	}
	action = s.replied(gc, c, perr)
}

// replied ends a wait for a busy connection's replies (finishRemote,
// synced), on its loop: it writes them (and perr's, the protocol error
// that followed them), then the pushes held back meanwhile, then runs what
// the client sent meanwhile; unless the client quits or the server is
// shutting down (then nothing more of its runs).
func (s *Server) replied(gc gnet.Conn, c *conn, perr error) gnet.Action {
	if perr != nil {
		c.out.WriteError("ERR " + perr.Error())
	}
	if !s.flush(gc, c) || perr != nil || c.cl.Closing() || !s.drainPushes(gc, c) || s.closing.Load() {
		return gnet.Close
	}
	if len(c.buf) > 0 {
		return s.resume(gc, c)
	}
	return gnet.None
}

// hold marks c busy while its replies wait on the loop (pend, AwaitSync),
// counted in waiting so that Shutdown lets them be written first.
func (s *Server) hold(c *conn) {
	if !c.waiting {
		c.waiting = true
		s.waiting.Add(1)
	}
	c.busy = true
}

// unhold ends hold.
func (s *Server) unhold(c *conn) {
	if c.waiting {
		c.waiting = false
		s.waiting.Add(-1)
	}
	c.busy = false
}
