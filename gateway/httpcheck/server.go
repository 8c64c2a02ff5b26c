package httpcheck

import (
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

// LimitListener bounds the connections served from ln to max at once.
// It refuses rather than holds: a connection accepted over the limit is
// answered "503 Service Unavailable" (Retry-After: 1, Connection: close)
// and closed, at once, so a gateway sees a clear error (and its own
// on-error rule applies) instead of a connection hanging in the backlog
// until its timeout. (The RESP side refuses past maxclients the same
// way.) Refusals are logged at most once a second.
func LimitListener(ln net.Listener, max int, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.Default()
	}
	return &limitListener{
		Listener: ln,
		slots:    make(chan struct{}, max),
		refusing: make(chan struct{}, maxRefusing),
		log:      newEveryLog(log, time.Second, time.Now),
		max:      max,
	}
}

type limitListener struct {
	net.Listener
	slots    chan struct{} // one per connection served
	refusing chan struct{} // one per refusal being written
	log      *everyLog
	max      int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
		}
		l.log.Warn("http: refused a connection: --http-max-conns reached", "max", l.max, "peer", c.RemoteAddr().String())
		select {
		case l.refusing <- struct{}{}:
			go l.refuse(c)
		default:
			_ = c.Close()
		}
	}
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

// limitConn gives its slot back once, when closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
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
	c.once.Do(c.release)
	return err
}
