// Package store is cellserver's keyspace: limiter keys split into shards, each
// owned by one goroutine that alone reads and writes its keys, so every
// decision is atomic without a mutex on the key map.
//
// Quick start:
//
//	st := store.New(store.Config{Shards: 4})
//	defer st.Close()
//	sess := st.NewSession()
//	op := &store.Op{Kind: store.OpThrottle, Key: []byte("user1"),
//		Params: gcra.Params{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1}}
//	sess.Add(op)
//	sess.Run() // op.Result now holds the decision
//
// Keys map to shards by their Redis Cluster hash slot, so keys that share a
// {hash tag} share an owner.
package store

import (
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/cellserver/cellserver/cluster"
)

// Config configures a Store. The zero value is usable: EnsureDefaults fills it.
type Config struct {
	// Shards is the number of shard owner goroutines. Default: GOMAXPROCS-
	// independent 16, enough to spread hot keys while keeping per-shard
	// batches large. Must be 1..16384.
	Shards int
	// Clock is the server clock; nil means a new wall clock.
	Clock *Clock
	// SweepInterval is how often each shard runs one step of its incremental
	// expiry sweep. Default 100ms; negative turns the sweep off (tests).
	SweepInterval time.Duration
	// SweepFraction: each step examines 1/SweepFraction of the shard's
	// entries (at least 256), so a full pass takes SweepFraction steps.
	// Default 50 (a full pass every 5 s at the default interval).
	SweepFraction int
}

// EnsureDefaults fills zero fields with defaults.
func (c *Config) EnsureDefaults() {
	if c.Shards == 0 {
		c.Shards = 16
	}
	if c.Clock == nil {
		c.Clock = &Clock{}
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 100 * time.Millisecond
	}
	if c.SweepFraction == 0 {
		c.SweepFraction = 50
	}
}

// Validate reports a configuration error.
func (c *Config) Validate() error {
	if c.Shards < 1 || c.Shards > cluster.SlotCount {
		return fmt.Errorf("store: shards must be between 1 and %d, got %d", cluster.SlotCount, c.Shards)
	}
	if c.SweepFraction < 1 {
		return fmt.Errorf("store: invalid sweep settings")
	}
	return nil
}

// Store is the sharded keyspace. Its methods are safe for concurrent use.
type Store struct {
	cfg    Config
	shards []*shard
	mu     sync.RWMutex // held shared while a Session runs; exclusively by Close
	closed bool
	wg     sync.WaitGroup
}

// New starts a store and its shard goroutines.
func New(cfg Config) (*Store, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg}
	seed := maphash.MakeSeed()
	for i := 0; i < cfg.Shards; i++ {
		sh := newShard(i, seed, cfg)
		s.shards = append(s.shards, sh)
	}
	for _, sh := range s.shards {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			sh.loop()
		}()
	}
	return s, nil
}

// Clock returns the store's clock.
func (s *Store) Clock() *Clock { return s.cfg.Clock }

// NumShards returns the number of shards.
func (s *Store) NumShards() int { return len(s.shards) }

// ShardOf returns the shard that owns key.
func (s *Store) ShardOf(key []byte) int {
	return cluster.KeySlot(key) % len(s.shards)
}

// Close stops the shard goroutines after in-flight sessions finish. Later
// Runs fail their ops with ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	for _, sh := range s.shards {
		close(sh.quit)
	}
	s.wg.Wait()
	return nil
}

// Stats are cheap, approximate counters for INFO.
type Stats struct {
	Keys        int64 // live and not yet swept keys
	Expires     int64 // keys with a TTL
	ExpiredKeys int64 // keys removed because they expired (lazily or by the sweep)
	TableBytes  int64 // bytes held by key tables (entries, index, arenas)
}

// Stats sums every shard's counters without stopping them.
func (s *Store) Stats() Stats {
	var st Stats
	for _, sh := range s.shards {
		st.Keys += sh.nkeys.Load()
		st.Expires += sh.nexpires.Load()
		st.ExpiredKeys += sh.expired.Load()
		st.TableBytes += sh.bytes.Load()
	}
	return st
}

// Session batches ops from one connection: Add queues ops per shard and Run
// sends each touched shard one batch and waits for all of them. A Session is
// used by one goroutine at a time and is reusable; it allocates nothing once
// warm.
type Session struct {
	st      *Store
	pending [][]*Op
	touched []int
	batches []batch
	wg      sync.WaitGroup
}

type batch struct {
	ops []*Op
	wg  *sync.WaitGroup
}

// NewSession returns a Session on s.
func (s *Store) NewSession() *Session {
	return &Session{
		st:      s,
		pending: make([][]*Op, len(s.shards)),
		batches: make([]batch, len(s.shards)),
	}
}

// Add queues a single-key op on its key's shard.
func (ss *Session) Add(op *Op) {
	ss.AddTo(ss.st.ShardOf(op.Key), op)
}

// AddTo queues op on the given shard (used for shard-wide ops).
func (ss *Session) AddTo(shard int, op *Op) {
	op.Err = nil
	if len(ss.pending[shard]) == 0 {
		ss.touched = append(ss.touched, shard)
	}
	ss.pending[shard] = append(ss.pending[shard], op)
}

// Pending reports whether ops are queued.
func (ss *Session) Pending() bool { return len(ss.touched) > 0 }

// Run executes every queued op, each shard's ops in the order they were
// added, and returns when all are done.
func (ss *Session) Run() {
	if len(ss.touched) == 0 {
		return
	}
	st := ss.st
	st.mu.RLock()
	if st.closed {
		st.mu.RUnlock()
		for _, i := range ss.touched {
			for _, op := range ss.pending[i] {
				op.Err = ErrClosed
			}
		}
		ss.reset()
		return
	}
	ss.wg.Add(len(ss.touched))
	for _, i := range ss.touched {
		b := &ss.batches[i]
		b.ops = ss.pending[i]
		b.wg = &ss.wg
		st.shards[i].in <- b
	}
	ss.wg.Wait()
	st.mu.RUnlock()
	ss.reset()
}

func (ss *Session) reset() {
	for _, i := range ss.touched {
		p := ss.pending[i]
		clear(p)
		ss.pending[i] = p[:0]
		ss.batches[i].ops = nil
	}
	ss.touched = ss.touched[:0]
}
