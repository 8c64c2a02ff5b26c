package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// KeyName appends prefix followed by i as 12 zero-padded digits, which is how
// redis-benchmark expands __rand_int__: loaded keys are the keys a run with
// "-r N" and "<prefix>__rand_int__" touches.
func KeyName(b []byte, prefix string, i int) []byte {
	b = append(b, prefix...)
	var d [12]byte
	for j := 11; j >= 0; j-- {
		d[j] = byte('0' + i%10)
		i /= 10
	}
	return append(b, d[:]...)
}

// LoadSpec says which keys to load and how: Command(key) returns the argv to
// send for one key (the key is already in the slice).
type LoadSpec struct {
	Addr     string
	Prefix   string
	From, To int // key indices [From, To)
	Command  func(key []byte) [][]byte
	Conns    int           // parallel connections (default 4)
	Depth    int           // commands per pipelined batch (default 256)
	Timeout  time.Duration // whole load (default 30 min)
	Progress func(done int)
}

// LoadStats reports a finished load.
type LoadStats struct {
	Keys    int     `json:"keys"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"keys_per_s"`
}

// Load sends one command per key index, pipelined over a few connections, and
// fails on the first error reply or on a reply that is not an array.
func Load(ctx context.Context, s LoadSpec) (LoadStats, error) {
	if s.Conns <= 0 {
		s.Conns = 4
	}
	if s.Depth <= 0 {
		s.Depth = 256
	}
	if s.Timeout == 0 {
		s.Timeout = 30 * time.Minute
	}
	n := s.To - s.From
	if n <= 0 {
		return LoadStats{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	start := time.Now()
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, s.Conns)
	per := (n + s.Conns - 1) / s.Conns
	for c := 0; c < s.Conns; c++ {
		lo := s.From + c*per
		hi := min(lo+per, s.To)
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loadRange(ctx, s, lo, hi, &done); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	stop := make(chan struct{})
	if s.Progress != nil {
		go func() {
			t := time.NewTicker(2 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					s.Progress(int(done.Load()))
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	if err := <-errs; err != nil {
		return LoadStats{}, err
	}
	if ctx.Err() != nil {
		return LoadStats{}, fmt.Errorf("load of %d keys: %w", n, ctx.Err())
	}
	el := time.Since(start).Seconds()
	return LoadStats{Keys: n, Seconds: el, Rate: float64(n) / el}, nil
}

func loadRange(ctx context.Context, s LoadSpec, lo, hi int, done *atomic.Int64) error {
	c, err := Dial(s.Addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	var buf, key []byte
	for i := lo; i < hi; {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		buf = buf[:0]
		j := i
		for ; j < hi && j-i < s.Depth; j++ {
			key = KeyName(key[:0], s.Prefix, j)
			buf = AppendCommand(buf, s.Command(key)...)
		}
		c.SendRaw(buf)
		if err := c.Flush(); err != nil {
			return err
		}
		for k := i; k < j; k++ {
			v, err := c.Receive()
			if err != nil {
				return err
			}
			if v.Kind != '*' {
				return fmt.Errorf("load %s: unexpected reply %s", KeyName(nil, s.Prefix, k), v)
			}
		}
		done.Add(int64(j - i))
		i = j
	}
	return nil
}
