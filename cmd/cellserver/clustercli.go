package main

// `cellserver cluster ...`: the orchestrator side of cluster mode. `init`
// writes a topology document, `apply` moves the keys of every slot whose
// owner changes and then pushes the document to every node, `dump` prints a
// node's document to edit. This file parses their flags and prints what
// they report; apply's plan is cluster.PlanApply, its steps peer.Apply.

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/peer"
)

const clusterUsage = `Usage:
  cellserver cluster init --nodes host:port,host:port,... [--epoch N]
      Print a topology that splits the 16384 hash slots evenly over the nodes
      (one shard per node, as redis-cli --cluster create splits them).
  cellserver cluster apply FILE [--admin-password P] [--password P] [--timeout 5s]
      Make the cluster match the topology in FILE, keys included:
        1. CLUSTER GETSTATE on every node of FILE and of every node's current
           topology; if any fails, or FILE's epoch is not above every node's
           (a node already holding FILE is fine), nothing is changed.
        2. For every slot whose owner changes: SETSLOTRANGE IMPORTING on the
           new owner, MIGRATING on the old one, then CLUSTER MOVEKEYS on the
           old owner until every key has moved (each batch is acked durably
           by the new owner before the old one deletes it).
        3. CLUSTER SETTOPOLOGY to the new owners, then the old ones, then every
           other node; "<host:port> <id> ok" or "<host:port> <id> error: ..."
           per node.
        4. Orphan keys (of slots a node neither owns nor imports) are moved to
           their owner; then every node must have none left and no open slot.
      Then "moved N keys of S slots from A to B" per move. After a failure the
      slots stay open and served; running apply again resumes.
      These are admin commands: give the nodes' --admin-password, or run apply
      on the nodes' machine if they have none (loopback only). --timeout bounds
      each command (CLUSTER MOVEKEYS: max(10 x timeout, 5m)).
  cellserver cluster dump HOST:PORT [--admin-password P] [--password P] [--timeout 5s]
      Print the node's topology document, to edit and apply with a higher epoch.

Exit status: 0 on success; 1 if FILE is unusable, any node could not be
reached or refused, or keys or slots were left unsettled; 2 if the command
line is wrong.
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
	case "dump":
		return clusterDump(args[1:], stdout, stderr)
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
	password, adminPassword, timeout := clusterLoginFlags(fs, "nodes", "connect and reply timeout per node; also each node-to-node batch timeout of a key move")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cellserver cluster apply FILE [--admin-password P] [--password P] [--timeout 5s]\n\n"+
			"Moves the keys of every slot whose owner changes, then sends the topology in FILE\n"+
			"to every node, primaries and replicas. Safe to run again after a failure: it resumes.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := clusterParseArgs(fs, args)
	if err != nil {
		return clusterFlagExit(err)
	}
	if code := clusterOneArg(fs, pos, "FILE", *timeout); code != 0 {
		return code
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
	// go-redis logs failed dials to os.Stderr on its own; the per-node line
	// already says it. This runs as its own process, so silencing the
	// library's global logger affects nothing else.
	redis.SetLogger(&logging.VoidLogger{})
	line := func(l peer.NodeLine) {
		if l.Problem == "" {
			fmt.Fprintf(stdout, "%s %s ok\n", l.Node.Addr(), l.Node.ID)
		} else {
			fmt.Fprintf(stdout, "%s %s error: %s\n", l.Node.Addr(), l.Node.ID, clusterOneLine(l.Problem))
		}
	}
	done, err := peer.Apply(peer.NewLogin(*adminPassword, *password, *timeout), top, compact.String(), line)
	if err != nil {
		fmt.Fprintf(stderr, "cellserver cluster apply: %v\n", err)
		return 1
	}
	for _, m := range done.Moves {
		fmt.Fprintf(stdout, "moved %d keys of %d slots from %s to %s\n", m.Keys, m.Slots, m.Src.Addr(), m.Dst.Addr())
	}
	for _, m := range done.Orphans {
		fmt.Fprintf(stdout, "moved %d orphan keys from %s to %s\n", m.Keys, m.Src.Addr(), m.Dst.Addr())
	}
	return 0
}

// clusterDump runs `cellserver cluster dump HOST:PORT`.
func clusterDump(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cellserver cluster dump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	password, adminPassword, timeout := clusterLoginFlags(fs, "node", "connect and reply timeout")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cellserver cluster dump HOST:PORT [--admin-password P] [--password P] [--timeout 5s]\n\n"+
			"Prints the node's topology document, to edit and pass to apply with a higher epoch.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := clusterParseArgs(fs, args)
	if err != nil {
		return clusterFlagExit(err)
	}
	if code := clusterOneArg(fs, pos, "HOST:PORT", *timeout); code != 0 {
		return code
	}
	host, port, err := cluster.ParseAddr(pos[0])
	if err != nil {
		return clusterUsageError(fs, "%v", err)
	}
	redis.SetLogger(&logging.VoidLogger{})
	login := peer.NewLogin(*adminPassword, *password, *timeout)
	addr := cluster.Node{Host: host, Port: port}.Addr()
	st, err := login.GetState(addr)
	if err != nil {
		fmt.Fprintf(stderr, "cellserver cluster dump: %s: %s\n", addr, peer.Reason(err))
		return 1
	}
	if st.Topology == nil {
		fmt.Fprintf(stderr, "cellserver cluster dump: %s: the node has no topology yet (cellserver cluster init writes one)\n", addr)
		return 1
	}
	out, err := st.Topology.Marshal()
	if err == nil {
		_, err = stdout.Write(out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cellserver cluster dump: %v\n", err)
		return 1
	}
	return 0
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

// clusterLoginFlags adds the flags apply and dump log in to nodes with;
// whose is "node" or "nodes".
func clusterLoginFlags(fs *flag.FlagSet, whose, timeoutUsage string) (password, adminPassword *string, timeout *time.Duration) {
	their := map[string]string{"node": "its", "nodes": "their"}[whose]
	password = fs.String("password", "", "`password` the "+whose+" require"+map[string]string{"node": "s", "nodes": ""}[whose]+
		" ("+their+" --requirepass); not needed with --admin-password")
	adminPassword = fs.String("admin-password", "", "log in as the user admin with this `password` ("+their+" --admin-password)")
	timeout = fs.Duration("timeout", 5*time.Second, timeoutUsage)
	return
}

// clusterOneArg checks a command line of one positional argument, named
// name, and a positive timeout: 0 if it is one, else the exit status.
func clusterOneArg(fs *flag.FlagSet, pos []string, name string, timeout time.Duration) int {
	switch {
	case len(pos) == 0:
		return clusterUsageError(fs, "%s is required", name)
	case len(pos) > 1:
		return clusterUsageError(fs, "unexpected argument %q", pos[1])
	case timeout <= 0:
		return clusterUsageError(fs, "--timeout must be positive, got %v", timeout)
	}
	return 0
}
