package commands

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

func registerServer(t Table) {
	t.add(
		&Command{Name: "command", Arity: -1, Flags: FlagLoading | FlagStale, Cats: CatSlow | CatConnection, Group: "server",
			Summary: "Returns detailed information about all commands.", Since: "2.8.13", Run: commandCmd,
			Tips: []string{"nondeterministic_output_order"},
			Subcommands: []*Command{
				{Name: "command|count", Arity: 2, Flags: FlagLoading | FlagStale, Cats: CatSlow | CatConnection, Run: commandCmd, Summary: "Returns a count of commands.", Since: "2.8.13"},
				{Name: "command|info", Arity: -2, Flags: FlagLoading | FlagStale, Cats: CatSlow | CatConnection, Run: commandCmd, Summary: "Returns information about one, multiple or all commands.", Since: "2.8.13"},
				{Name: "command|docs", Arity: -2, Flags: FlagLoading | FlagStale, Cats: CatSlow | CatConnection, Run: commandCmd, Summary: "Returns documentary information about one, multiple or all commands.", Since: "7.0.0"},
				{Name: "command|list", Arity: -2, Flags: FlagLoading | FlagStale, Cats: CatSlow | CatConnection, Run: commandCmd, Summary: "Returns a list of command names.", Since: "7.0.0"},
				{Name: "command|getkeys", Arity: -4, Flags: FlagLoading | FlagStale, Cats: CatSlow | CatConnection, Run: commandCmd, Summary: "Extracts the key names from an arbitrary command.", Since: "2.8.13"},
				{Name: "command|help", Arity: 2, Flags: FlagLoading | FlagStale, Cats: CatSlow | CatConnection, Run: commandCmd, Summary: "Returns helpful text about the different subcommands.", Since: "5.0.0"},
			}},
		&Command{Name: "info", Arity: -1, Flags: FlagLoading | FlagStale, Cats: CatSlow | CatDangerous, Group: "server",
			Summary: "Returns information and statistics about the server.", Since: "1.0.0", Run: infoCmd,
			Tips: []string{"nondeterministic_output"}},
		&Command{Name: "config", Arity: -2, Cats: CatSlow, Group: "server", Summary: "A container for server configuration commands.", Since: "2.0.0",
			Subcommands: []*Command{
				{Name: "config|get", Arity: -3, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale, Cats: CatAdmin | CatSlow | CatDangerous, Run: configGet, Summary: "Returns the effective values of configuration parameters.", Since: "2.0.0"},
				{Name: "config|set", Arity: -4, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | AdminOnly, Cats: CatAdmin | CatSlow | CatDangerous, Run: configSet, Summary: "Sets configuration parameters in-flight.", Since: "2.0.0"},
				{Name: "config|resetstat", Arity: 2, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | AdminOnly, Cats: CatAdmin | CatSlow | CatDangerous, Run: configResetStat, Summary: "Resets the server's statistics.", Since: "2.0.0"},
				{Name: "config|help", Arity: 2, Flags: FlagLoading | FlagStale, Cats: CatSlow, Run: configHelp, Summary: "Returns helpful text about the different subcommands.", Since: "5.0.0"},
			}},
		&Command{Name: "time", Arity: 1, Flags: FlagLoading | FlagStale | FlagFast, Cats: CatFast, Group: "server",
			Summary: "Returns the server time (the clock CL.THROTTLE uses).", Since: "2.6.0", Run: timeCmd,
			Tips: []string{"nondeterministic_output"}},
		&Command{Name: "debug", Arity: -2, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | AdminOnly | Protected, Cats: CatAdmin | CatSlow | CatDangerous, Group: "server",
			Summary: "cellserver: DEBUG CLOCK SET <unix_ns> | ADVANCE <ns> | REAL.", Since: "1.0.0", Run: debugCmd},
	)
}

// writeCommandInfo writes one command's COMMAND INFO entry in Redis 7's
// 10-field form, with Redis's sets and maps in RESP3.
func writeCommandInfo(w *Out, c *Command) {
	w.WriteArray(10)
	w.WriteBulkString(c.Name)
	w.WriteInt(int64(c.Arity))
	flags := c.Flags.redisNames()
	w.WriteSet(len(flags))
	for _, f := range flags {
		w.WriteString(f)
	}
	w.WriteInt(int64(c.FirstKey))
	w.WriteInt(int64(c.LastKey))
	w.WriteInt(int64(c.Step))
	cats := c.Cats.names()
	w.WriteSet(len(cats))
	for _, a := range cats {
		w.WriteString(a)
	}
	w.WriteSet(len(c.Tips))
	for _, t := range c.Tips {
		w.WriteBulkString(t)
	}
	if c.FirstKey > 0 {
		// One key spec: keys from FirstKey to LastKey every Step.
		last := c.LastKey
		if last > 0 {
			last -= c.FirstKey
		}
		flag := "RW"
		if c.Flags&FlagReadOnly != 0 || c.Group == "transactions" { // WATCH reads its keys
			flag = "RO"
		}
		w.WriteSet(1)
		w.WriteMap(3)
		w.WriteBulkString("flags")
		w.WriteSet(1)
		w.WriteString(flag)
		w.WriteBulkString("begin_search")
		w.WriteMap(2)
		w.WriteBulkString("type")
		w.WriteBulkString("index")
		w.WriteBulkString("spec")
		w.WriteMap(1)
		w.WriteBulkString("index")
		w.WriteInt(int64(c.FirstKey))
		w.WriteBulkString("find_keys")
		w.WriteMap(2)
		w.WriteBulkString("type")
		w.WriteBulkString("range")
		w.WriteBulkString("spec")
		w.WriteMap(3)
		w.WriteBulkString("lastkey")
		w.WriteInt(int64(last))
		w.WriteBulkString("keystep")
		w.WriteInt(int64(c.Step))
		w.WriteBulkString("limit")
		w.WriteInt(0)
	} else {
		w.WriteSet(0)
	}
	// Redis answers an empty set for no subcommands, an array otherwise.
	if len(c.Subcommands) == 0 {
		w.WriteSet(0)
		return
	}
	w.WriteArray(len(c.Subcommands))
	for _, s := range c.Subcommands {
		writeCommandInfo(w, s)
	}
}

// writeCommandDocs writes one command's COMMAND DOCS map.
func writeCommandDocs(w *Out, c *Command, group string) {
	n := 3
	if len(c.Subcommands) > 0 {
		n++
	}
	w.WriteMap(n)
	w.WriteBulkString("summary")
	w.WriteBulkString(c.Summary)
	w.WriteBulkString("since")
	w.WriteBulkString(c.Since)
	w.WriteBulkString("group")
	if c.Group != "" {
		group = c.Group
	}
	w.WriteBulkString(group)
	if len(c.Subcommands) > 0 {
		w.WriteBulkString("subcommands")
		w.WriteMap(len(c.Subcommands))
		for _, s := range c.Subcommands {
			w.WriteBulkString(s.Name)
			writeCommandDocs(w, s, group)
		}
	}
}

// commandFilter is COMMAND LIST's FILTERBY MODULE name | ACLCAT category |
// PATTERN glob (Redis's commandListWithFilter): no modules are loaded, a
// category is named without its "@" and case-insensitively (an unknown
// one matches nothing), a pattern matches the full name case-insensitively.
func commandFilter(args [][]byte) (func(*Command) bool, bool) {
	if len(args) == 0 {
		return func(*Command) bool { return true }, true
	}
	if len(args) != 3 || !strings.EqualFold(string(args[0]), "filterby") {
		return nil, false
	}
	arg := args[2]
	switch strings.ToLower(string(args[1])) {
	case "module":
		return func(*Command) bool { return false }, true
	case "aclcat":
		cat := catByName("@" + strings.ToLower(string(arg)))
		return func(c *Command) bool { return cat != 0 && c.Cats&cat != 0 }, true
	case "pattern":
		return func(c *Command) bool { return store.Match(arg, []byte(c.Name), true) }, true
	}
	return nil, false
}

// COMMAND [COUNT | INFO [name ...] | DOCS [name ...] | LIST | GETKEYS cmd args... | HELP]
func commandCmd(c *Client, w *Out, args [][]byte) {
	s := c.srv
	names := s.commandNames()
	if len(args) == 1 {
		w.WriteArray(len(names))
		for _, n := range names {
			writeCommandInfo(w, s.table[n])
		}
		return
	}
	switch strings.ToLower(string(args[1])) {
	case "count":
		w.WriteInt(int64(len(names)))
	case "list":
		keep, ok := commandFilter(args[2:])
		if !ok {
			w.WriteError(ErrSyntax)
			return
		}
		// Redis lists subcommands too ("config|get"), and with FILTERBY
		// those of a parent the filter drops.
		var list []string
		for _, n := range names {
			c := s.table[n]
			for _, x := range append([]*Command{c}, c.Subcommands...) {
				if keep(x) {
					list = append(list, x.Name)
				}
			}
		}
		w.WriteArray(len(list))
		for _, n := range list {
			w.WriteBulkString(n)
		}
	case "info":
		if len(args) == 2 {
			w.WriteArray(len(names))
			for _, n := range names {
				writeCommandInfo(w, s.table[n])
			}
			return
		}
		w.WriteArray(len(args) - 2)
		for _, a := range args[2:] {
			if cmd := s.lookupFull(a); cmd != nil {
				writeCommandInfo(w, cmd)
			} else {
				w.WriteNull() // Redis 7's addReplyNull: $-1, not *-1
			}
		}
	case "docs":
		var list []*Command
		if len(args) == 2 {
			for _, n := range names {
				list = append(list, s.table[n])
			}
		} else {
			for _, a := range args[2:] {
				if cmd := s.lookupFull(a); cmd != nil {
					list = append(list, cmd)
				}
			}
		}
		w.WriteMap(len(list))
		for _, cmd := range list {
			w.WriteBulkString(cmd.Name)
			writeCommandDocs(w, cmd, "server")
		}
	case "getkeys":
		// Redis's getKeysSubcommandImpl: look the command up as
		// lookupCommand does (a container's subcommand by the next
		// argument), then check that it has keys, then its arity.
		sub := args[2:]
		cmd := s.table.Lookup(sub[0])
		if cmd != nil && len(cmd.Subcommands) > 0 {
			cmd = cmd.sub(sub[1])
		}
		if cmd == nil {
			w.WriteError("ERR Invalid command specified")
			return
		}
		if cmd.FirstKey <= 0 {
			w.WriteError("ERR The command has no key arguments")
			return
		}
		if !arityOK(cmd.Arity, len(sub)) {
			w.WriteError("ERR Invalid number of arguments specified for command")
			return
		}
		keys := keyArgs(cmd, sub)
		w.WriteArray(len(keys))
		for _, k := range keys {
			w.WriteBulk(k)
		}
	case "help":
		lines := []string{
			"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"(no subcommand)", "    Return details about all commands.",
			"COUNT", "    Return the total number of commands in this server.",
			"LIST", "    Return a list of all commands in this server.",
			"INFO [<command-name> ...]", "    Return details about multiple commands.",
			"DOCS [<command-name> ...]", "    Return documentation details about multiple commands.",
			"GETKEYS <full-command>", "    Return the keys from a full command.",
			"HELP", "    Print this help.",
		}
		writeHelp(w, lines)
	}
}

// lookupFull finds "name" or "parent|sub".
func (s *Server) lookupFull(name []byte) *Command {
	n := strings.ToLower(string(name))
	if i := strings.IndexByte(n, '|'); i >= 0 {
		if p := s.table[n[:i]]; p != nil {
			for _, sc := range p.Subcommands {
				if sc.Name == n {
					return sc
				}
			}
		}
		return nil
	}
	return s.table[n]
}

// keyArgs returns the key arguments of argv by the command's key positions.
func keyArgs(cmd *Command, argv [][]byte) [][]byte {
	if cmd.FirstKey <= 0 {
		return nil
	}
	if cmd.Keys != nil {
		return cmd.Keys(argv)
	}
	last := cmd.LastKey
	if last < 0 {
		last += len(argv)
	}
	var keys [][]byte
	for i := cmd.FirstKey; i <= last && i < len(argv); i += cmd.Step {
		keys = append(keys, argv[i])
	}
	return keys
}

// TIME: the server clock (frozen under DEBUG CLOCK), as seconds and microseconds.
func timeCmd(c *Client, w *Out, _ [][]byte) {
	ns := c.srv.clock.Now()
	sec, usec := ns/1e9, (ns%1e9)/1e3
	if usec < 0 {
		sec, usec = sec-1, usec+1e6
	}
	w.WriteArray(2)
	w.WriteBulkString(strconv.FormatInt(sec, 10))
	w.WriteBulkString(strconv.FormatInt(usec, 10))
}

// debugAllowed reports whether --enable-debug-command lets c run DEBUG.
func (s *Server) debugAllowed(c *Client) bool {
	switch s.cfg.EnableDebug {
	case "yes":
		return true
	case "local":
		return c.local
	}
	return false
}

// DEBUG CLOCK SET <unix_ns> | DEBUG CLOCK ADVANCE <ns> | DEBUG CLOCK REAL:
// reached only if debugAllowed and by the admin user (execOne).
func debugCmd(c *Client, w *Out, args [][]byte) {
	sub := strings.ToLower(string(args[1]))
	if sub == "help" {
		lines := []string{
			"DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"CLOCK SET <unix-ns>", "    Freeze the server clock at the given Unix time in nanoseconds.",
			"CLOCK ADVANCE <ns>", "    Move the frozen clock by ns nanoseconds (negative moves it back).",
			"CLOCK REAL", "    Return to the wall clock.",
			"MIGRATE-DELAY <ms>", "    Wait ms between the batches of CLUSTER MOVEKEYS (tests).",
			"HELP", "    Print this help.",
		}
		writeHelp(w, lines)
		return
	}
	if sub == "migrate-delay" {
		// A test knob: CLUSTER MOVEKEYS waits this long between batches,
		// so that a crash can be made to land in the middle of a move.
		if len(args) != 3 {
			w.WriteError(wrongArity("debug"))
			return
		}
		ms, ok := limit.ParseRedisInt(args[2])
		if !ok || ms < 0 || ms > 60000 {
			w.WriteError("ERR the delay must be 0 to 60000 ms")
			return
		}
		c.srv.node.SetBatchDelay(time.Duration(ms) * time.Millisecond)
		w.WriteOK()
		return
	}
	if sub != "clock" {
		w.WriteError("ERR unknown subcommand '" + trunc(cstr(args[1]), 128) + "'. Try DEBUG HELP.")
		return
	}
	if len(args) < 3 {
		w.WriteError(wrongArity("debug"))
		return
	}
	clk := c.srv.clock
	switch op := strings.ToLower(string(args[2])); {
	case op == "real" && len(args) == 3:
		clk.Real()
	case (op == "set" || op == "advance") && len(args) == 4:
		n, ok := limit.ParseRedisInt(args[3])
		if !ok {
			w.WriteError(ErrNotInteger)
			return
		}
		if op == "set" {
			clk.Set(n)
		} else {
			clk.Advance(n)
		}
	default:
		w.WriteError(ErrSyntax)
		return
	}
	w.WriteOK()
}

// configParams returns the parameters CONFIG GET reports, Redis's names.
func (s *Server) configParams() map[string]string {
	host, port := "127.0.0.1", "6379"
	if h, p, ok := strings.Cut(s.cfg.Addr, ":"); ok {
		host, port = h, p
		if i := strings.LastIndexByte(s.cfg.Addr, ':'); i >= 0 {
			host, port = s.cfg.Addr[:i], s.cfg.Addr[i+1:]
		}
	}
	m := map[string]string{
		"bind":                 strings.Trim(host, "[]"),
		"port":                 port,
		"requirepass":          s.cfg.RequirePass,
		"databases":            "1",
		"maxmemory":            "0",
		"maxmemory-policy":     "noeviction",
		"save":                 "",
		"appendonly":           "no",
		"timeout":              "0",
		"cluster-enabled":      map[bool]string{true: "yes", false: "no"}[s.clusterOn()],
		"enable-debug-command": s.cfg.EnableDebug,
		"proto-max-bulk-len":   "536870912",
		// Redis's tracking-table-max-keys counts keys; here (client, key)
		// pairs, which bound the same memory.
		"tracking-table-max-keys": strconv.Itoa(s.cfg.TrackingMaxKeys),
	}
	for k, v := range s.cfg.Params {
		m[k] = v
	}
	for _, p := range s.settable() {
		m[p.name] = strconv.FormatInt(p.v.Load(), 10)
	}
	return m
}

// settableParam is a parameter CONFIG SET changes at run time: an integer
// of at least min.
type settableParam struct {
	name string
	v    *atomic.Int64
	min  int64
	set  func(int64) // nil: store into v
}

func (s *Server) settable() []settableParam {
	return []settableParam{
		{name: "slowlog-log-slower-than", v: &s.slowlog.slowerThan, min: -1}, // Redis: -1 turns it off
		{name: "slowlog-max-len", v: &s.slowlog.maxLen, min: 0, set: s.slowlog.setMaxLen},
		{name: "latency-monitor-threshold", v: &s.latency.threshold, min: 0},
	}
}

// CONFIG GET parameter [parameter ...]
func configGet(c *Client, w *Out, args [][]byte) {
	params := c.srv.configParams()
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	seen := map[string]bool{}
	for _, pat := range args[2:] {
		// Redis's configGetCommand looks a name without glob characters up
		// directly and replies with it as the client wrote it.
		if !bytes.ContainsAny(pat, "[*?") {
			n := strings.ToLower(string(pat))
			if v, ok := params[n]; ok && !seen[n] {
				seen[n] = true
				out = append(out, string(pat), v)
			}
			continue
		}
		for _, n := range names {
			if !seen[n] && store.Match(pat, []byte(n), true) {
				seen[n] = true
				out = append(out, n, params[n])
			}
		}
	}
	w.WriteMap(len(out) / 2)
	for _, s := range out {
		w.WriteBulkString(s)
	}
}

// CONFIG SET parameter value [parameter value ...]: only the slow log's and
// the latency monitor's parameters change at run time (settable); every
// other is a command-line flag. All pairs are checked before any applies,
// as Redis's.
func configSet(c *Client, w *Out, args [][]byte) {
	if (len(args)-2)%2 != 0 {
		w.WriteError(ErrSyntax) // Redis's configSetCommand: an odd argc is a syntax error
		return
	}
	params := c.srv.configParams()
	settable := c.srv.settable()
	type change struct {
		p settableParam
		v int64
	}
	var changes []change
	seen := map[string]bool{}
	for i := 2; i < len(args); i += 2 {
		name := strings.ToLower(string(args[i]))
		if _, ok := params[name]; !ok {
			w.WriteError("ERR Unknown option or number of arguments for CONFIG SET - '" + cstr(args[i]) + "'")
			return
		}
		failed := func(why string) {
			w.WriteError("ERR CONFIG SET failed (possibly related to argument '" + name + "') - " + why)
		}
		if seen[name] {
			failed("duplicate parameter")
			return
		}
		seen[name] = true
		var p *settableParam
		for j := range settable {
			if settable[j].name == name {
				p = &settable[j]
			}
		}
		if p == nil {
			failed("can't set immutable config")
			return
		}
		v, ok := limit.ParseRedisInt(args[i+1])
		if !ok {
			failed("argument couldn't be parsed into an integer")
			return
		}
		if v < p.min {
			failed("argument must be between " + strconv.FormatInt(p.min, 10) + " and 9223372036854775807 inclusive")
			return
		}
		changes = append(changes, change{*p, v})
	}
	for _, ch := range changes {
		if ch.p.set != nil {
			ch.p.set(ch.v)
		} else {
			ch.p.v.Store(ch.v)
		}
	}
	w.WriteOK()
}

// CONFIG RESETSTAT
func configResetStat(c *Client, w *Out, _ [][]byte) {
	c.srv.resetStats()
	w.WriteOK()
}

// CONFIG HELP
func configHelp(_ *Client, w *Out, _ [][]byte) {
	lines := []string{
		"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"GET <pattern>", "    Return parameters matching the glob-like <pattern> and their values.",
		"SET <directive> <value>", "    Set the configuration <directive> to <value> (slowlog-log-slower-than, slowlog-max-len, latency-monitor-threshold; the rest are command-line flags).",
		"RESETSTAT", "    Reset statistics reported by the INFO command.",
		"HELP", "    Print this help.",
	}
	writeHelp(w, lines)
}

func (s *Server) resetStats() {
	st := &s.stats
	for _, a := range []interface{ Store(int64) }{&st.connections, &st.rejectedConn, &st.commands,
		&st.netIn, &st.netOut, &st.hits, &st.misses, &st.errorReplies, &st.moved, &st.authDenied, &st.cmdDenied,
		&st.queryBufLimit, &st.outputBufLimit, &st.idleTimeouts} {
		a.Store(0)
	}
	s.errorCounts.Range(func(k, _ any) bool { s.errorCounts.Delete(k); return true })
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	reset := func(st *cmdStat) {
		st.calls.Store(0)
		st.failed.Store(0)
		st.rejected.Store(0)
		st.usec.Store(0)
	}
	for _, r := range s.retired {
		reset(r)
	}
	for i := range s.hists { // CONFIG RESETSTAT clears LATENCY HISTOGRAM, as in Redis
		for k := range s.hists[i].b {
			s.hists[i].b[k].Store(0)
		}
	}
	for _, c := range s.clients {
		for i := range c.stats {
			reset(&c.stats[i])
		}
	}
}

var defaultSections = []string{"server", "clients", "memory", "persistence", "stats", "replication", "cpu", "errorstats", "cluster", "keyspace"}

// INFO [section [section ...]]
func infoCmd(c *Client, w *Out, args [][]byte) {
	want := map[string]bool{}
	if len(args) == 1 {
		for _, s := range defaultSections {
			want[s] = true
		}
	}
	for _, a := range args[1:] {
		switch sec := strings.ToLower(string(a)); sec {
		case "default":
			for _, s := range defaultSections {
				want[s] = true
			}
		case "all", "everything":
			for _, s := range defaultSections {
				want[s] = true
			}
			want["commandstats"] = true
			want["latencystats"] = true
			// cellserver's own section, as Redis's all and everything
			// carry the sections of loaded modules.
			want["ratelimit"] = true
		default:
			want[sec] = true
		}
	}
	var b strings.Builder
	for _, sec := range []string{"server", "clients", "memory", "persistence", "stats", "replication", "cpu", "commandstats", "errorstats", "latencystats", "cluster", "keyspace", "ratelimit"} {
		if !want[sec] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		c.srv.writeInfoSection(&b, sec)
	}
	w.WriteVerbatim(b.String())
}

func (s *Server) writeInfoSection(b *strings.Builder, sec string) {
	line := func(k string, v any) { fmt.Fprintf(b, "%s:%v\r\n", k, v) }
	now := time.Now()
	switch sec {
	case "server":
		b.WriteString("# Server\r\n")
		line("redis_version", RedisVersion)
		if s.clusterOn() {
			line("redis_mode", "cluster")
		} else {
			line("redis_mode", "standalone")
		}
		line("cellserver_version", Version)
		line("os", runtime.GOOS+" "+runtime.GOARCH)
		line("arch_bits", strconv.IntSize)
		line("go_version", runtime.Version())
		line("process_id", os.Getpid())
		line("run_id", s.runID)
		line("tcp_port", s.configParams()["port"])
		line("server_time_usec", s.clock.Now()/1e3)
		up := now.Sub(s.started)
		line("uptime_in_seconds", int64(up.Seconds()))
		line("uptime_in_days", int64(up.Hours()/24))
		line("shards", s.st.NumShards())
	case "clients":
		s.clientsMu.Lock()
		n, tracking := len(s.clients), 0
		var maxIn, maxOut int64 // Redis's are over the last few seconds; these are now's
		for _, cl := range s.clients {
			if cl.tracking() {
				tracking++
			}
			maxIn, maxOut = max(maxIn, cl.qbuf.Load()), max(maxOut, cl.omem.Load())
		}
		s.clientsMu.Unlock()
		b.WriteString("# Clients\r\n")
		line("connected_clients", n)
		if v, ok := s.cfg.Params["maxclients"]; ok {
			line("maxclients", v)
		}
		line("client_recent_max_input_buffer", maxIn)
		line("client_recent_max_output_buffer", maxOut)
		line("blocked_clients", 0)
		line("tracking_clients", tracking)
	case "memory":
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss := readRSS()
		b.WriteString("# Memory\r\n")
		line("used_memory", ms.HeapAlloc)
		line("used_memory_human", human(int64(ms.HeapAlloc)))
		line("used_memory_rss", rss)
		line("used_memory_rss_human", human(rss))
		line("used_memory_keytable", s.st.Stats().TableBytes)
		line("go_heap_sys", ms.HeapSys)
		line("go_num_gc", ms.NumGC)
		line("go_gc_pause_total_ns", ms.PauseTotalNs)
		line("maxmemory", 0)
		line("maxmemory_policy", "noeviction")
	case "persistence":
		b.WriteString("# Persistence\r\n")
		line("loading", 0)
		ps := s.st.PersistStats()
		if !ps.Enabled {
			line("persistence", "none")
			break
		}
		line("persistence", "pebble")
		line("fsync", ps.Fsync)
		line("loaded_keys", ps.KeysLoaded)
		line("loaded_expired_dropped", ps.ExpiredAtLoad)
		line("load_time_ms", ps.LoadTime.Milliseconds())
		status := "ok"
		if !ps.LastWriteOK {
			status = "err"
		}
		line("last_write_status", status)
		line("last_write_error", ps.LastWriteErr)
		line("write_errors", ps.WriteErrors)
		line("commits", ps.Commits)
		line("changes_written", ps.Changes)
		line("changes_pending", ps.Pending)
		line("last_fsync_time", ps.LastFsync.Unix())
		line("disk_bytes", ps.DiskBytes)
		line("snapshot_rounds", ps.Snapshots)
		line("corrupt_records_lost", ps.CorruptRecordsLost)
		line("stop_writes_on_persist_error", map[bool]string{true: "yes", false: "no"}[s.cfg.StopWrites])
	case "stats":
		st := s.st.Stats()
		b.WriteString("# Stats\r\n")
		line("total_connections_received", s.stats.connections.Load())
		line("total_commands_processed", s.stats.commands.Load())
		line("instantaneous_ops_per_sec", s.opsPerSec())
		line("total_net_input_bytes", s.stats.netIn.Load())
		line("total_net_output_bytes", s.stats.netOut.Load())
		line("rejected_connections", s.stats.rejectedConn.Load())
		line("expired_keys", st.ExpiredKeys)
		line("evicted_keys", 0)
		line("keyspace_hits", s.stats.hits.Load())
		line("keyspace_misses", s.stats.misses.Load())
		// Redis's tracking_total_items: the (client, key) pairs remembered.
		// Its tracking_total_keys (distinct keys) is not kept here.
		line("tracking_total_items", s.trackedKeys.Load())
		line("tracking_total_prefixes", s.trackingPrefixes())
		line("total_error_replies", s.stats.errorReplies.Load())
		line("acl_access_denied_auth", s.stats.authDenied.Load())
		line("acl_access_denied_cmd", s.stats.cmdDenied.Load())
		line("client_query_buffer_limit_disconnections", s.stats.queryBufLimit.Load())
		line("client_output_buffer_limit_disconnections", s.stats.outputBufLimit.Load())
		// Not in Redis, which does not count them.
		line("client_idle_timeout_disconnections", s.stats.idleTimeouts.Load())
	case "replication":
		b.WriteString("# Replication\r\n")
		line("role", "master")
		line("connected_slaves", 0)
	case "cpu":
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		b.WriteString("# CPU\r\n")
		line("used_cpu_sys", fmt.Sprintf("%.6f", tvSec(ru.Stime)))
		line("used_cpu_user", fmt.Sprintf("%.6f", tvSec(ru.Utime)))
	case "commandstats":
		b.WriteString("# Commandstats\r\n")
		var all []*Command
		for _, n := range s.commandNames() {
			cmd := s.table[n]
			all = append(all, cmd)
			all = append(all, cmd.Subcommands...)
		}
		for _, cmd := range all {
			calls, failed, rejected, usec := s.commandStat(cmd)
			if calls == 0 && failed == 0 && rejected == 0 {
				continue
			}
			perCall := 0.0
			if calls > 0 {
				perCall = float64(usec) / float64(calls)
			}
			fmt.Fprintf(b, "cmdstat_%s:calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,failed_calls=%d\r\n",
				cmd.Name, calls, usec, perCall, rejected, failed)
		}
	case "errorstats":
		b.WriteString("# Errorstats\r\n")
		var codes []string
		s.errorCounts.Range(func(k, _ any) bool { codes = append(codes, k.(string)); return true })
		sort.Strings(codes)
		for _, code := range codes {
			v, _ := s.errorCounts.Load(code)
			fmt.Fprintf(b, "errorstat_%s:count=%d\r\n", code, v.(interface{ Load() int64 }).Load())
		}
	case "latencystats":
		b.WriteString("# Latencystats\r\n")
		s.writeLatencyStats(b)
	case "cluster":
		b.WriteString("# Cluster\r\n")
		if s.clusterOn() {
			line("cluster_enabled", 1)
			line("cluster_mode", s.cfg.Cluster.Mode)
			line("cluster_moved_replies", s.stats.moved.Load())
			moves := s.node.Counts()
			line("cluster_ask_replies", moves.Ask)
			line("cluster_tryagain_replies", moves.TryAgain)
			ns := s.nodeState()
			line("cluster_migrating_slots", len(ns.Migrating))
			line("cluster_importing_slots", len(ns.Importing))
			line("cluster_keys_migrated", moves.Migrated)
			line("cluster_keys_imported", moves.Imported)
		} else {
			line("cluster_enabled", 0)
		}
	case "ratelimit":
		// The metrics registry's decision and policy families, gathered
		// as a scrape gathers them: INFO and /metrics show one set of
		// counters.
		b.WriteString("# Ratelimit\r\n")
		lines, err := s.metrics.InfoLines()
		if err != nil {
			line("metrics_error", strings.ReplaceAll(err.Error(), "\n", " "))
		}
		for _, l := range lines {
			b.WriteString(l)
			b.WriteString("\r\n")
		}
	case "keyspace":
		b.WriteString("# Keyspace\r\n")
		st := s.st.Stats()
		if st.Keys > 0 {
			fmt.Fprintf(b, "db0:keys=%d,expires=%d,avg_ttl=0\r\n", st.Keys, st.Expires)
		}
	}
}

func tvSec(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// readRSS returns the resident set size in bytes (Linux), or 0.
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
