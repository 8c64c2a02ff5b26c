package commands

// The commands of slot moves (ASKING, CLUSTER SETSLOT, SETSLOTRANGE,
// GETSTATE, MOVEKEYS, MIGRATESTATE, MIGRATE): each parses its arguments,
// calls package peer, which keeps the node's slot states and moves the
// keys, and words the outcome as Redis does. docs/cluster.md states the
// guarantees.

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/peer"
)

// Redis's texts for slot moves.
const (
	ErrTryAgain       = "TRYAGAIN Multiple keys request during rehashing of slot"
	ErrSetSlotSyntax  = "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP"
	ErrBadSlot        = "ERR Invalid or out of range slot"
	ErrMigrateKeysArg = "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"
)

// nodeState is the node's cluster state (the zero state outside the
// cluster modes).
func (s *Server) nodeState() *cluster.NodeState { return s.node.State() }

// topology is the node's topology (nil: none yet, or not a cluster node).
func (s *Server) topology() *cluster.Topology { return s.nodeState().Topology }

// peerAuth is how this node logs in to another unless MIGRATE names a
// login: admin with the admin password (every node of a cluster shares
// it), else the default user (with requirepass), which the peer accepts
// for admin commands only over loopback.
func (s *Server) peerAuth() peer.Auth {
	if s.cfg.AdminPassword != "" {
		return peer.Auth{User: UserAdmin, Password: s.cfg.AdminPassword}
	}
	return peer.Auth{Password: s.cfg.RequirePass}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// redirection words a redirect as Redis does, counting MOVED.
func (s *Server) redirection(r peer.Redirection) string {
	switch r.Kind {
	case peer.Ask:
		return "ASK " + strconv.Itoa(r.Slot) + " " + r.Addr
	case peer.TryAgain:
		return ErrTryAgain
	case peer.Down:
		return ErrClusterDown
	}
	s.stats.moved.Add(1)
	return "MOVED " + strconv.Itoa(r.Slot) + " " + r.Addr
}

// peerError words an error of package peer as the reply ("" for nil).
func (s *Server) peerError(err error) string {
	var r peer.Refusal
	var rd *peer.Redirection
	var se *peer.StoreError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &r):
		return string(r)
	case errors.As(err, &rd):
		return s.redirection(*rd)
	case errors.As(err, &se):
		return storeErrorText(se)
	}
	return ErrInternal
}

// storeErrorText words a store request that did not run.
func storeErrorText(e *peer.StoreError) string {
	if e.Closed() {
		return e.Prefix + ErrShuttingDown
	}
	return e.Prefix + ErrInternal
}

// consumeAsking gives the command its client's ASKING: the flag lasts for
// one command, or inside MULTI until EXEC (Redis's resetClient).
func (c *Client) consumeAsking(cmd *Command) {
	name := ""
	if cmd != nil {
		name = cmd.Name
	}
	if name == "asking" || c.sess.Holding() {
		return // EXEC's commands run with the ASKING EXEC had
	}
	asking := c.asking
	// Redis clears it after the command unless the client is then inside
	// MULTI: MULTI and the commands it queues keep it, EXEC ends it.
	if (!c.inMulti() && name != "multi") || name == "exec" || name == "discard" {
		c.asking = false
	}
	c.sess.SetAsking(asking)
}

// ASKING
func askingCmd(c *Client, w *Out, _ [][]byte) {
	if clusterGuard(c, w) {
		c.asking = true
		w.WriteOK()
	}
}

// clusterYes writes the refusal for the cluster commands that change slot
// ownership unless the node runs --cluster yes.
func clusterYes(c *Client, w *Out, name string) bool {
	if !clusterGuard(c, w) {
		return false
	}
	if c.srv.cfg.Cluster.Mode != ClusterYes {
		w.WriteError("ERR CLUSTER " + name + " needs --cluster yes (this node is emulating a one-node cluster)")
		return false
	}
	return true
}

// parseSlotArg reads a slot argument (Redis's getSlotOrReply).
func parseSlotArg(b []byte) (int, bool) {
	n, ok := limit.ParseRedisInt(b)
	if !ok || n < 0 || n >= cluster.SlotCount {
		return 0, false
	}
	return int(n), true
}

// slotAction reads SETSLOT's and SETSLOTRANGE's action (args: the action,
// then what follows it); false if the arguments are not one.
func slotAction(args [][]byte) (action peer.SlotAction, id string, ok bool) {
	switch a := strings.ToLower(string(args[0])); {
	case a == "stable" && len(args) == 1:
		return peer.Stable, "", true
	case a == "stable" && len(args) == 2 && strings.EqualFold(string(args[1]), "force"):
		return peer.StableForce, "", true
	case a == "importing" && len(args) == 2:
		return peer.Importing, string(args[1]), true
	case a == "migrating" && len(args) == 2:
		return peer.Migrating, string(args[1]), true
	}
	return 0, "", false
}

// CLUSTER SETSLOT <slot> IMPORTING <id> | MIGRATING <id> | STABLE [FORCE] | NODE <id>
func clusterSetSlot(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "SETSLOT") {
		return
	}
	slot, ok := parseSlotArg(args[2])
	if !ok {
		w.WriteError(ErrBadSlot)
		return
	}
	var err error
	if action, id, ok := slotAction(args[3:]); ok {
		err = c.srv.node.SetSlots(c.sess, slot, slot, action, id)
	} else if strings.EqualFold(string(args[3]), "node") && len(args) == 5 {
		err = c.srv.node.SetSlotNode(c.sess, slot, string(args[4]))
	} else {
		w.WriteError(ErrSetSlotSyntax)
		return
	}
	c.srv.replyPeer(w, err)
}

// CLUSTER SETSLOTRANGE <first> <last> IMPORTING <id> | MIGRATING <id> | STABLE [FORCE]:
// SETSLOT over a range, all or nothing, one saved change (cellserver).
func clusterSetSlotRange(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "SETSLOTRANGE") {
		return
	}
	lo, ok1 := parseSlotArg(args[2])
	hi, ok2 := parseSlotArg(args[3])
	if !ok1 || !ok2 || lo > hi {
		w.WriteError(ErrBadSlot)
		return
	}
	action, id, ok := slotAction(args[4:])
	if !ok {
		w.WriteError(ErrSetSlotSyntax)
		return
	}
	c.srv.replyPeer(w, c.srv.node.SetSlots(c.sess, lo, hi, action, id))
}

// replyPeer writes +OK for nil, else err's wording.
func (s *Server) replyPeer(w *Out, err error) {
	if err != nil {
		w.WriteError(s.peerError(err))
		return
	}
	w.WriteOK()
}

// CLUSTER GETSTATE: the node's view as JSON (cluster.NodeReport), for
// `cellserver cluster apply`.
func clusterGetState(c *Client, w *Out, _ [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	data, err := c.srv.node.Report(c.sess).Marshal()
	if err != nil {
		w.WriteError(ErrInternal)
		return
	}
	w.WriteBulk(data)
}

// migrateErr words a failure of a key move as Redis's MIGRATE does: the
// target's or this node's refusal as it is, a failure to reach the target
// as IOERR.
func (s *Server) migrateErr(err error) string {
	var r peer.Refusal
	var se *peer.StoreError
	switch {
	case errors.As(err, &r):
		return string(r)
	case errors.As(err, &se):
		return storeErrorText(se)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "IOERR error or timeout reading to target instance"
	}
	return "IOERR error or timeout connecting to the client"
}

// MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
// [AUTH password | AUTH2 username password] [KEYS key [key ...]]
//
// Moves the keys to the node at host:port through the slot-move protocol
// (peer.Node.Migrate). Redis's replies: +OK, +NOKEY when none of the keys
// is here, IOERR when the target cannot be reached. The target must be a
// node of this cluster (limiter state lives on one node: COPY is refused),
// and the keys must share a slot this node holds keys of.
func migrateCmd(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "MIGRATE") {
		return
	}
	s := c.srv
	port, ok := limit.ParseRedisInt(args[2])
	db, ok2 := limit.ParseRedisInt(args[4])
	timeoutMs, ok3 := limit.ParseRedisInt(args[5])
	if !ok || !ok2 || !ok3 {
		w.WriteError(ErrNotInteger)
		return
	}
	keys := [][]byte{args[3]}
	var auth *peer.Auth
	for i := 6; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "copy":
			w.WriteError("ERR MIGRATE COPY is not supported: a limiter key lives on one node")
			return
		case "replace":
		case "auth":
			if i+1 >= len(args) {
				w.WriteError(ErrSyntax)
				return
			}
			auth = &peer.Auth{Password: string(args[i+1])}
			i++
		case "auth2":
			if i+2 >= len(args) {
				w.WriteError(ErrSyntax)
				return
			}
			auth = &peer.Auth{User: string(args[i+1]), Password: string(args[i+2])}
			i += 2
		case "keys":
			if len(args[3]) != 0 {
				w.WriteError(ErrMigrateKeysArg)
				return
			}
			keys = args[i+1:]
			i = len(args)
		default:
			w.WriteError(ErrSyntax)
			return
		}
	}
	if db != 0 {
		w.WriteError("ERR Target instance replied with error: ERR DB index is out of range")
		return
	}
	if len(keys) == 0 {
		w.WriteString("NOKEY")
		return
	}
	slot := cluster.KeySlot(keys[0])
	for _, k := range keys[1:] {
		if cluster.KeySlot(k) != slot {
			w.WriteError(ErrCrossSlot)
			return
		}
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	if timeoutMs <= 0 {
		timeout = time.Second
	}
	n, err := s.node.Migrate(c.sess, peer.Migration{Host: string(args[1]), Port: int(port), Slot: slot, Keys: keys, Auth: auth, Timeout: timeout})
	switch {
	case err != nil:
		w.WriteError(s.migrateErr(err))
	case n == 0:
		w.WriteString("NOKEY")
	default:
		w.WriteOK()
	}
}

// migrateKeys is MIGRATE's keys (Redis's migrateGetKeys): the key
// argument, or with it empty those after KEYS.
func migrateKeys(args [][]byte) [][]byte {
	if len(args) < 6 {
		return nil
	}
	if len(args[3]) == 0 {
		for i := 6; i < len(args); i++ {
			if strings.EqualFold(string(args[i]), "keys") {
				return args[i+1:]
			}
		}
	}
	return args[3:4]
}

// CLUSTER MOVEKEYS <dst-id> <timeout-ms> [ORPHANS] (cellserver): moves every
// key of the slots migrating to dst (ORPHANS: the keys held here of slots
// this node does not serve whose owner is dst, which dst merges into its
// own), a batch at a time, until none is left (peer.Node.MoveKeys).
// Replies how many moved; on a failure, how many moved before it and why
// (the rest stay here).
func clusterMoveKeys(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "MOVEKEYS") {
		return
	}
	s := c.srv
	timeoutMs, ok := limit.ParseRedisInt(args[3])
	if !ok || timeoutMs < 0 {
		w.WriteError(ErrNotInteger)
		return
	}
	orphans := false
	if len(args) == 5 {
		if !strings.EqualFold(string(args[4]), "orphans") {
			w.WriteError(ErrSyntax)
			return
		}
		orphans = true
	} else if len(args) > 5 {
		w.WriteError(ErrSyntax)
		return
	}
	timeout := time.Duration(max(timeoutMs, 1)) * time.Millisecond
	total, err := s.node.MoveKeys(c.sess, string(args[2]), timeout, orphans)
	var me *peer.MoveError
	switch {
	case errors.As(err, &me):
		w.WriteError(fmt.Sprintf("ERR moved %d keys, then %s: %s", me.Moved, me.Target, oneLine(s.migrateErr(me.Err))))
	case err != nil:
		w.WriteError(s.peerError(err))
	default:
		w.WriteInt(int64(total))
	}
}

// CLUSTER MIGRATESTATE <src-id> 1 <deadline-ms> key state expire-ms [key state expire-ms ...]
// (node to node): the target's side of a move (peer.Import). Each key's
// slot must be importing here from src or owned here; else MOVED. Every
// state is checked first, all or nothing. +OK once the keys are durable
// here.
func clusterMigrateState(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "MIGRATESTATE") {
		return
	}
	s := c.srv
	if string(args[3]) != peer.StateVersion {
		w.WriteError("ERR unsupported MIGRATESTATE version '" + trunc(cstr(args[3]), 32) + "'")
		return
	}
	deadline, ok := limit.ParseRedisInt(args[4])
	if !ok {
		w.WriteError(ErrNotInteger)
		return
	}
	rest := args[5:]
	if len(rest)%3 != 0 {
		w.WriteError(wrongArity("cluster|migratestate"))
		return
	}
	im, err := s.node.NewImport(string(args[2]))
	if err != nil {
		w.WriteError(s.peerError(err))
		return
	}
	for i := 0; i < len(rest); i += 3 {
		key := rest[i]
		exp, err := strconv.ParseInt(string(rest[i+2]), 10, 64)
		if err != nil {
			w.WriteError(ErrNotInteger)
			return
		}
		switch err := im.Add(key, rest[i+1], exp); {
		case errors.Is(err, peer.ErrUndecodable):
			w.WriteError(ErrImportPrefix + trunc(cstr(key), 128) + "': the state does not decode")
			return
		case err != nil:
			w.WriteError(s.peerError(err))
			return
		}
	}
	s.replyPeer(w, im.Apply(c.sess, deadline))
}
