package resp

import (
	"errors"
	"io"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// A client that sends its commands and then shuts its side down
// (`printf 'PING\r\n' | nc -N`, a health check, a script) still reads the
// replies, and Redis sends them: it writes the replies of what it read
// before it reads again and sees the end. gnet, told of the hang-up with
// the data, reads to the end at once and closes the connection, so the
// replies that wait for the round's write-out (writer.go), or for a
// pipeline still running off the loop or waiting for the disk or another
// loop, would be dropped while the commands had run: a client charged for
// a decision it never hears of. OnClose writes the first kind; for the
// others, the connection keeps a duplicate of its socket, to which the
// replies go once they are ready (lastWords).

// peerClosed reports whether gnet closes a connection because the client
// shut its side down (end of stream), not because of an error, a kill or
// the server's own close.
func peerClosed(err error) bool { return errors.Is(err, io.EOF) }

// keepSocket duplicates the socket of a busy connection that the client
// shut down, before gnet closes its own descriptor. Best effort: without a
// descriptor to spare the replies are dropped, as before.
func (c *conn) keepSocket(gc gnet.Conn) {
	fd, err := unix.FcntlInt(uintptr(gc.Fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		c.kept, c.keptFD = true, fd
	}
}

// hungUp ends the busy wait of a connection the client shut down: its
// replies (and perr's, the protocol error that followed them) go to the
// socket it kept, and the client is released; on its loop.
func (s *Server) hungUp(c *conn, perr error) {
	if perr != nil {
		c.out.WriteError("ERR " + perr.Error())
	}
	s.lastWords(c, writeSegments(&c.out, nil)...)
	c.cl.Close()
}

// lastWords writes bufs to the socket a closed connection kept
// (keepSocket), as much of them as the socket takes now, and closes it. A
// client that no longer reads loses the rest, as it would at any close.
func (s *Server) lastWords(c *conn, bufs ...[]byte) {
	if !c.kept {
		return
	}
	c.kept = false
	defer unix.Close(c.keptFD)
	for _, b := range bufs {
		for len(b) > 0 {
			n, err := unix.Write(c.keptFD, b)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n <= 0 {
				return
			}
			s.exec.CountNet(0, n)
			b = b[n:]
		}
	}
}
