package commands

import (
	"crypto/subtle"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cellserver/cellserver/limit"
)

func registerConnection(t Table) {
	t.add(
		&Command{Name: "ping", Arity: -1, Flags: FlagFast, Cats: CatFast | CatConnection, Group: "connection",
			Summary: "Returns the server's liveliness response.", Since: "1.0.0", Run: pingCmd},
		&Command{Name: "echo", Arity: 2, Flags: FlagLoading | FlagStale | FlagFast, Cats: CatFast | CatConnection, Group: "connection",
			Summary: "Returns the given string.", Since: "1.0.0", Run: echoCmd},
		&Command{Name: "quit", Arity: -1, Flags: FlagNoScript | FlagLoading | FlagStale | FlagFast | FlagNoAuth | FlagAllowBusy | TxImmediate, Cats: CatFast | CatConnection, Group: "connection",
			Summary: "Closes the connection.", Since: "1.0.0", Run: quitCmd},
		&Command{Name: "select", Arity: 2, Flags: FlagLoading | FlagStale | FlagFast, Cats: CatFast | CatConnection, Group: "connection",
			Summary: "Changes the selected database (only 0 exists).", Since: "1.0.0", Run: selectCmd},
		// AUTH and HELLO are Slow: a failed attempt pauses (authFailed).
		&Command{Name: "auth", Arity: -2, Flags: FlagNoScript | FlagLoading | FlagStale | FlagFast | FlagNoAuth | FlagAllowBusy | OffLoop, Cats: CatFast | CatConnection, Group: "connection",
			Summary: "Authenticates the connection.", Since: "1.0.0", Run: authCmd},
		&Command{Name: "hello", Arity: -1, Flags: FlagNoScript | FlagLoading | FlagStale | FlagFast | FlagNoAuth | FlagAllowBusy | OffLoop, Cats: CatFast | CatConnection, Group: "connection",
			Summary: "Handshakes with the Redis server.", Since: "6.0.0", Run: helloCmd},
		&Command{Name: "client", Arity: -2, Cats: CatSlow, Group: "connection", Summary: "A container for client connection commands.", Since: "2.4.0",
			Subcommands: append([]*Command{
				{Name: "client|setname", Arity: 3, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientSetName, Summary: "Sets the connection name.", Since: "2.6.9"},
				{Name: "client|getname", Arity: 2, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientGetName, Summary: "Returns the name of the connection.", Since: "2.6.9"},
				{Name: "client|id", Arity: 2, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientID, Summary: "Returns the unique client ID of the connection.", Since: "5.0.0"},
				{Name: "client|setinfo", Arity: 4, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientSetInfo, Summary: "Sets information specific to the client or connection.", Since: "7.2.0"},
				{Name: "client|list", Arity: -2, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatAdmin | CatSlow | CatDangerous | CatConnection, Run: clientList, Summary: "Lists open connections.", Since: "2.4.0"},
				{Name: "client|info", Arity: 2, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientInfo, Summary: "Returns information about the connection.", Since: "6.2.0"},
				{Name: "client|help", Arity: 2, Flags: FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientHelp, Summary: "Returns helpful text about the different subcommands.", Since: "5.0.0"},
				{Name: "client|tracking", Arity: -3, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientTracking, Summary: "Controls server-assisted client-side caching for the connection.", Since: "6.0.0"},
				{Name: "client|caching", Arity: 3, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientCaching, Summary: "Instructs the server whether to track the keys in the next request.", Since: "6.0.0"},
				{Name: "client|getredir", Arity: 2, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientGetRedir, Summary: "Returns the client ID to which the connection's tracking notifications are redirected.", Since: "6.0.0"},
				{Name: "client|trackinginfo", Arity: 2, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientTrackingInfo, Summary: "Returns information about server-assisted client-side caching for the connection.", Since: "6.2.0"},
			}, clientCtlSubcommands()...)},
	)
}

// PING [message]
func pingCmd(c *Client, w *Out, args [][]byte) {
	if len(args) > 2 {
		w.WriteError(wrongArity("ping"))
		return
	}
	if c.subscribed() {
		pingSubscribed(w, args)
		return
	}
	if len(args) == 2 {
		w.WriteBulkRef(args[1])
		return
	}
	w.WriteString("PONG")
}

// ECHO message
func echoCmd(_ *Client, w *Out, args [][]byte) { w.WriteBulkRef(args[1]) }

// QUIT
func quitCmd(c *Client, w *Out, _ [][]byte) {
	w.WriteOK()
	c.closing = true
}

// SELECT index
func selectCmd(c *Client, w *Out, args [][]byte) {
	n, ok := limit.ParseRedisInt(args[1])
	if !ok {
		w.WriteError(ErrNotInteger)
		return
	}
	if n < -2147483648 || n > 2147483647 {
		w.WriteError(ErrIntRange)
		return
	}
	if n != 0 && c.srv.clusterOn() {
		w.WriteError("ERR SELECT is not allowed in cluster mode")
		return
	}
	if n != 0 {
		w.WriteError(ErrDBIndex)
		return
	}
	w.WriteOK()
}

// The users: the default user (password --requirepass; without one every
// connection starts as it, and any password fits, as Redis's nopass) and,
// when --admin-password is set, admin, which may also run admin commands.
const (
	UserDefault = "default"
	UserAdmin   = "admin"
)

// Delays before answering a failed AUTH: authDelayBase after a
// connection's first failure, doubling with each further one, at most
// authDelayMax (so 4 ms, 8 ms, ... 512 ms, then 1 s each).
const (
	authDelayBase = 4 * time.Millisecond
	authDelayMax  = time.Second
)

// login makes the connection user if pass is that user's password, and
// reports whether it was. A failed attempt is counted and paused
// (authFailed) and leaves the connection's user as it was, as in Redis.
func (c *Client) login(user, pass []byte) bool {
	cfg := &c.srv.cfg
	ok, admin := false, false
	switch string(user) {
	case UserDefault:
		ok = cfg.RequirePass == "" || subtle.ConstantTimeCompare(pass, []byte(cfg.RequirePass)) == 1
	case UserAdmin:
		ok = cfg.AdminPassword != "" && subtle.ConstantTimeCompare(pass, []byte(cfg.AdminPassword)) == 1
		admin = ok
	}
	if !ok {
		c.authFailed()
		return false
	}
	c.admin.Store(admin)
	c.authed.Store(true)
	return true
}

// authFailed counts a failed AUTH (or HELLO AUTH) for INFO and pauses
// before the reply, per authDelay, so that one connection cannot try
// passwords at full speed. AUTH and HELLO are Slow: the pause runs on the
// connection's own goroutine and holds up no other client. A success does
// not reset the count: a client knowing one user's password could
// otherwise interleave it to keep its guesses at the other's fast.
func (c *Client) authFailed() {
	c.srv.stats.authDenied.Add(1)
	c.authFails++
	if c.sess.Holding() {
		// Inside EXEC: not while its shards are held (execCmd pays it).
		c.authPause += authDelay(c.authFails)
		return
	}
	c.srv.sleep(authDelay(c.authFails))
}

// authDelay is the pause before answering a connection's n-th failed AUTH.
func authDelay(n int) time.Duration {
	if n > 20 { // far past the cap; keeps the shift in range
		return authDelayMax
	}
	return min(authDelayBase<<(n-1), authDelayMax)
}

// isAdmin reports whether the client may run admin commands: it logged in
// as admin, or no admin password is set and it is a loopback client.
func (c *Client) isAdmin() bool {
	if c.srv.cfg.AdminPassword == "" {
		return c.local
	}
	return c.admin.Load()
}

// user is the name of the connection's user.
func (c *Client) user() string {
	if c.admin.Load() {
		return UserAdmin
	}
	return UserDefault
}

// AUTH [username] password
func authCmd(c *Client, w *Out, args [][]byte) {
	if len(args) > 3 {
		w.WriteError(ErrSyntax)
		return
	}
	user, pass := []byte(UserDefault), args[1]
	if len(args) == 3 {
		user, pass = args[1], args[2]
	} else if c.srv.cfg.RequirePass == "" {
		w.WriteError(ErrAuthNoPassword)
		return
	}
	if !c.login(user, pass) {
		w.WriteError(ErrWrongPass)
		return
	}
	w.WriteOK()
}

// HELLO [protover [AUTH username password] [SETNAME clientname]]
func helloCmd(c *Client, w *Out, args [][]byte) {
	var ver int64 // 0: keep the connection's protocol
	if len(args) >= 2 {
		var ok bool
		if ver, ok = limit.ParseRedisInt(args[1]); !ok {
			w.WriteError(ErrProtoNotInt)
			return
		}
		if ver != 2 && ver != 3 {
			w.WriteError(ErrNoProto)
			return
		}
	}
	var user, pass, name []byte
	for j := 2; j < len(args); j++ {
		more := len(args) - 1 - j
		opt := string(args[j])
		switch {
		case strings.EqualFold(opt, "auth") && more >= 2:
			user, pass = args[j+1], args[j+2]
			j += 2
		case strings.EqualFold(opt, "setname") && more >= 1:
			name = args[j+1]
			j++
		default:
			w.WriteError("ERR Syntax error in HELLO option '" + cstr(args[j]) + "'")
			return
		}
	}
	if user != nil && !c.login(user, pass) {
		w.WriteError(ErrWrongPass)
		return
	}
	if !c.authed.Load() {
		w.WriteError(ErrHelloNoAuth)
		return
	}
	if name != nil {
		if !validName(name) {
			w.WriteError(ErrClientName)
			return
		}
		c.mu.Lock()
		c.name = string(name)
		c.mu.Unlock()
	}
	// The switch applies to HELLO's own reply and every one after it.
	if ver != 0 {
		c.proto.Store(int32(ver))
		w.Proto = int(ver)
	}
	w.WriteMap(7)
	w.WriteBulkString("server")
	w.WriteBulkString("redis")
	w.WriteBulkString("version")
	w.WriteBulkString(RedisVersion)
	w.WriteBulkString("proto")
	w.WriteInt(int64(c.Proto()))
	w.WriteBulkString("id")
	w.WriteInt(c.ID)
	w.WriteBulkString("mode")
	if c.srv.clusterOn() {
		w.WriteBulkString("cluster")
	} else {
		w.WriteBulkString("standalone")
	}
	w.WriteBulkString("role")
	w.WriteBulkString("master")
	w.WriteBulkString("modules")
	w.WriteArray(0)
}

// validName: Redis allows names of printable ASCII without spaces.
func validName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

// CLIENT SETNAME name
func clientSetName(c *Client, w *Out, args [][]byte) {
	if !validName(args[2]) {
		w.WriteError(ErrClientName)
		return
	}
	c.mu.Lock()
	c.name = string(args[2])
	c.mu.Unlock()
	w.WriteOK()
}

// CLIENT GETNAME
func clientGetName(c *Client, w *Out, _ [][]byte) {
	c.mu.Lock()
	name := c.name
	c.mu.Unlock()
	if name == "" {
		w.WriteNull()
		return
	}
	w.WriteBulkString(name)
}

// CLIENT ID
func clientID(c *Client, w *Out, _ [][]byte) { w.WriteInt(c.ID) }

// CLIENT SETINFO LIB-NAME|LIB-VER value
func clientSetInfo(c *Client, w *Out, args [][]byte) {
	attr := strings.ToLower(string(args[2]))
	if attr != "lib-name" && attr != "lib-ver" {
		w.WriteError("ERR Unrecognized option '" + cstr(args[2]) + "'")
		return
	}
	if !validName(args[3]) {
		// Redis 7.2 names the attribute as the client sent it.
		w.WriteError(fmt.Sprintf("ERR %s cannot contain spaces, newlines or special characters.", cstr(args[2])))
		return
	}
	c.mu.Lock()
	if attr == "lib-name" {
		c.libName = string(args[3])
	} else {
		c.libVer = string(args[3])
	}
	c.mu.Unlock()
	w.WriteOK()
}

// CLIENT LIST [TYPE normal|master|replica|pubsub | ID client-id ...]: one
// filter, as Redis 7.2 (TYPE only as the last two arguments); an ID is any
// integer Redis's string2ll accepts.
func clientList(c *Client, w *Out, args [][]byte) {
	var ids map[int64]bool
	typ := "" // a TYPE filter: normal, pubsub (a subscribed client's), or one no client has
	switch {
	case len(args) == 4 && strings.EqualFold(string(args[2]), "type"):
		switch typ = strings.ToLower(string(args[3])); typ {
		case "normal", "pubsub":
		case "master", "replica", "slave":
		default:
			w.WriteError("ERR Unknown client type '" + cstr(args[3]) + "'")
			return
		}
	case len(args) > 3 && strings.EqualFold(string(args[2]), "id"):
		ids = map[int64]bool{}
		for _, a := range args[3:] {
			id, ok := limit.ParseRedisInt(a)
			if !ok {
				w.WriteError("ERR Invalid client ID")
				return
			}
			ids[id] = true
		}
	case len(args) != 2:
		w.WriteError(ErrSyntax)
		return
	}
	var b strings.Builder
	for _, cl := range c.srv.sortedClients() {
		if ids != nil && !ids[cl.ID] {
			continue
		}
		if typ != "" && typ != cl.clientType() {
			continue
		}
		b.WriteString(cl.infoLine())
		b.WriteByte('\n')
	}
	w.WriteVerbatim(b.String())
}

// CLIENT INFO
func clientInfo(c *Client, w *Out, _ [][]byte) { w.WriteVerbatim(c.infoLine() + "\n") }

// CLIENT HELP
func clientHelp(_ *Client, w *Out, _ [][]byte) {
	lines := []string{
		"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"CACHING (YES|NO)", "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
		"GETREDIR", "    Return the client ID we are redirecting to when tracking is enabled.",
		"GETNAME", "    Return the name of the current connection.",
		"ID", "    Return the ID of the current connection.",
		"INFO", "    Return information about the current client connection.",
		"KILL <ip:port>", "    Kill connection made from <ip:port>.",
		"KILL <option> <value> [<option> <value> [...]]", "    Kill connections. Options are:",
		"    * ADDR (<ip:port>|<unixsocket>:0)", "      Kill connections made from the specified address",
		"    * LADDR (<ip:port>|<unixsocket>:0)", "      Kill connections made to specified local address",
		"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)", "      Kill connections by type.",
		"    * USER <username>", "      Kill connections authenticated by <username>.",
		"    * SKIPME (YES|NO)", "      Skip killing current connection (default: yes).",
		"    * ID <client-id>", "      Kill connections by client id.",
		"    * MAXAGE <maxage>", "      Kill connections older than the specified age.",
		"LIST [options ...]", "    Return information about client connections. Options:",
		"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)", "      Return clients of specified type.",
		"    * ID <client-id> [<client-id> ...]", "      Return clients of specified IDs only.",
		"UNPAUSE", "    Stop the current client pause, resuming traffic.",
		"PAUSE <timeout> [WRITE|ALL]", "    Suspend all, or just write, clients for <timeout> milliseconds.",
		"REPLY (ON|OFF|SKIP)", "    Control the replies sent to the current connection.",
		"SETINFO <option> <value>", "    Set client meta attr. Options are:",
		"    * LIB-NAME: the client lib name.", "    * LIB-VER: the client lib version.",
		"SETNAME <name>", "    Assign the name <name> to the current connection.",
		"NO-EVICT (ON|OFF)", "    Protect current client connection from eviction.",
		"NO-TOUCH (ON|OFF)", "    Will not touch LRU/LFU stats when this mode is on.",
		"TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]] [OPTIN] [OPTOUT] [NOLOOP]", "    Control server assisted client side caching.",
		"TRACKINGINFO", "    Report tracking status for the current connection.",
		"HELP", "    Print this help.",
	}
	writeHelp(w, lines)
}

func (s *Server) sortedClients() []*Client {
	s.clientsMu.Lock()
	list := make([]*Client, 0, len(s.clients))
	for _, cl := range s.clients {
		list = append(list, cl)
	}
	s.clientsMu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	return list
}

// infoLine is the client's line in CLIENT LIST, with Redis 7.2's fields.
func (c *Client) infoLine() string {
	c.mu.Lock()
	name, lib, ver := c.name, c.libName, c.libVer
	c.mu.Unlock()
	now := time.Now()
	cmd := "NULL"
	if lc := c.lastCmd.Load(); lc != nil {
		cmd = lc.Name
	}
	idle := (now.UnixNano() - c.lastUsed.Load()) / 1e9
	// Sizes in bytes of what the wire layer buffers (tot-mem: both; Redis
	// adds the client's fixed structures, which have no counterpart here).
	qbuf, omem := c.qbuf.Load(), c.omem.Load()
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=%s db=0 sub=%d psub=0 ssub=0 multi=%d qbuf=%d qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=%d tot-mem=%d events=r cmd=%s user=%s redir=%d resp=%d lib-name=%s lib-ver=%s",
		c.ID, c.Addr, c.LAddr, c.fd.Load(), name, int64(now.Sub(c.created).Seconds()), idle, c.flags(), c.nsubs.Load(), c.multiN.Load(), qbuf, omem, qbuf+omem, cmd, c.user(), c.trackingRedir(), c.Proto(), lib, ver)
}
