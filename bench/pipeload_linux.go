package bench

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pipeload runs the load of s (clients, pipeline depth, requests, -r
// keyspace, RESP3, the command with its __rand_int__ placeholders) as
// redis-benchmark does, in this process, and returns what it measured.
//
// Why a second load generator: on a 2-core machine redis-benchmark, one
// thread, is the bottleneck of every pipelined scenario, and it spends
// more per reply the bigger and more nested the reply (hiredis builds an
// object per element), so a ratio of two commands with different replies
// measures redis-benchmark as much as the server (docs/performance.md,
// "the load generator's ceiling"). Pipeload is redis-benchmark's event
// loop without that cost: one thread, one epoll set over all connections,
// one write per pipeline of pre-encoded commands whose placeholders are
// rewritten in place, and replies counted by skipping over their bytes,
// never decoded. An error reply ends the run with its text.
//
// Latency is per pipeline, from its write to its last reply (redis-benchmark
// gives each request of a pipeline the time to its own reply).
func Pipeload(s BenchSpec) (BenchResult, error) {
	if s.Clients <= 0 || s.Requests <= 0 || len(s.Command) == 0 {
		return BenchResult{}, errors.New("pipeload: clients, requests and a command are needed")
	}
	depth := max(s.Pipeline, 1)
	if s.Timeout == 0 {
		s.Timeout = 2 * time.Minute
	}
	cmd, holes := encodeTemplate(s.Command, s.Keyspace > 0)
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return BenchResult{}, fmt.Errorf("pipeload: epoll: %w", err)
	}
	defer unix.Close(ep)
	conns := make([]*plConn, 0, s.Clients)
	defer func() {
		for _, c := range conns {
			unix.Close(c.fd)
		}
	}()
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for i := range s.Clients {
		fd, err := dialRaw(s.Addr, s.RESP3)
		if err != nil {
			return BenchResult{}, fmt.Errorf("pipeload: connection %d: %w", i, err)
		}
		c := &plConn{fd: fd, in: make([]byte, 0, 64<<10)}
		c.out = slices.Repeat(cmd, depth)
		for j := range depth {
			for _, h := range holes {
				c.holes = append(c.holes, j*len(cmd)+h)
			}
		}
		conns = append(conns, c)
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}); err != nil {
			return BenchResult{}, fmt.Errorf("pipeload: epoll: %w", err)
		}
	}

	// One thread, as redis-benchmark: the generator's cost stays on one core.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l := &plLoad{ep: ep, cmdLen: len(cmd), holesPer: len(holes), depth: depth, left: s.Requests,
		keyspace: uint64(s.Keyspace), rnd: rnd, lat: make([]float64, 0, s.Requests/depth+len(conns))}
	start := time.Now()
	for i, c := range conns {
		if err := l.next(c, i, start); err != nil {
			return BenchResult{}, err
		}
	}
	deadline := start.Add(s.Timeout)
	events := make([]unix.EpollEvent, len(conns))
	for l.busy > 0 {
		n, err := unix.EpollWait(ep, events, 1000)
		if err != nil && err != unix.EINTR {
			return BenchResult{}, fmt.Errorf("pipeload: epoll_wait: %w", err)
		}
		if time.Now().After(deadline) {
			return BenchResult{}, fmt.Errorf("pipeload: timed out after %s with %d requests unanswered", s.Timeout, s.Requests-l.done)
		}
		for _, ev := range events[:max(n, 0)] {
			i := int(ev.Fd)
			c := conns[i]
			if ev.Events&unix.EPOLLOUT != 0 && c.sent < len(c.batch) {
				if err := l.write(c, i); err != nil {
					return BenchResult{}, err
				}
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				if err := l.read(c, i); err != nil {
					return BenchResult{}, err
				}
			}
		}
	}
	elapsed := time.Since(start)
	r := BenchResult{Requests: s.Requests, Elapsed: elapsed.Seconds(), RPS: float64(s.Requests) / elapsed.Seconds()}
	slices.Sort(l.lat)
	if len(l.lat) > 0 {
		var sum float64
		for _, x := range l.lat {
			sum += x
		}
		r.AvgMS = sum / float64(len(l.lat))
		r.P50MS, r.P95MS, r.P99MS, r.P999MS = Percentile(l.lat, 50), Percentile(l.lat, 95), Percentile(l.lat, 99), Percentile(l.lat, 99.9)
		r.MaxMS = l.lat[len(l.lat)-1]
	}
	return r, nil
}

// plConn is one connection: the pipeline it sends (depth commands, their
// placeholders at holes) and the replies it has read and not yet counted.
type plConn struct {
	fd    int
	out   []byte
	holes []int
	batch []byte // the pipeline in flight: out[:k commands]
	sent  int    // bytes of batch written
	full  bool   // the socket took only part of it: waiting for EPOLLOUT
	want  int    // replies of batch not yet read
	in    []byte
	began time.Time
}

// plLoad is the state of the whole run.
type plLoad struct {
	ep               int
	cmdLen, holesPer int
	depth            int
	left             int // requests not yet sent
	done             int // replies read
	busy             int // connections with a pipeline in flight
	keyspace         uint64
	rnd              *rand.Rand
	lat              []float64 // ms per pipeline
}

// next sends c's next pipeline, if any request is left.
func (l *plLoad) next(c *plConn, i int, now time.Time) error {
	k := min(l.depth, l.left)
	if k == 0 {
		return nil
	}
	l.left -= k
	l.busy++
	c.batch, c.sent, c.want, c.began = c.out[:k*l.cmdLen], 0, k, now
	if l.keyspace > 0 {
		for _, at := range c.holes[:k*l.holesPer] {
			putDigits(c.out[at:at+12], l.rnd.Uint64N(l.keyspace))
		}
	}
	return l.write(c, i)
}

// write writes what is left of c's pipeline, and asks to be told when the
// socket takes more if the kernel took only part of it.
func (l *plLoad) write(c *plConn, i int) error {
	for c.sent < len(c.batch) {
		n, err := rawIO(unix.SYS_WRITE, c.fd, c.batch[c.sent:])
		if err == unix.EAGAIN {
			if c.full {
				return nil
			}
			c.full = true
			return unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT, Fd: int32(i)})
		}
		if err != nil {
			return fmt.Errorf("pipeload: write: %w", err)
		}
		c.sent += n
	}
	if c.full { // all written: stop asking about room to write
		c.full = false
		return unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)})
	}
	return nil
}

// read takes what c's socket holds and counts the whole replies in it.
func (l *plLoad) read(c *plConn, i int) error {
	for {
		if len(c.in) == cap(c.in) {
			c.in = slices.Grow(c.in, cap(c.in))
		}
		room := cap(c.in) - len(c.in)
		n, err := rawIO(unix.SYS_READ, c.fd, c.in[len(c.in):cap(c.in)])
		if err == unix.EAGAIN {
			return nil
		}
		if err != nil {
			return fmt.Errorf("pipeload: read: %w", err)
		}
		if n == 0 {
			return errors.New("pipeload: the server closed a connection")
		}
		c.in = c.in[:len(c.in)+n]
		at := 0
		for at < len(c.in) {
			end, ok := skipReply(c.in, at, 0)
			if !ok {
				break
			}
			switch c.in[at] {
			case '-', '!':
				return fmt.Errorf("pipeload: error reply: %q", c.in[at:end])
			case '>': // a RESP3 push is not a reply
				at = end
				continue
			}
			at = end
			if c.want == 0 {
				return errors.New("pipeload: a reply to no request")
			}
			c.want--
			l.done++
			if c.want == 0 {
				now := time.Now()
				l.lat = append(l.lat, float64(now.Sub(c.began))/1e6)
				l.busy--
				if err := l.next(c, i, now); err != nil {
					return err
				}
			}
		}
		c.in = c.in[:copy(c.in, c.in[at:])]
		if n < room {
			return nil // the socket is drained: no need for a read that says EAGAIN
		}
	}
}

// rawIO reads or writes a non-blocking socket without telling the Go
// scheduler: it never blocks, so the call need not give up its thread.
func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// dialRaw connects to a loopback addr as hiredis does (TCP_NODELAY), says
// HELLO 3 first if resp3, and returns the socket, non-blocking.
func dialRaw(addr string, resp3 bool) (int, error) {
	if err := CheckLoopback(addr); err != nil {
		return -1, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return -1, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return -1, err
	}
	ip := net.ParseIP(host).To4()
	if ip == nil {
		return -1, fmt.Errorf("%s: IPv4 only", addr)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	sa := &unix.SockaddrInet4{Port: p}
	copy(sa.Addr[:], ip)
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	// The socket is still blocking while HELLO 3 is answered: a server that
	// never answers fails the run after 5 s instead of hanging it.
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	if err := errors.Join(unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1),
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if resp3 {
		if err := hello3(fd); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func hello3(fd int) error {
	if _, err := unix.Write(fd, []byte("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")); err != nil {
		return err
	}
	var in []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if err != nil {
			return fmt.Errorf("HELLO 3: %w", err)
		}
		if n == 0 {
			return errors.New("HELLO 3: connection closed")
		}
		in = append(in, buf[:n]...)
		if end, ok := skipReply(in, 0, 0); ok {
			if in[0] == '-' {
				return fmt.Errorf("HELLO 3: %q", in[:end])
			}
			return nil
		}
	}
}

// encodeTemplate encodes argv as one RESP command and, if rand, returns
// the offsets of its __rand_int__ placeholders, each to be overwritten by
// 12 digits (which is why the encoding's lengths never change).
func encodeTemplate(argv []string, rand bool) ([]byte, []int) {
	const ph = "__rand_int__"
	b := fmt.Appendf(nil, "*%d\r\n", len(argv))
	var holes []int
	for _, a := range argv {
		b = fmt.Appendf(b, "$%d\r\n", len(a))
		at := len(b)
		b = append(b, a...)
		for rand {
			j := bytes.Index(b[at:], []byte(ph))
			if j < 0 {
				break
			}
			holes = append(holes, at+j)
			at += j + len(ph)
		}
		b = append(b, "\r\n"...)
	}
	return b, holes
}

// putDigits writes v into d as 12 zero-padded digits, as KeyName.
func putDigits(d []byte, v uint64) {
	for j := 11; j >= 0; j-- {
		d[j] = byte('0' + v%10)
		v /= 10
	}
}

// skipReply returns the end of the RESP2 or RESP3 reply starting at b[at],
// or false if b does not hold all of it yet. (bench.Conn's reader decodes
// each reply into a Value: the cost this generator exists to avoid.)
func skipReply(b []byte, at, depth int) (int, bool) {
	if at >= len(b) || depth > 64 {
		return 0, false
	}
	// The header line; its number matters only to blobs and aggregates.
	var n int64
	neg := false
	end := -1
	for i := at + 1; i+1 < len(b); i++ {
		c := b[i]
		if c == '\r' {
			end = i + 2
			break
		}
		switch {
		case c >= '0' && c <= '9':
			n = n*10 + int64(c-'0')
		case c == '-' && i == at+1:
			neg = true
		}
	}
	if end < 0 {
		return 0, false
	}
	if neg {
		n = -n
	}
	switch b[at] {
	case '$', '=', '!': // blobs: a length, then that many bytes and CRLF
		if n < 0 {
			return end, true
		}
		if end+int(n)+2 > len(b) {
			return 0, false
		}
		return end + int(n) + 2, true
	case '*', '~', '>', '%', '|':
		if b[at] == '%' || b[at] == '|' {
			n *= 2
		}
		for range max(n, 0) {
			var ok bool
			if end, ok = skipReply(b, end, depth+1); !ok {
				return 0, false
			}
		}
		if b[at] == '|' { // attributes come before the reply they describe
			return skipReply(b, end, depth+1)
		}
		return end, true
	}
	return end, true // a line: + - : _ , # (
}
