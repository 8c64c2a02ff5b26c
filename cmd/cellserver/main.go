// Command cellserver is a standalone rate-limit server that speaks the Redis
// protocol and answers CL.THROTTLE exactly as the redis-cell module does.
//
// This file only turns flags into one Config and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // served only with --pprof-addr
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/store"
)

// Config is everything cellserver can be told at start.
type Config struct {
	Addr        string // TCP listen address
	RequirePass string // password of the default user; empty: no AUTH
	Threads     int    // GOMAXPROCS; 0: the Go runtime's default (the CPUs available)
	Shards      int    // keyspace shards
	ShardOwners string // loops (default): the event loops run the shards; goroutines: each shard its own
	EventLoops  int    // event loops owning the shards; 0: one less than GOMAXPROCS, at least 1
	EnableDebug string // no | yes | local
	MaxClients  int
	MaxKeyBytes int           // longest key accepted; 0: no limit
	IdleTimeout time.Duration // close clients idle this long; 0: never
	// Output buffer limits of a client (Redis's client-output-buffer-limit
	// for normal clients); 0: none.
	OutputHard, OutputSoft int64
	OutputSoftFor          time.Duration

	// AdminPassword is the password of the user "admin", the only one
	// allowed admin commands (CLUSTER SETTOPOLOGY and IMPORTSTATE, DEBUG);
	// empty: no admin user, and loopback clients may run them.
	AdminPassword string

	DataDir    string      // Pebble directory for limiter state
	InMemory   bool        // no persistence at all
	Fsync      store.Fsync // durability policy
	StopWrites bool        // answer MISCONF to writes while persisting fails
	// RecoverCorrupt starts from a damaged data dir with what is readable
	// instead of refusing it.
	RecoverCorrupt bool

	PprofAddr string // if set, serve net/http/pprof here (profiling)

	ClusterMode     string // no | emulated | yes
	ClusterAnnounce string // host:port other nodes and clients reach this node at

	SlowlogLogSlowerThan    int64 // µs; 0 logs every command, negative none
	SlowlogMaxLen           int64
	LatencyMonitorThreshold int64 // ms; 0 off
	TrackingMaxKeys         int

	// Gateways (gateways.go).
	PolicyFile           string            // envoyproxy/ratelimit-format YAML, hot-reloaded
	HTTPAddr             string            // forward-auth check, /json, /metrics
	GRPCAddr             string            // Envoy RLS v3 and gRPC health
	MetricsAddr          string            // /metrics on its own address (default: on HTTPAddr)
	HTTPTrustedHops      int               // proxies in front whose X-Forwarded-For entries are trusted
	HTTPOnError          string            // allow | deny: the check's answer when the store cannot decide
	HTTPForwardedHeaders string            // forwarded | original: the method/path headers the gateway overwrites
	HTTPMaxConns         int               // simultaneous HTTP connections
	RateLimitHeaders     header.Convention // which header sets the gateways write
}

func parseFlags(args []string, stderr io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("cellserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:6379", "TCP `host:port` to listen on")
	fs.StringVar(&c.RequirePass, "requirepass", "", "require clients to AUTH with this `password`")
	fs.StringVar(&c.AdminPassword, "admin-password", "", "`password` of the user admin (AUTH admin PASSWORD), the only one that may run CLUSTER SETTOPOLOGY, CLUSTER IMPORTSTATE and DEBUG; without it only loopback clients may (every node of a cluster must share it)")
	fs.IntVar(&c.Threads, "threads", 0, "CPUs to run Go code on at once (GOMAXPROCS); event loops and the default number of shards follow it (default: every CPU available, cgroup limits included)")
	fs.IntVar(&c.Shards, "shards", 0, "number of keyspace shards, each owned by one goroutine (default: --threads)")
	fs.IntVar(&c.EventLoops, "event-loops", 0, "event loops that own the shards (shard i to loop i mod N; at most --shards), with --shard-owners loops (default: one less than --threads, at least 1: a core is left to the committer, the garbage collector and, on a shared host, the clients)")
	fs.StringVar(&c.ShardOwners, "shard-owners", "loops", "what runs the shards: loops (the event loops, one per thread, each owning shards i mod threads: a command on the loop's own shards runs inline) or goroutines (one per shard, every command handed over)")
	fs.StringVar(&c.EnableDebug, "enable-debug-command", "no", "allow DEBUG (e.g. DEBUG CLOCK): no, yes, or local (loopback clients only)")
	fs.IntVar(&c.MaxClients, "maxclients", 10000, "maximum simultaneous client connections (lowered at start to what the open-files limit allows)")
	fs.IntVar(&c.MaxKeyBytes, "max-key-bytes", commands.DefaultMaxKeyBytes, "longest key in bytes a command accepts (0: no limit)")
	timeout := fs.Int("timeout", 0, "close a client after it sent nothing for this many `seconds` (0: never)")
	obl := fs.String("client-output-buffer-limit", "256mb 64mb 60", "`hard soft seconds`: disconnect a client whose unread replies pass hard, or stay above soft for that many seconds (0: no limit), as Redis's client-output-buffer-limit for normal clients")
	fs.StringVar(&c.DataDir, "data-dir", "cellserver-data", "`directory` where limiter state persists (Pebble)")
	fs.BoolVar(&c.InMemory, "in-memory", false, "keep state in memory only: nothing is written to disk")
	fsync := fs.String("fsync", "everysec", "durability: always (reply after sync), everysec (lose at most ~1 s on a crash), or no (the OS decides)")
	fs.StringVar(&c.PprofAddr, "pprof-addr", "", "serve Go's net/http/pprof profiles on this `host:port` (off by default)")
	fs.StringVar(&c.ClusterMode, "cluster", "no", "cluster mode: no, emulated (one node owning every slot) or yes (owns what the applied topology gives it)")
	fs.StringVar(&c.ClusterAnnounce, "cluster-announce", "", "`host:port` this node announces in cluster mode (default: --addr); its node id derives from it")
	stopWrites := fs.String("stop-writes-on-persist-error", "no", "yes: while disk writes fail, state-changing commands answer MISCONF")
	recoverCorrupt := fs.String("recover-corrupt", "no", "yes: start from a data dir whose write-ahead log is damaged or cut, with what is readable, reporting the records lost (no: refuse it, changing nothing)")
	fs.Int64Var(&c.SlowlogLogSlowerThan, "slowlog-log-slower-than", commands.DefaultSlowlogSlowerThan, "log commands that take at least this many `microseconds` in the slow log (SLOWLOG GET): 0 logs every command, -1 none (CONFIG SET changes it)")
	fs.Int64Var(&c.SlowlogMaxLen, "slowlog-max-len", commands.DefaultSlowlogMaxLen, "how many `entries` the slow log keeps (CONFIG SET changes it)")
	fs.IntVar(&c.TrackingMaxKeys, "tracking-table-max-keys", commands.DefaultTrackingMaxKeys, "most `keys` remembered for CLIENT TRACKING clients, counted per client and key; past it a key read is invalidated at once")
	fs.Int64Var(&c.LatencyMonitorThreshold, "latency-monitor-threshold", 0, "record latency events (LATENCY LATEST, DOCTOR) of commands that take at least this many `milliseconds`; 0: off (CONFIG SET changes it)")
	fs.StringVar(&c.PolicyFile, "policy-file", "", "rate-limit policy `file` (envoyproxy/ratelimit's YAML, plus algorithm/burst/cost/timezone), reloaded when it changes; needed by --http-addr and --grpc-addr")
	fs.StringVar(&c.HTTPAddr, "http-addr", "", "serve the HTTP forward-auth check (/check), /json and /metrics on this `host:port` (off by default)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", "", "serve Envoy's rate-limit service (RLS v3) and gRPC health on this `host:port` (off by default)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this `host:port` (default: on --http-addr, if set)")
	fs.IntVar(&c.HTTPTrustedHops, "http-trusted-hops", 0, "number of proxies in front of the HTTP check whose X-Forwarded-For entries are trusted; 0 uses X-Real-IP, else the peer address")
	fs.StringVar(&c.HTTPOnError, "http-on-error", "deny", "the HTTP check's answer when the store cannot decide: allow (200) or deny (429)")
	fs.StringVar(&c.HTTPForwardedHeaders, "http-forwarded-headers", "forwarded", "the headers the HTTP check reads method and path from, the ones the gateway in front overwrites: forwarded (X-Forwarded-Method/-Uri: Traefik, Caddy) or original (X-Original-Method/-URI: nginx); host is X-Forwarded-Host")
	fs.IntVar(&c.HTTPMaxConns, "http-max-conns", 10000, "maximum simultaneous connections of the HTTP check and, counted apart, of the gRPC service")
	rlHeaders := fs.String("rate-limit-headers", header.Default.String(), "header sets the gateways write: a comma list of ietf (RateLimit, RateLimit-Policy), x (X-RateLimit-*, Reset in epoch seconds) or x-delta (Reset in seconds from now), or none")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cellserver [flags]\n       cellserver cluster init --nodes host:port,...\n       cellserver cluster apply FILE\n       cellserver cluster dump HOST:PORT\n\nA Redis-protocol rate-limit server answering CL.THROTTLE like redis-cell.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	if c.Threads < 0 {
		return c, fmt.Errorf("--threads must be at least 1 (or 0 for every CPU), got %d", c.Threads)
	}
	if c.Shards == 0 {
		c.Shards = c.Threads
		if c.Shards == 0 {
			c.Shards = runtime.GOMAXPROCS(0)
		}
	}
	if c.EventLoops < 0 {
		return c, fmt.Errorf("--event-loops must be at least 1 (or 0 for the default), got %d", c.EventLoops)
	}
	if c.ShardOwners != "loops" && c.ShardOwners != "goroutines" {
		return c, fmt.Errorf("--shard-owners must be loops or goroutines, got %q", c.ShardOwners)
	}
	if c.SlowlogLogSlowerThan < -1 {
		return c, fmt.Errorf("--slowlog-log-slower-than must be at least -1 (-1: off), got %d", c.SlowlogLogSlowerThan)
	}
	if c.SlowlogMaxLen < 0 {
		return c, fmt.Errorf("--slowlog-max-len must not be negative, got %d", c.SlowlogMaxLen)
	}
	if c.TrackingMaxKeys < 1 {
		return c, fmt.Errorf("--tracking-table-max-keys must be at least 1, got %d", c.TrackingMaxKeys)
	}
	if c.LatencyMonitorThreshold < 0 {
		return c, fmt.Errorf("--latency-monitor-threshold must not be negative, got %d", c.LatencyMonitorThreshold)
	}
	if c.MaxClients < 1 {
		return c, fmt.Errorf("--maxclients must be at least 1, got %d", c.MaxClients)
	}
	if c.MaxKeyBytes < 0 {
		return c, fmt.Errorf("--max-key-bytes must not be negative, got %d", c.MaxKeyBytes)
	}
	if *timeout < 0 {
		return c, fmt.Errorf("--timeout must not be negative, got %d", *timeout)
	}
	c.IdleTimeout = time.Duration(*timeout) * time.Second
	var err error
	if c.RateLimitHeaders, err = header.ParseConvention(*rlHeaders); err != nil {
		return c, fmt.Errorf("--rate-limit-headers: %v", err)
	}
	if err := checkGatewayFlags(&c); err != nil {
		return c, err
	}
	if c.OutputHard, c.OutputSoft, c.OutputSoftFor, err = parseOutputLimit(*obl); err != nil {
		return c, fmt.Errorf("--client-output-buffer-limit: %v", err)
	}
	if c.Fsync, err = store.ParseFsync(*fsync); err != nil {
		return c, fmt.Errorf("--fsync must be always, everysec or no, got %q", *fsync)
	}
	switch *stopWrites {
	case "yes":
		c.StopWrites = true
	case "no":
	default:
		return c, fmt.Errorf("--stop-writes-on-persist-error must be yes or no, got %q", *stopWrites)
	}
	if c.DataDir == "" && !c.InMemory {
		// An empty variable in a unit file must not turn durability off.
		return c, fmt.Errorf("--data-dir must not be empty (--in-memory keeps state in memory only)")
	}
	switch *recoverCorrupt {
	case "yes":
		c.RecoverCorrupt = true
	case "no":
	default:
		return c, fmt.Errorf("--recover-corrupt must be yes or no, got %q", *recoverCorrupt)
	}
	switch c.ClusterMode {
	case "no", "emulated", "yes":
	default:
		return c, fmt.Errorf("--cluster must be no, emulated or yes, got %q", c.ClusterMode)
	}
	if c.ClusterAnnounce == "" {
		c.ClusterAnnounce = c.Addr
	}
	if _, _, err := cluster.ParseAddr(c.ClusterAnnounce); err != nil && c.ClusterMode != "no" {
		return c, fmt.Errorf("--cluster-announce: %v", err)
	}
	switch c.EnableDebug {
	case "no", "yes", "local":
	default:
		return c, fmt.Errorf("--enable-debug-command must be no, yes or local, got %q", c.EnableDebug)
	}
	return c, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "cluster" {
		os.Exit(clusterCLI(os.Args[2:], os.Stdout, os.Stderr))
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cellserver:", err)
		os.Exit(2)
	}
	// Signals are taken from here on, before the data dir loads and the
	// port opens: a stop at any moment is a clean one (the state written
	// out, exit status 0), and SIGHUP, which a closed terminal, logrotate
	// or systemctl reload sends, does not end the server, as in Redis.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			slog.Info("SIGHUP received: ignored (there is no log file to reopen)")
		}
	}()
	if err := run(cfg, stop); err != nil {
		slog.Error("cellserver stopped", "err", err)
		os.Exit(1)
	}
}

// run serves cfg until a signal arrives on stop (or serving fails). A stop
// that arrives before the port opens ends the start cleanly there.
func run(cfg Config, stop <-chan os.Signal) error {
	log := slog.Default()
	log.Info("cellserver starting", "version", commands.Version, "pid", os.Getpid())
	if cfg.Threads > 0 {
		runtime.GOMAXPROCS(cfg.Threads) // before the event loops are counted
	}
	// GOGC 25 with a floor under the headroom (see gc.go). GOGC, if set,
	// still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcBase)
		stopGC := make(chan struct{})
		defer close(stopGC)
		go tuneGC(stopGC)
	}
	reserve := fdReserve
	if !cfg.InMemory {
		reserve += store.MaxOpenFiles
	}
	maxClients, err := fitMaxClients(cfg.MaxClients, reserve, log)
	if err != nil {
		return err
	}
	scfg := store.Config{Shards: cfg.Shards, Logger: log}
	if cfg.ShardOwners == "loops" {
		// Each event loop owns shards i mod loops. One loop fewer than
		// threads by default: on 2 cores shared with the load generator,
		// one loop owning both shards beat two (docs/performance.md, issue
		// #19): a command then never waits for another loop, and the other
		// core runs the committer, the GC and the clients.
		loops := cfg.EventLoops
		if loops == 0 {
			loops = max(1, runtime.GOMAXPROCS(0)-1)
		}
		scfg.Owners = min(loops, cfg.Shards)
	}
	if !cfg.InMemory {
		scfg.DataDir = cfg.DataDir
		scfg.Fsync = cfg.Fsync
		scfg.RecoverCorrupt = cfg.RecoverCorrupt
	}
	st, err := store.New(scfg)
	if err != nil {
		return err
	}
	signalled := false // a clean stop: "bye" once the data dir is closed
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("closing the data dir", "err", err)
		}
		if signalled {
			log.Info("bye")
		}
	}()
	// stopped reports a stop that arrived while starting.
	stopped := func() bool {
		select {
		case s := <-stop:
			log.Info("shutting down before serving", "signal", s.String())
			signalled = true
			return true
		default:
			return false
		}
	}
	if stopped() {
		return nil
	}
	host, port, _ := cluster.ParseAddr(cfg.ClusterAnnounce)
	cc := commands.ClusterConfig{Mode: cfg.ClusterMode, Host: host, Port: port}
	if !cfg.InMemory {
		cc.TopologyPath = filepath.Join(cfg.DataDir, "cluster-topology.json")
	}
	exec, err := commands.New(commands.Config{
		RequirePass:   cfg.RequirePass,
		AdminPassword: cfg.AdminPassword,
		StopWrites:    cfg.StopWrites,
		EnableDebug:   cfg.EnableDebug,
		Addr:          cfg.Addr,
		Logger:        log,
		Params: map[string]string{
			"maxclients": strconv.Itoa(maxClients),
			"timeout":    strconv.Itoa(int(cfg.IdleTimeout / time.Second)),
			"client-output-buffer-limit": fmt.Sprintf("normal %d %d %d", cfg.OutputHard, cfg.OutputSoft,
				int(cfg.OutputSoftFor/time.Second)),
		},
		Cluster:                 cc,
		MaxKeyBytes:             noLimit(cfg.MaxKeyBytes),
		SlowlogLogSlowerThan:    &cfg.SlowlogLogSlowerThan,
		SlowlogMaxLen:           &cfg.SlowlogMaxLen,
		LatencyMonitorThreshold: cfg.LatencyMonitorThreshold,
		TrackingMaxKeys:         cfg.TrackingMaxKeys,
	}, st)
	if err != nil {
		return err
	}
	defer exec.Close()
	// The gateways listen before the RESP port does, so that a bad policy
	// file or a taken address stops the start with nothing served.
	stopGateways, err := startGateways(cfg, exec, log)
	if err != nil {
		return err
	}
	stopGateways = sync.OnceFunc(stopGateways)
	defer stopGateways()
	srv, err := resp.New(resp.Config{
		Addr:          cfg.Addr,
		MaxClients:    maxClients,
		OutputHard:    int64(noLimit(int(cfg.OutputHard))),
		OutputSoft:    int64(noLimit(int(cfg.OutputSoft))),
		OutputSoftFor: cfg.OutputSoftFor,
		IdleTimeout:   cfg.IdleTimeout,
		Logger:        log,
		Owners:        st.Owners()[:scfg.Owners],
	}, exec)
	if err != nil {
		return err
	}
	if stopped() {
		return nil
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	persistence := "in-memory"
	if !cfg.InMemory {
		persistence = cfg.DataDir + " fsync=" + cfg.Fsync.String()
	}
	log.Info("cellserver listening", "addr", srv.Addr().String(), "threads", runtime.GOMAXPROCS(0), "shards", st.NumShards(), "shard_owners", cfg.ShardOwners, "event_loops", srv.NumLoops(), "persistence", persistence, "maxclients", maxClients, "version", commands.Version)

	if cfg.PprofAddr != "" {
		go func() {
			log.Info("pprof listening", "addr", cfg.PprofAddr)
			if err := http.ListenAndServe(cfg.PprofAddr, nil); err != nil {
				log.Error("pprof server", "err", err)
			}
		}()
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	select {
	case err := <-served:
		return fmt.Errorf("serving stopped: %w", err)
	case s := <-stop:
		log.Info("shutting down", "signal", s.String())
		signalled = true
	}
	// The gateways stop while the RESP connections finish, not after them,
	// so that the data dir is closed (the last changes written) well inside
	// the 10 s a supervisor commonly gives after SIGTERM.
	gateways := make(chan struct{})
	go func() {
		defer close(gateways)
		stopGateways()
	}()
	exec.EndPauses()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("connections did not finish in time", "err", err)
	}
	<-served
	<-gateways
	return nil
}
