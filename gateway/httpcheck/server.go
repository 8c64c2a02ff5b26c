package httpcheck

import (
	"container/list"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// The bounds NewServer sets. A check request is one header block and no
// body (a /json body is bounded apart, by MaxJSONBody).
const (
	// MaxHeaderBytes bounds a request's header block, its request line
	// and final empty line included; a larger one is answered 431 by
	// net/http.
	MaxHeaderBytes = 16 << 10
	// ReadHeaderTimeout bounds the time to read a request's headers
	// (slow-loris clients).
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds the time to read a whole request, body included.
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds the time from the end of the request headers
	// to the end of the answer.
	WriteTimeout = 10 * time.Second
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout = 120 * time.Second
)

// headerSlop is what net/http reads past http.Server.MaxHeaderBytes
// before it answers 431 (its "bufio slop"): NewServer subtracts it, so
// that the bound is MaxHeaderBytes.
const headerSlop = 4096

// NewServer returns an http.Server serving h with the bounds above; a
// panic in h is answered 500 and logged on one line, and the server goes
// on. Serve it on a LimitListener to bound its connections.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.Default()
	}
	return &http.Server{
		Handler:           Recover(h, log),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes - headerSlop,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Recover answers 500 to a request whose handler panics, and logs one line
// (net/http would recover too, but log a stack trace and drop the
// connection without an answer). http.ErrAbortHandler passes through: it
// is net/http's way to abort a response on purpose.
func Recover(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			log.Error("http: a handler panicked; answered 500", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
			http.Error(w, "internal error", http.StatusInternalServerError)
		}()
		h.ServeHTTP(w, r)
	})
}

// refusal is the whole answer on a connection over the limit.
const refusal = "HTTP/1.1 503 Service Unavailable\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"Retry-After: 1\r\n" +
	"Connection: close\r\n" +
	"Content-Length: 21\r\n" +
	"\r\n" +
	"too many connections\n"

// maxRefusing bounds the refused connections being answered at once; past
// it a refused connection is closed without an answer.
const maxRefusing = 64

// LimitListener bounds the connections srv serves from ln to max at once,
// and sets srv.ConnState to follow them (calling a hook already set).
//
// A connection waiting for a request (accepted and not yet sent one, or
// kept alive after an answer) gives way: at max, a new connection closes
// the one that has waited longest and takes its place, as a server closes
// idle keep-alive connections under pressure. A gateway (nginx's
// keepalive, Go's Transport) retries a request whose idle connection the
// server closed on a new one, and a legitimate connection is the newest
// waiting from its accept to its request, so idle or silent connections
// cannot lock a gateway out. A connection becomes busy once its request
// header has been read, until its answer is written (each bounded in time
// by NewServer's timeouts); only when all max are busy is a new connection
// refused rather than held: it is answered "503 Service Unavailable"
// (Retry-After: 1, Connection: close) and closed, at once, so a gateway
// sees a clear error (and its own on-error rule applies) instead of a
// connection hanging in the backlog until its timeout. (The RESP side
// refuses past maxclients the same way.) Refusals and closings are logged
// at most once a second each.
func LimitListener(srv *http.Server, ln net.Listener, max int, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.Default()
	}
	l := &limitListener{
		Listener: ln,
		max:      max,
		refusing: make(chan struct{}, maxRefusing),
		refusals: newEveryLog(log, time.Second, time.Now),
		evicts:   newEveryLog(log, time.Second, time.Now),
	}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		l.connState(c, st)
		if prev != nil {
			prev(c, st)
		}
	}
	return l
}

type limitListener struct {
	net.Listener
	max      int
	refusing chan struct{} // one per refusal being written
	refusals *everyLog
	evicts   *everyLog

	mu      sync.Mutex
	held    int       // connections holding a place
	waiting list.List // of *limitConn waiting for a request, the longest first
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l}
		var victim *limitConn
		l.mu.Lock()
		if l.held >= l.max {
			if e := l.waiting.Front(); e != nil {
				victim = e.Value.(*limitConn)
				l.dropLocked(victim)
			}
		}
		if l.held < l.max {
			l.held++
			lc.held = true
			lc.elem = l.waiting.PushBack(lc)
		}
		admitted := lc.held
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Conn.Close()
			l.evicts.Warn("http: closed the connection waiting longest for a request, to admit a new one: --http-max-conns reached",
				"max", l.max, "peer", victim.RemoteAddr().String())
		}
		if admitted {
			return lc, nil
		}
		l.refusals.Warn("http: refused a connection: --http-max-conns reached", "max", l.max, "peer", c.RemoteAddr().String())
		select {
		case l.refusing <- struct{}{}:
			go l.refuse(c)
		default:
			_ = c.Close()
		}
	}
}

// dropLocked takes c out of the waiting list and gives its place back.
func (l *limitListener) dropLocked(c *limitConn) {
	if c.elem != nil {
		l.waiting.Remove(c.elem)
		c.elem = nil
	}
	if c.held {
		c.held = false
		l.held--
	}
}

// connState follows net/http's view of each connection: StateActive once
// a request's header has been read, StateIdle once its answer is written
// and the connection kept alive for the next.
func (l *limitListener) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateIdle:
		if lc.held && lc.elem == nil {
			lc.elem = l.waiting.PushBack(lc)
		}
	case http.StateActive, http.StateHijacked:
		if lc.elem != nil {
			l.waiting.Remove(lc.elem)
			lc.elem = nil
		}
	case http.StateClosed:
		l.dropLocked(lc)
	}
}

// counts returns the connections holding a place and those of them
// waiting for a request (tests).
func (l *limitListener) counts() (held, waiting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held, l.waiting.Len()
}

// refuse writes the refusal, then reads what the client sends for a moment
// before closing: closing with unread data would send a reset, which can
// make the client lose the answer.
func (l *limitListener) refuse(c net.Conn) {
	defer func() { <-l.refusing }()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, refusal); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.CopyN(io.Discard, c, 64<<10)
}

// limitConn is a served connection; it gives its place back when closed.
type limitConn struct {
	net.Conn
	l *limitListener
	// Under l.mu:
	held bool          // it holds a place (until closed or closed for another)
	elem *list.Element // its entry in l.waiting while it waits for a request
}

// CloseWrite passes the TCP half-close through: net/http half-closes before
// it hangs up on an error (a 431), so that the client reads the answer
// instead of a reset.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.dropLocked(c)
	c.l.mu.Unlock()
	return err
}
