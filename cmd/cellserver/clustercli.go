package main

// `cellserver cluster ...`: the orchestrator side of cluster mode. `init`
// writes a topology document, `apply` pushes one to every node it names.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/cellserver/cellserver/cluster"
)

const clusterUsage = `Usage:
  cellserver cluster init --nodes host:port,host:port,... [--epoch N]
      Print a topology that splits the 16384 hash slots evenly over the nodes
      (one shard per node, as redis-cli --cluster create splits them).
  cellserver cluster apply FILE [--admin-password P] [--password P] [--timeout 5s]
      Send the topology in FILE to every node it names (CLUSTER SETTOPOLOGY)
      and print "<host:port> <id> ok" or "<host:port> <id> error: ..." per node.
      SETTOPOLOGY is an admin command: give the nodes' --admin-password, or
      run apply on the nodes' machine if they have none (loopback only).

Exit status: 0 on success; 1 if FILE is unusable or any node refused the
topology or could not be reached; 2 if the command line is wrong.
`

// clusterCLI runs `cellserver cluster <args>` and returns the exit status.
func clusterCLI(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, clusterUsage)
		return 2
	}
	switch args[0] {
	case "init":
		return clusterInit(args[1:], stdout, stderr)
	case "apply":
		return clusterApply(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stderr, clusterUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "cellserver cluster: unknown subcommand %q\n\n%s", args[0], clusterUsage)
		return 2
	}
}

func clusterInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cellserver cluster init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.String("nodes", "", "comma-separated `host:port` addresses the nodes announce to clients")
	epoch := fs.Uint64("epoch", 1, "topology epoch (version), at most 2^53-1; each push must carry a higher one")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cellserver cluster init --nodes host:port,host:port,... [--epoch N]\n\n"+
			"Prints a topology document (JSON) with one shard per node and the slots split evenly.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := clusterParseArgs(fs, args)
	if err != nil {
		return clusterFlagExit(err)
	}
	if len(pos) > 0 {
		return clusterUsageError(fs, "unexpected argument %q", pos[0])
	}
	if *nodes == "" {
		return clusterUsageError(fs, "--nodes is required")
	}
	var addrs []string
	for _, a := range strings.Split(*nodes, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return clusterUsageError(fs, "--nodes has an empty entry: %q", *nodes)
		}
		addrs = append(addrs, a)
	}
	top, err := cluster.Init(addrs, *epoch)
	if err != nil {
		return clusterUsageError(fs, "%v", err)
	}
	out, err := top.Marshal()
	if err != nil { // cannot happen: Init validated it
		fmt.Fprintf(stderr, "cellserver cluster init: %v\n", err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "cellserver cluster init: %v\n", err)
		return 1
	}
	return 0
}

func clusterApply(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cellserver cluster apply", flag.ContinueOnError)
	fs.SetOutput(stderr)
	password := fs.String("password", "", "`password` the nodes require (their --requirepass); not needed with --admin-password")
	adminPassword := fs.String("admin-password", "", "log in as the user admin with this `password` (the nodes' --admin-password)")
	timeout := fs.Duration("timeout", 5*time.Second, "connect and reply timeout per node")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cellserver cluster apply FILE [--admin-password P] [--password P] [--timeout 5s]\n\n"+
			"Sends the topology in FILE to every node it names, primaries and replicas.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := clusterParseArgs(fs, args)
	if err != nil {
		return clusterFlagExit(err)
	}
	switch {
	case len(pos) == 0:
		return clusterUsageError(fs, "FILE is required")
	case len(pos) > 1:
		return clusterUsageError(fs, "unexpected argument %q", pos[1])
	case *timeout <= 0:
		return clusterUsageError(fs, "--timeout must be positive, got %v", *timeout)
	}
	file := pos[0]
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "cellserver cluster apply: %v\n", err)
		return 1
	}
	top, err := cluster.Parse(data)
	if err != nil {
		fmt.Fprintf(stderr, "cellserver cluster apply: %s: %v\n", file, err)
		return 1
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil { // cannot fail: Parse accepted it
		fmt.Fprintf(stderr, "cellserver cluster apply: %s: %v\n", file, err)
		return 1
	}
	payload := compact.String()

	var nodes []cluster.Node
	for _, s := range top.Shards {
		nodes = append(nodes, s.Primary)
		nodes = append(nodes, s.Replicas...)
	}
	// go-redis logs failed dials to os.Stderr on its own; the per-node line
	// below already says it. This runs as its own process, so silencing the
	// library's global logger affects nothing else.
	redis.SetLogger(&logging.VoidLogger{})

	// Push to all nodes at once (a down node costs one timeout, not one per
	// node), then report in document order.
	results := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { results[i] = clusterPush(n.Addr(), *adminPassword, *password, *timeout, payload) })
	}
	wg.Wait()
	failed := 0
	for i, n := range nodes {
		if err := results[i]; err != nil {
			failed++
			fmt.Fprintf(stdout, "%s %s error: %s\n", n.Addr(), n.ID, clusterOneLine(err.Error()))
		} else {
			fmt.Fprintf(stdout, "%s %s ok\n", n.Addr(), n.ID)
		}
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "cellserver cluster apply: %d of %d nodes did not accept epoch %d\n", failed, len(nodes), top.Epoch)
		return 1
	}
	return 0
}

// clusterPush sends CLUSTER SETTOPOLOGY to one node and expects +OK. It logs
// in as admin if adminPassword is set (admin may also do what the default
// user may), else as the default user with password.
func clusterPush(addr, adminPassword, password string, timeout time.Duration, payload string) error {
	var user string
	if adminPassword != "" {
		user, password = "admin", adminPassword
	}
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		Username:        user,
		Password:        password,
		Protocol:        2,
		DialTimeout:     timeout,
		ReadTimeout:     timeout,
		WriteTimeout:    timeout,
		MaxRetries:      -1, // go-redis: 0 means the default (3 retries); -1 means none
		DialerRetries:   1,  // one dial attempt (0 would mean the default, 5)
		PoolSize:        1,
		DisableIdentity: true, // no CLIENT SETINFO
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*timeout)
	defer cancel()
	reply, err := c.Do(ctx, "CLUSTER", "SETTOPOLOGY", payload).Result()
	if err != nil {
		return err
	}
	if s, ok := reply.(string); !ok || s != "OK" {
		return fmt.Errorf("unexpected reply %v", reply)
	}
	return nil
}

// clusterParseArgs parses flags that may come before or after positional
// arguments ("apply FILE --timeout 1s"), which flag.FlagSet alone stops at.
// Everything after "--" is positional.
func clusterParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// clusterFlagExit maps a flag.Parse error (already printed by the FlagSet) to an
// exit status: -h is not a failure.
func clusterFlagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func clusterUsageError(fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(fs.Output(), "%s: %s (see --help)\n", fs.Name(), fmt.Sprintf(format, a...))
	return 2
}

// clusterOneLine keeps a per-node report on one line whatever the error says.
func clusterOneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
