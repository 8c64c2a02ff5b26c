// Package resp is cellserver's wire layer: it accepts TCP connections, reads
// pipelined RESP requests (with Redis's limits and protocol error texts),
// hands each pipeline to the command layer and writes the replies back with
// one write per pipeline. Replies are encoded with github.com/tidwall/redcon.
//
// Requests are parsed here rather than by redcon's server loop because that
// loop copies every command (two allocations per command), enforces no
// size limits and words protocol errors differently from Redis.
package resp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/commands"
)

// Config configures the wire layer.
type Config struct {
	// Addr is the TCP listen address. Default "127.0.0.1:6379".
	Addr string
	// MaxClients caps concurrent connections; more are refused with Redis's
	// "ERR max number of clients reached". Default 10000.
	MaxClients int
	// ProtoMaxBulkLen is the largest accepted argument in bytes. Default 512 MiB.
	ProtoMaxBulkLen int64
	// MaxQueryBuffer is the most a connection may buffer for one unfinished
	// request before it is closed. Default 1 GiB.
	MaxQueryBuffer int
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields.
func (c *Config) EnsureDefaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:6379"
	}
	if c.MaxClients == 0 {
		c.MaxClients = 10000
	}
	if c.ProtoMaxBulkLen == 0 {
		c.ProtoMaxBulkLen = defaultProtoMaxBulk
	}
	if c.MaxQueryBuffer == 0 {
		c.MaxQueryBuffer = defaultMaxQueryBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration error.
func (c *Config) Validate() error {
	if c.MaxClients < 1 {
		return fmt.Errorf("resp: maxclients must be at least 1")
	}
	if c.ProtoMaxBulkLen < 1 || c.MaxQueryBuffer < 1 {
		return fmt.Errorf("resp: buffer limits must be positive")
	}
	return nil
}

// Server serves the Redis protocol.
type Server struct {
	cfg  Config
	exec *commands.Server
	ln   net.Listener

	mu       sync.Mutex
	conns    map[*conn]struct{}
	wg       sync.WaitGroup
	closing  atomic.Bool
	serveErr chan error
}

// New returns a server that runs commands on exec.
func New(cfg Config, exec *commands.Server) (*Server, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, exec: exec, conns: map[*conn]struct{}{}}, nil
}

// Listen binds the listen address. Addr reports the bound address.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	s.ln = ln
	return nil
}

// Addr is the bound address (after Listen).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts connections until Shutdown. It returns nil after Shutdown.
func (s *Server) Serve() error {
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return err
		}
		s.mu.Lock()
		if len(s.conns) >= s.cfg.MaxClients || s.closing.Load() {
			s.mu.Unlock()
			s.exec.RejectConnection()
			_, _ = nc.Write([]byte("-ERR max number of clients reached\r\n"))
			_ = nc.Close()
			continue
		}
		c := &conn{srv: s, nc: nc}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Shutdown stops accepting, lets every connection finish the pipeline it is
// executing (its replies are written), then closes all connections. It
// returns when they are gone or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.closing.CompareAndSwap(false, true) {
		return nil
	}
	if s.ln != nil {
		_ = s.ln.Close()
	}
	s.mu.Lock()
	for c := range s.conns {
		// Wake readers; a connection mid-pipeline finishes it first.
		_ = c.nc.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			_ = c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

type conn struct {
	srv *Server
	nc  net.Conn
}

func (c *conn) serve() {
	s := c.srv
	cl := s.exec.NewClient(c.nc.RemoteAddr(), c.nc.LocalAddr())
	defer func() {
		// A bug on this connection's path must not take the server down:
		// log it and drop this connection only.
		if r := recover(); r != nil {
			s.cfg.Logger.Error("connection panicked; closing it", "addr", cl.Addr, "panic", r, "stack", string(debug.Stack()))
		}
		cl.Close()
		_ = c.nc.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	p := parser{protoMaxBulk: s.cfg.ProtoMaxBulkLen}
	buf := make([]byte, initialReadBuffer)
	start, end := 0, 0
	var out commands.Out
	var cmds [][][]byte
	for {
		if s.closing.Load() {
			return
		}
		n, err := c.nc.Read(buf[end:])
		if n > 0 {
			end += n
			s.exec.CountNet(n, 0)
		}
		if err != nil {
			return
		}
		if !c.process(cl, &p, buf, &start, end, &out, &cmds) {
			return
		}
		// Compact or grow the buffer for the rest of an unfinished command.
		if start == end {
			start, end = 0, 0
			if len(buf) > 4*initialReadBuffer {
				buf = make([]byte, initialReadBuffer)
			}
		} else if end == len(buf) {
			if start > 0 {
				end = copy(buf, buf[start:end])
				start = 0
			} else {
				if len(buf) >= s.cfg.MaxQueryBuffer {
					s.cfg.Logger.Warn("closing client that reached max query buffer length", "addr", cl.Addr)
					return
				}
				nb := make([]byte, min(2*len(buf), s.cfg.MaxQueryBuffer))
				copy(nb, buf[:end])
				buf = nb
			}
		}
	}
}

// process runs every whole command in buf[*start:end], writing replies, and
// reports whether the connection stays open.
func (c *conn) process(cl *commands.Client, p *parser, buf []byte, start *int, end int, out *commands.Out, cmds *[][][]byte) bool {
	s := c.srv
	for {
		var perr error
		for *start < end {
			used, err := p.next(buf[*start:end], cl.Authenticated())
			if err != nil {
				if err != errIncomplete {
					perr = err
				}
				break
			}
			*start += used
			// AUTH changes the limits that apply to the next commands, so an
			// unauthenticated client's commands run one at a time.
			if !cl.Authenticated() && len(p.ends) > 0 {
				break
			}
		}
		if len(p.ends) == 0 && perr == nil {
			return true
		}
		if len(p.ends) > 0 {
			*cmds = p.commands((*cmds)[:0])
			s.exec.Exec(cl, *cmds, out)
			clear(*cmds)
			p.reset()
		}
		if perr != nil {
			out.WriteError("ERR " + perr.Error())
		}
		if len(out.B) > 0 {
			if _, err := c.nc.Write(out.B); err != nil {
				return false
			}
			s.exec.CountNet(0, len(out.B))
			if cap(out.B) > maxKeptOutBuffer {
				out.B = nil
			} else {
				out.B = out.B[:0]
			}
		}
		if perr != nil || cl.Closing() {
			return false
		}
	}
}
