package rls

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/peer"
)

// conns bounds the connections served at once, over every listener of a
// Server. A connection serving no call (none whose request has arrived:
// a call waiting for its request does not count) is idle; at the bound, a
// new connection closes the one idle longest and takes its place, so that
// idle connections, or connections carrying only calls that never send
// their request, cannot lock a new client out: a health prober dials a
// connection per probe, and Envoy reconnects at least every
// MaxConnectionAge. A connection serving a call is busy during the well
// under a millisecond of a decision, or while a health watch is open; only
// when all are busy does a new connection wait in the listen backlog until
// one closes or turns idle.
type conns struct {
	max    int
	evicts *everyLog

	// byAddr finds a call's connection: grpc-go's peer address is the
	// value the connection's RemoteAddr returned, compared by identity.
	byAddr sync.Map // net.Addr → *conn

	mu   sync.Mutex
	cond *sync.Cond // broadcast when a place may have come free
	held int        // connections holding a place
	idle list.List  // of *conn serving no call, the longest idle first
}

func newConns(max int, log *slog.Logger) *conns {
	c := &conns{max: max, evicts: newEveryLog(log, time.Second)}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// counts returns the connections holding a place and those of them idle
// (tests).
func (l *conns) counts() (held, idle int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held, l.idle.Len()
}

// listen returns ln bounded by l.
func (l *conns) listen(ln net.Listener) net.Listener {
	return &connsListener{Listener: ln, l: l}
}

// roomLocked reports whether a connection can be admitted now.
func (l *conns) roomLocked() bool { return l.held < l.max || l.idle.Len() > 0 }

// dropLocked takes c out of the idle list and gives its place back.
func (l *conns) dropLocked(c *conn) {
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	if c.held {
		c.held = false
		l.held--
		l.cond.Broadcast()
	}
}

// begin counts a call served on ctx's connection (nil when it is not one
// of l's); end undoes it.
func (l *conns) begin(ctx context.Context) *conn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil
	}
	v, ok := l.byAddr.Load(p.Addr)
	if !ok {
		return nil
	}
	c := v.(*conn)
	l.mu.Lock()
	c.calls++
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	l.mu.Unlock()
	return c
}

func (l *conns) end(c *conn) {
	if c == nil {
		return
	}
	l.mu.Lock()
	c.calls--
	if c.calls == 0 && c.held {
		c.elem = l.idle.PushBack(c)
		l.cond.Broadcast()
	}
	l.mu.Unlock()
}

type connsListener struct {
	net.Listener
	l      *conns
	closed bool // under l.mu
}

func (cl *connsListener) Accept() (net.Conn, error) {
	l := cl.l
	// Leave new connections in the backlog while every place is busy.
	l.mu.Lock()
	for !cl.closed && !l.roomLocked() {
		l.cond.Wait()
	}
	l.mu.Unlock()
	nc, err := cl.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, l: l, raddr: nc.RemoteAddr()}
	var victim *conn
	l.mu.Lock()
	for !cl.closed && !l.roomLocked() { // the idle one turned busy meanwhile
		l.cond.Wait()
	}
	if cl.closed {
		l.mu.Unlock()
		_ = nc.Close()
		return nil, net.ErrClosed
	}
	if l.held >= l.max {
		victim = l.idle.Front().Value.(*conn)
		l.dropLocked(victim)
	}
	l.held++
	c.held = true
	c.elem = l.idle.PushBack(c)
	l.mu.Unlock()
	l.byAddr.Store(c.raddr, c)
	if victim != nil {
		l.byAddr.CompareAndDelete(victim.raddr, victim)
		_ = victim.Conn.Close()
		l.evicts.Warn("rls: closed the connection idle longest, to admit a new one: --http-max-conns reached",
			"max", l.max, "peer", victim.raddr.String())
	}
	return c, nil
}

func (cl *connsListener) Close() error {
	cl.l.mu.Lock()
	cl.closed = true
	cl.l.cond.Broadcast()
	cl.l.mu.Unlock()
	return cl.Listener.Close()
}

// conn is a served connection; it gives its place back when closed.
type conn struct {
	net.Conn
	l     *conns
	raddr net.Addr // RemoteAddr, one value: the key of l.byAddr
	// Under l.mu:
	held  bool          // it holds a place (until closed or closed for another)
	calls int           // calls being served
	elem  *list.Element // its entry in l.idle while it serves none
}

func (c *conn) RemoteAddr() net.Addr { return c.raddr }

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.dropLocked(c)
	c.l.mu.Unlock()
	c.l.byAddr.CompareAndDelete(c.raddr, c)
	return err
}
