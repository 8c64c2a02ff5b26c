package tests

// Differential tests: the same bytes go to a real redis-server and to
// cellserver, each request on a fresh connection to each, and the replies
// are compared byte for byte, then whether each server still answers a PING
// on that connection or has closed it (after QUIT and protocol errors).
//
// Modelled on alicebob/miniredis's integration suite (integration/test.go:
// Do compares replies exactly, DoLoosely by structure), with two additions:
// a reply that may legitimately differ is compared by shape only when the
// case names an entry of diffAllowList saying why, and a reply cellserver
// deliberately sends differently (Redis 7.2's text where the local Redis is
// 7.0, or a documented cellserver choice) is a knownDiff that pins both
// servers' exact bytes.
//
// The local reference is Debian's redis-server, Redis 7.0.x here (bash
// test.sh installs it); cellserver claims Redis 7.2. Against a 7.2 server
// the knownDiff cases of kind "7.2" pass too: Redis may send either text.

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// diffCase is one request sent to both servers.
type diffCase struct {
	name string
	// setup commands are sent first on the same connections; their replies
	// must have the same RESP type (they may hold ids or versions).
	setup [][]string
	args  []string // the request, as a RESP array of bulk strings
	raw   string   // or the request as raw bytes
	n     int      // how many replies the request gets (default 1)
	shape *shapeCmp
	known *knownDiff
}

// shapeCmp compares replies that legitimately differ.
type shapeCmp struct {
	allow []string // keys of diffAllowList: why these replies may differ
	check func(redis, cell []reply) error
}

// knownDiff is a reply cellserver deliberately sends differently.
type knownDiff struct {
	allow string // key of diffAllowList: the reason, with a reference
	// redis is what the local Redis 7.0 sends (a prefix when it ends in
	// "..."); for an entry of kind "7.2" Redis may also send cell.
	redis string
	cell  string // exactly what cellserver sends
}

// allowEntry says why some replies differ. kind is "shape" (compared by
// shape: the values cannot or need not match), "7.2" (Redis 7.0 and 7.2
// differ and cellserver follows 7.2) or "choice" (a cellserver choice the
// README documents, or a gap it reports).
type allowEntry struct {
	kind string
	why  string
}

// diffAllowList is every reason a reply may differ from the local Redis.
// TestDifferentialAllowList checks that each entry is used and each use is
// listed.
var diffAllowList = map[string]allowEntry{
	// Values that differ between any two servers.
	"ids":       {"shape", "connection ids count connections since each server started"},
	"addresses": {"shape", "client ports are ephemeral and each server listens on its own free port"},
	"time":      {"shape", "TIME and uptimes read each server's own clock a moment apart"},
	"version": {"shape", "cellserver reports redis_version 7.2.0 (README: clients gate features on it); the local Redis is " +
		"Debian's 7.0.x"},
	"host": {"shape", "process id, run id, os, executable, memory and CPU figures describe each process"},
	// What cellserver does not have, by design.
	"command-set": {"shape", "cellserver has ~30 commands (README: Supported commands), Redis ~240: counts and lists differ, " +
		"and COMMAND INFO/DOCS compare only the commands both have"},
	"command-meta": {"shape", "COMMAND INFO tips and key-spec flags, and COMMAND DOCS summaries, complexity and " +
		"arguments, describe cellserver's own commands (GET returns a TAT); name, arity, flags, key positions, ACL " +
		"categories, since and group are compared"},
	"help-text": {"shape", "HELP lists only the subcommands cellserver implements; the first line is compared"},
	"info-fields": {"shape", "INFO: Redis has many fields cellserver has no use for (RDB/AOF, replication offsets, allocator, " +
		"lazyfree, tracking...) and sections it has no content for (# Modules, # Latencystats); every field cellserver " +
		"sends must exist in Redis's same section, in Redis's order, unless cellserver-only (infoCellOnly)"},
	"client-fields": {"shape", "CLIENT LIST/INFO: fd is the socket's descriptor in each process, qbuf/omem/tot-mem are the " +
		"bytes buffered (unfinished request, unsent replies, both; Redis's tot-mem adds its fixed structures), " +
		"qbuf-free/argv-mem/rbs/rbp/obl/oll are 0 (cellserver does not account per-client buffers this way), age/idle are clocks; " +
		"field names and order, name, flags, db, sub, psub, ssub, multi, events, cmd, user, redir, resp are compared"},
	"config-subset": {"shape", "CONFIG GET with a glob: cellserver knows only the parameters it reports (configParams), a " +
		"subset of Redis's; their values must equal Redis's, and Redis's reply order is its dict's"},
	"config-values": {"shape", "port differs (each server its own free port); maxclients is lowered from 10000 when the fd " +
		"limit is low, by a different rule in each server; client-output-buffer-limit: cellserver limits normal clients " +
		"(README: --client-output-buffer-limit, default 256mb 64mb 60) and has no replica or pubsub clients to list"},
	"other-clients": {"shape", "CLIENT LIST may also show connections of earlier cases that are still closing"},
	// Cluster mode.
	"node-ids": {"shape", "node ids: Redis picks a random one, cellserver's is the SHA-1 of its announced address " +
		"(README: Scaling out)"},
	"epochs": {"shape", "cellserver's emulated one-node topology has epoch 1; Redis's CLUSTER ADDSLOTSRANGE leaves the " +
		"epochs at 0"},
	"gap-cluster-shards-unassigned": {"choice", "before a topology is applied a cellserver node is in no shard, so " +
		"CLUSTER SHARDS is empty; a Redis node alone lists itself as a shard without slots"},
	// Redis 7.0 (local) vs 7.2 (claimed).
	"7.2-hello-noauth": {"7.2", "HELLO's NOAUTH text names HELLO <proto> AUTH since Redis 7.2 (redis/redis#11809, " +
		"src/networking.c helloCommand); 7.0 says HELLO AUTH"},
	"7.2-setinfo": {"7.2", "CLIENT SETINFO is new in Redis 7.2 (redis/redis#11758, src/networking.c clientSetinfoCommand: " +
		"\"Unrecognized option '%s'\", \"%s cannot contain spaces, newlines or special characters.\" with the attribute " +
		"as sent); 7.0 answers unknown subcommand"},
	"7.2-noperm": {"7.2", "ACL denials name the user since Redis 7.2: 'NOPERM User <name> has no permissions to run the " +
		"'<cmd>' command' (redis/redis#11160, src/acl.c getAclErrorMessage); 7.0 says 'this user has no permissions...'"},
	"7.2-lib-fields":  {"7.2", "CLIENT LIST/INFO end in lib-name= lib-ver= since Redis 7.2 (redis/redis#11758)"},
	"7.2-client-help": {"7.2", "CLIENT HELP lists SETINFO since Redis 7.2 (redis/redis#11995)"},
	"7.2-acl-stats": {"7.2", "INFO stats has acl_access_denied_auth and acl_access_denied_cmd since Redis 7.2 " +
		"(redis/redis#11288)"},
	// cellserver choices (README) and gaps.
	"choice-config-set": {"choice", "CONFIG SET changes nothing (README: configuration is by flags): known parameters answer " +
		"the immutable-config error, others the unknown-option error, where Redis sets mutable ones and knows ~200 names"},
	"choice-info-cellserver": {"shape", "INFO fields of cellserver's own (infoCellOnly: cellserver_version, go_*, shards, " +
		"its Pebble persistence in place of RDB/AOF, idle-timeout disconnections, cluster_mode, cluster_moved_replies) " +
		"and two from Redis 7.4 (client_query/output_buffer_limit_disconnections, redis/redis#12476) that cellserver counts"},
}

// infoCellOnly are the INFO fields cellserver sends that the local Redis
// does not have ("choice-info-cellserver", "7.2-acl-stats").
var infoCellOnly = map[string]string{
	"cellserver_version":                 "choice-info-cellserver",
	"go_version":                         "choice-info-cellserver",
	"shards":                             "choice-info-cellserver",
	"used_memory_keytable":               "choice-info-cellserver",
	"go_heap_sys":                        "choice-info-cellserver",
	"go_num_gc":                          "choice-info-cellserver",
	"go_gc_pause_total_ns":               "choice-info-cellserver",
	"persistence":                        "choice-info-cellserver",
	"fsync":                              "choice-info-cellserver",
	"loaded_keys":                        "choice-info-cellserver",
	"loaded_expired_dropped":             "choice-info-cellserver",
	"load_time_ms":                       "choice-info-cellserver",
	"last_write_status":                  "choice-info-cellserver",
	"last_write_error":                   "choice-info-cellserver",
	"write_errors":                       "choice-info-cellserver",
	"commits":                            "choice-info-cellserver",
	"changes_written":                    "choice-info-cellserver",
	"changes_pending":                    "choice-info-cellserver",
	"last_fsync_time":                    "choice-info-cellserver",
	"disk_bytes":                         "choice-info-cellserver",
	"snapshot_rounds":                    "choice-info-cellserver",
	"corrupt_records_lost":               "choice-info-cellserver",
	"stop_writes_on_persist_error":       "choice-info-cellserver",
	"client_idle_timeout_disconnections": "choice-info-cellserver",
	"client_query_buffer_limit_disconnections":  "choice-info-cellserver",
	"client_output_buffer_limit_disconnections": "choice-info-cellserver",
	"acl_access_denied_auth":                    "7.2-acl-stats",
	"acl_access_denied_cmd":                     "7.2-acl-stats",
	"cluster_mode":                              "choice-info-cellserver",
	"cluster_moved_replies":                     "choice-info-cellserver",
	"cluster_ask_replies":                       "choice-info-cellserver",
	"cluster_tryagain_replies":                  "choice-info-cellserver",
	"cluster_migrating_slots":                   "choice-info-cellserver",
	"cluster_importing_slots":                   "choice-info-cellserver",
	"cluster_keys_migrated":                     "choice-info-cellserver",
	"cluster_keys_imported":                     "choice-info-cellserver",
}

// infoExact are INFO fields whose values must be equal on both servers.
var infoExact = map[string]bool{
	"redis_mode": true, "arch_bits": true, "connected_slaves": true, "role": true, "loading": true,
	"maxmemory": true, "maxmemory_policy": true, "blocked_clients": true, "evicted_keys": true,
	"expired_keys": true, "rejected_connections": true, "cluster_enabled": true, "uptime_in_days": true,
}

// infoCounted are INFO fields that must be equal after a CONFIG RESETSTAT
// and the same requests on both servers. Earlier they may differ: the
// knownDiff cases answer errors on one server only.
var infoCounted = map[string]bool{"keyspace_hits": true, "keyspace_misses": true, "total_error_replies": true}

// ---- shape comparisons ----

func one(f func(r, c respValue) error) func(redis, cell []reply) error {
	return func(redis, cell []reply) error { return f(redis[0].val, cell[0].val) }
}

var (
	countReply = &shapeCmp{[]string{"command-set"}, one(bothIntegers)}
	idReply    = &shapeCmp{[]string{"ids"}, one(bothIntegers)}
	helloShape = &shapeCmp{[]string{"version", "ids"}, one(func(r, c respValue) error {
		if err := sameShape(r, c); err != nil {
			return err
		}
		for i := 0; i+1 < len(r.elems); i += 2 {
			k := r.elems[i].str
			if k != c.elems[i].str {
				return fmt.Errorf("key %d: %q vs %q", i/2, k, c.elems[i].str)
			}
			if k != "version" && k != "id" && r.elems[i+1].String() != c.elems[i+1].String() {
				return fmt.Errorf("%s: %v vs %v", k, r.elems[i+1], c.elems[i+1])
			}
		}
		return nil
	})}
	timeShape = &shapeCmp{[]string{"time"}, one(func(r, c respValue) error {
		if err := sameShape(r, c); err != nil || len(r.elems) != 2 {
			return fmt.Errorf("want two bulk strings: %v vs %v", r, c)
		}
		rs, err1 := strconv.ParseInt(r.elems[0].str, 10, 64)
		cs, err2 := strconv.ParseInt(c.elems[0].str, 10, 64)
		cu, err3 := strconv.ParseInt(c.elems[1].str, 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || cu < 0 || cu > 999999 || rs-cs > 2 || cs-rs > 2 {
			return fmt.Errorf("times %v and %v", r, c)
		}
		return nil
	})}
	helpShape = &shapeCmp{[]string{"help-text"}, one(func(r, c respValue) error {
		if r.kind != '*' || c.kind != '*' || len(c.elems) == 0 || len(c.elems)%2 == 0 {
			return fmt.Errorf("want an array of lines: %v vs %v", r, c)
		}
		for _, l := range c.elems {
			if l.kind != '+' {
				return fmt.Errorf("help line %v is not a simple string", l)
			}
		}
		if r.elems[0].str != c.elems[0].str {
			return fmt.Errorf("first line %q vs %q", r.elems[0].str, c.elems[0].str)
		}
		return nil
	})}
	// clientHelpShape also wants cellserver to list SETINFO as 7.2 does.
	clientHelpShape = &shapeCmp{[]string{"help-text", "7.2-client-help"}, func(redis, cell []reply) error {
		if err := helpShape.check(redis, cell); err != nil {
			return err
		}
		if !strings.Contains(string(cell[0].raw), "+SETINFO <option> <value>\r\n+    Set client meta attr. Options are:\r\n") {
			return fmt.Errorf("CLIENT HELP lacks Redis 7.2's SETINFO lines")
		}
		return nil
	}}
	commandListShape = &shapeCmp{[]string{"command-set"}, one(func(r, c respValue) error {
		names := map[string]bool{}
		for _, e := range r.elems {
			names[e.str] = true
		}
		for _, e := range c.elems {
			if e.kind != '$' || (!names[e.str] && !ownCommand(e.str) && !ownSubcommand(e.str)) {
				return fmt.Errorf("cellserver lists %v, which Redis does not have", e)
			}
		}
		return nil
	})}
	commandInfoShape = &shapeCmp{[]string{"command-set", "command-meta"}, one(compareCommandInfo)}
	commandDocsShape = &shapeCmp{[]string{"command-set", "command-meta"}, one(compareCommandDocs)}
	clientLineShape  = &shapeCmp{[]string{"ids", "addresses", "time", "client-fields", "7.2-lib-fields"}, one(compareClientLines)}
	clientListShape  = &shapeCmp{[]string{"ids", "addresses", "time", "client-fields", "7.2-lib-fields", "other-clients"},
		one(compareClientLines)}
	commandstatsShape = &shapeCmp{[]string{"time"}, one(compareCommandstats)}
)

var (
	nodeIDRE      = regexp.MustCompile(`^[0-9a-f]{40}$`)
	clusterMyID   = &shapeCmp{[]string{"node-ids"}, one(func(r, c respValue) error { return bothMatch(nodeIDRE, r, c) })}
	clusterInfoKV = &shapeCmp{[]string{"epochs"}, one(compareClusterInfo)}
	clusterNodes  = &shapeCmp{[]string{"node-ids", "addresses", "epochs"}, one(compareClusterNodes)}
	// CLUSTER SLOTS and SHARDS: the same structure and values but for node
	// ids and ports.
	clusterSlotsShape = &shapeCmp{[]string{"node-ids", "addresses"}, one(func(r, c respValue) error {
		return sameExcept(r, c, func(v respValue) bool { return nodeIDRE.MatchString(v.str) || isPortOf(v) })
	})}
)

// isPortOf reports whether v is an integer that is a listening port (the
// only integers in these replies above 16383 are ports).
func isPortOf(v respValue) bool {
	n, err := strconv.Atoi(v.str)
	return v.kind == ':' && err == nil && n > 16383
}

func bothMatch(re *regexp.Regexp, r, c respValue) error {
	if r.kind != '$' || c.kind != '$' || !re.MatchString(r.str) || !re.MatchString(c.str) {
		return fmt.Errorf("want %v: %v vs %v", re, r, c)
	}
	return nil
}

// sameExcept compares recursively, skipping the values loose reports on.
func sameExcept(r, c respValue, loose func(respValue) bool) error {
	if err := sameShape(r, c); err != nil {
		return err
	}
	if r.elems == nil {
		if r.str != c.str && !(loose(r) && loose(c)) {
			return fmt.Errorf("%v vs %v", r, c)
		}
		return nil
	}
	for i := range r.elems {
		if err := sameExcept(r.elems[i], c.elems[i], loose); err != nil {
			return err
		}
	}
	return nil
}

// compareClusterInfo compares CLUSTER INFO field by field: the same fields
// in the same order, the same values but for the epochs.
func compareClusterInfo(r, c respValue) error {
	if r.kind != '$' || c.kind != '$' {
		return fmt.Errorf("want bulk strings: %v vs %v", r, c)
	}
	rl, cl := strings.Split(r.str, "\r\n"), strings.Split(c.str, "\r\n")
	if len(rl) != len(cl) {
		return fmt.Errorf("%d lines vs %d", len(rl), len(cl))
	}
	for i := range rl {
		rk, rv, _ := strings.Cut(rl[i], ":")
		ck, cv, _ := strings.Cut(cl[i], ":")
		if rk != ck || (rv != cv && !strings.HasSuffix(rk, "_epoch")) {
			return fmt.Errorf("line %d: %q vs %q", i, rl[i], cl[i])
		}
	}
	return nil
}

// compareClusterNodes compares CLUSTER NODES of a one-node cluster: id,
// address and config epoch by shape, the rest exactly.
func compareClusterNodes(r, c respValue) error {
	rf, cf := strings.Fields(r.str), strings.Fields(c.str)
	if r.kind != '$' || c.kind != '$' || len(rf) != len(cf) || len(rf) < 8 {
		return fmt.Errorf("want one node line each: %v vs %v", r, c)
	}
	addr := regexp.MustCompile(`^127\.0\.0\.1:\d+@\d+$`)
	for i := range rf {
		switch i {
		case 0:
			if !nodeIDRE.MatchString(rf[i]) || !nodeIDRE.MatchString(cf[i]) {
				return fmt.Errorf("ids %q %q", rf[i], cf[i])
			}
		case 1:
			if !addr.MatchString(rf[i]) || !addr.MatchString(cf[i]) {
				return fmt.Errorf("addresses %q %q", rf[i], cf[i])
			}
		case 6: // config epoch
		default:
			if rf[i] != cf[i] {
				return fmt.Errorf("field %d: %q vs %q", i, rf[i], cf[i])
			}
		}
	}
	return nil
}

// infoShape compares INFO replies section by section ("info-fields");
// counted: the case reset the statistics first (infoCounted).
func infoShape(counted bool) *shapeCmp {
	return &shapeCmp{[]string{"info-fields", "host", "time", "version", "choice-info-cellserver", "7.2-acl-stats"},
		one(func(r, c respValue) error { return compareInfo(r, c, counted) })}
}

// configShape compares CONFIG GET replies as maps: cellserver's pairs must
// be Redis's, except the values of the keys in loose (compared as classes).
func configShape(allow []string, loose ...string) *shapeCmp {
	return &shapeCmp{allow, one(func(r, c respValue) error {
		rm, _, err := kvPairs(r)
		if err != nil {
			return err
		}
		cm, ckeys, err := kvPairs(c)
		if err != nil {
			return err
		}
		for _, k := range ckeys {
			rv, ok := rm[k]
			switch {
			case !ok:
				return fmt.Errorf("cellserver reports %q, which Redis does not", k)
			case contains(loose, k):
				if valueClass(rv) != valueClass(cm[k]) {
					return fmt.Errorf("%s: %q vs %q", k, rv, cm[k])
				}
			case rv != cm[k]:
				return fmt.Errorf("%s: Redis %q, cellserver %q", k, rv, cm[k])
			}
		}
		return nil
	})}
}

func bothIntegers(r, c respValue) error {
	if r.kind != ':' || c.kind != ':' {
		return fmt.Errorf("want integers, got %v and %v", r, c)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// infoCellSections are INFO sections only cellserver has: INFO all and
// everything include them, as Redis's include its modules' sections.
var infoCellSections = map[string]bool{"ratelimit": true}

func compareInfo(r, c respValue, counted bool) error {
	if r.kind != '$' || c.kind != '$' {
		return fmt.Errorf("want bulk strings: %v vs %v", r, c)
	}
	rOrder, rSec := infoSections(r.str)
	cOrder, cSec := infoSections(c.str)
	// cellserver's own sections (as a module's in Redis) have nothing to
	// compare with.
	cOrder = slices.DeleteFunc(cOrder, func(sec string) bool { return infoCellSections[sec] })
	if s, ok := subsequence(cOrder, rOrder); !ok {
		return fmt.Errorf("section %q is not in Redis's reply (%v), or not in its order", s, rOrder)
	}
	for _, sec := range cOrder {
		rVals := map[string]string{}
		var rKeys []string
		for _, f := range rSec[sec] {
			rVals[f.key] = f.val
			rKeys = append(rKeys, f.key)
		}
		var common []string
		for _, f := range cSec[sec] {
			rv, ok := rVals[f.key]
			if !ok {
				if _, own := infoCellOnly[f.key]; own || sec == "commandstats" || sec == "errorstats" || sec == "latencystats" || sec == "keyspace" {
					continue
				}
				return fmt.Errorf("# %s: cellserver sends %q, which Redis does not", sec, f.key)
			}
			common = append(common, f.key)
			switch {
			case (infoExact[f.key] || counted && infoCounted[f.key]) && rv != f.val:
				return fmt.Errorf("# %s: %s is %q on Redis, %q on cellserver", sec, f.key, rv, f.val)
			case sec != "commandstats" && valueClass(rv) != valueClass(f.val) && !strings.HasSuffix(f.key, "_human") &&
				f.key != "os":
				return fmt.Errorf("# %s: %s is %q on Redis, %q on cellserver", sec, f.key, rv, f.val)
			}
		}
		// latencystats lists commands in Redis's dict order, as commandstats.
		if k, ok := subsequence(common, rKeys); !ok && sec != "commandstats" && sec != "errorstats" && sec != "latencystats" {
			return fmt.Errorf("# %s: %q is out of Redis's order", sec, k)
		}
	}
	return nil
}

// clientOrder is Redis 7.0's CLIENT LIST field order; 7.2 appends
// lib-name and lib-ver ("7.2-lib-fields").
var clientOrder = strings.Fields("id addr laddr fd name age idle flags db sub psub ssub multi qbuf qbuf-free argv-mem " +
	"multi-mem rbs rbp obl oll omem tot-mem events cmd user redir resp")

// clientLoose are the CLIENT LIST fields compared as integers only.
var clientLoose = strings.Fields("id fd age idle qbuf qbuf-free argv-mem multi-mem rbs rbp obl oll omem tot-mem")

var addrRE = regexp.MustCompile(`^127\.0\.0\.1:\d+$`)

func compareClientLines(r, c respValue) error {
	if r.kind != '$' || c.kind != '$' || !strings.HasSuffix(c.str, "\n") || !strings.HasSuffix(r.str, "\n") {
		return fmt.Errorf("want bulk strings of lines: %v vs %v", r, c)
	}
	rLines := strings.Split(strings.TrimSuffix(r.str, "\n"), "\n")
	cLines := strings.Split(strings.TrimSuffix(c.str, "\n"), "\n")
	// The connection asking is the one whose cmd is the command asking.
	mine := func(lines []string) map[string]string {
		for _, l := range lines {
			if _, m := clientFields(l); m["cmd"] == "client|list" || m["cmd"] == "client|info" {
				return m
			}
		}
		return nil
	}
	want72 := strings.Join(append(append([]string(nil), clientOrder...), "lib-name", "lib-ver"), " ")
	for _, l := range cLines {
		if keys, _ := clientFields(l); strings.Join(keys, " ") != want72 {
			return fmt.Errorf("cellserver's fields %v, want Redis 7.2's %v", keys, want72)
		}
	}
	for _, l := range rLines {
		if keys, _ := clientFields(l); strings.Join(keys, " ") != strings.Join(clientOrder, " ") &&
			strings.Join(keys, " ") != want72 {
			return fmt.Errorf("Redis's fields %v are neither 7.0's nor 7.2's: update clientOrder", keys)
		}
	}
	rm, cm := mine(rLines), mine(cLines)
	if rm == nil || cm == nil {
		return fmt.Errorf("the asking connection is missing: %q vs %q", r.str, c.str)
	}
	for _, k := range clientOrder {
		switch {
		case k == "addr" || k == "laddr":
			if !addrRE.MatchString(cm[k]) || !addrRE.MatchString(rm[k]) {
				return fmt.Errorf("%s: %q vs %q", k, rm[k], cm[k])
			}
		case contains(clientLoose, k):
			if valueClass(rm[k]) != "integer" || valueClass(cm[k]) != "integer" {
				return fmt.Errorf("%s: %q vs %q", k, rm[k], cm[k])
			}
		case rm[k] != cm[k]:
			return fmt.Errorf("%s: Redis %q, cellserver %q", k, rm[k], cm[k])
		}
	}
	return nil
}

// compareCommandInfo compares COMMAND / COMMAND INFO replies on the fields
// both servers must agree on: name, arity, flags, first key, last key,
// step, ACL categories (in Redis's order), and the same for the
// subcommands both have.
func compareCommandInfo(r, c respValue) error {
	if r.kind != '*' || c.kind != '*' {
		return fmt.Errorf("want arrays: %v vs %v", r, c)
	}
	byName := func(v respValue) map[string]respValue {
		m := map[string]respValue{}
		for _, e := range v.elems {
			if !e.null && len(e.elems) > 0 {
				m[e.elems[0].str] = e
			}
		}
		return m
	}
	rm := byName(r)
	for i, ce := range c.elems {
		if ce.null {
			if i < len(r.elems) && !r.elems[i].null {
				return fmt.Errorf("entry %d: cellserver has none, Redis has %v", i, r.elems[i].elems[0])
			}
			continue
		}
		if len(ce.elems) != 10 {
			return fmt.Errorf("entry %d has %d fields, want 10", i, len(ce.elems))
		}
		name := ce.elems[0].str
		re, ok := rm[name]
		if !ok {
			if ownCommand(name) {
				continue
			}
			return fmt.Errorf("cellserver describes %q, Redis does not have it", name)
		}
		if err := sameCommandInfo(re, ce); err != nil {
			return err
		}
	}
	return nil
}

func sameCommandInfo(r, c respValue) error {
	name := c.elems[0].str
	for _, f := range []struct {
		i    int
		what string
	}{{1, "arity"}, {3, "first key"}, {4, "last key"}, {5, "step"}} {
		if r.elems[f.i].str != c.elems[f.i].str {
			return fmt.Errorf("%s: %s is %s on Redis, %s on cellserver", name, f.what, r.elems[f.i].str, c.elems[f.i].str)
		}
	}
	words := func(v respValue) string {
		var w []string
		for _, e := range v.elems {
			w = append(w, e.str)
		}
		return strings.Join(w, " ")
	}
	if rf, cf := words(r.elems[2]), words(c.elems[2]); rf != cf {
		return fmt.Errorf("%s: flags are %q on Redis, %q on cellserver", name, rf, cf)
	}
	if ra, ca := words(r.elems[6]), words(c.elems[6]); ra != ca {
		return fmt.Errorf("%s: ACL categories are %q on Redis, %q on cellserver", name, ra, ca)
	}
	rsubs := map[string]respValue{}
	for _, s := range r.elems[9].elems {
		rsubs[s.elems[0].str] = s
	}
	for _, s := range c.elems[9].elems {
		rs, ok := rsubs[s.elems[0].str]
		if !ok {
			if ownSubcommand(s.elems[0].str) {
				continue
			}
			return fmt.Errorf("%s: Redis has no subcommand %s", name, s.elems[0].str)
		}
		if err := sameCommandInfo(rs, s); err != nil {
			return err
		}
	}
	return nil
}

// compareCommandDocs compares COMMAND DOCS replies: the same commands
// (of those cellserver has), and the same since and group.
func compareCommandDocs(r, c respValue) error {
	rm, _, err := docsMap(r)
	if err != nil {
		return err
	}
	cm, cnames, err := docsMap(c)
	if err != nil {
		return err
	}
	for _, n := range cnames {
		rd, ok := rm[n]
		if !ok {
			if ownCommand(n) {
				continue
			}
			return fmt.Errorf("cellserver documents %q, Redis does not", n)
		}
		for _, k := range []string{"since", "group"} {
			if rd[k] != cm[n][k] {
				return fmt.Errorf("%s: %s is %q on Redis, %q on cellserver", n, k, rd[k], cm[n][k])
			}
		}
	}
	if len(cnames) != len(rm) {
		return fmt.Errorf("Redis documents %d of the requested commands, cellserver %d", len(rm), len(cnames))
	}
	return nil
}

func docsMap(v respValue) (map[string]map[string]string, []string, error) {
	if v.kind != '*' || len(v.elems)%2 != 0 {
		return nil, nil, fmt.Errorf("not a COMMAND DOCS reply: %v", v)
	}
	m := map[string]map[string]string{}
	var names []string
	for i := 0; i < len(v.elems); i += 2 {
		doc := map[string]string{}
		d := v.elems[i+1]
		for j := 0; j+1 < len(d.elems); j += 2 {
			doc[d.elems[j].str] = d.elems[j+1].str
		}
		m[v.elems[i].str] = doc
		names = append(names, v.elems[i].str)
	}
	return m, names, nil
}

var cmdstatRE = regexp.MustCompile(`^cmdstat_(\S+):calls=(\d+),usec=(\d+),usec_per_call=(\d+\.\d\d),rejected_calls=(\d+),failed_calls=(\d+)$`)

// compareCommandstats compares INFO commandstats: the same commands with
// the same calls, rejected_calls and failed_calls ("time": usec differ).
func compareCommandstats(r, c respValue) error {
	parse := func(s string) (map[string]string, error) {
		m := map[string]string{}
		_, secs := infoSections(s)
		for _, f := range secs["commandstats"] {
			line := f.key + ":" + f.val
			g := cmdstatRE.FindStringSubmatch(line)
			if g == nil {
				return nil, fmt.Errorf("malformed %q", line)
			}
			m[g[1]] = fmt.Sprintf("calls=%s rejected_calls=%s failed_calls=%s", g[2], g[5], g[6])
		}
		return m, nil
	}
	rm, err := parse(r.str)
	if err != nil {
		return err
	}
	cm, err := parse(c.str)
	if err != nil {
		return err
	}
	if fmt.Sprint(rm) != fmt.Sprint(cm) {
		return fmt.Errorf("Redis %v\ncellserver %v", rm, cm)
	}
	return nil
}

// ---- the cases ----

func cmd(args ...string) []string { return args }

// exact builds cases compared byte for byte, one per command.
func exact(cmds ...[]string) []diffCase {
	var out []diffCase
	for _, c := range cmds {
		out = append(out, diffCase{name: caseName(c), args: c})
	}
	return out
}

// caseName shows args readably: quoted when empty or not plain, long ones
// shortened.
func caseName(args []string) string {
	parts := make([]string, len(args))
	for i, a := range args {
		switch {
		case len(a) > 40:
			parts[i] = fmt.Sprintf("%q...(%d bytes)", a[:8], len(a))
		case a == "" || strings.ContainsFunc(a, func(r rune) bool { return r <= ' ' || r > '~' }):
			parts[i] = strconv.Quote(a)
		default:
			parts[i] = a
		}
	}
	return strings.Join(parts, " ")
}

const (
	noAuth70 = "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> " +
		"option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"
	noAuth72 = "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH " +
		"<user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"
	unknownSetinfo70 = "-ERR unknown subcommand 'SETINFO'. Try CLIENT HELP.\r\n"
)

var long200 = strings.Repeat("x", 200)

// diffPlainCases run against servers without a password.
var diffPlainCases = concat(
	// Connection.
	exact(cmd("PING"), cmd("PING", "hello world"), cmd("PING", "a", "b"), cmd("PiNg"),
		cmd("ECHO", "hello world"), cmd("ECHO"), cmd("ECHO", "a", "b"), cmd("ECHO", ""), cmd("ECHO", "\x00\xff\r\n"),
		cmd("QUIT"), cmd("QUIT", "extra"),
		cmd("SELECT", "0"), cmd("SELECT", "1"), cmd("SELECT", "-1"), cmd("SELECT", "x"), cmd("SELECT", "00"),
		cmd("SELECT", "+0"), cmd("SELECT", ""), cmd("SELECT", "2147483647"), cmd("SELECT", "2147483648"),
		cmd("SELECT", "-2147483649"), cmd("SELECT", "99999999999999999999"), cmd("SELECT"), cmd("SELECT", "0", "0"),
		cmd("HELLO", "1"), cmd("HELLO", "4"), cmd("HELLO", "x"), cmd("HELLO", "-1"), cmd("HELLO", "2", "FOO"),
		cmd("HELLO", "2", "AUTH", "default"), cmd("HELLO", "2", "SETNAME"), cmd("HELLO", "2", "SETNAME", "a b"),
		cmd("HELLO", "2", "AUTH", "bob", "x"),
		cmd("AUTH"), cmd("AUTH", "x"), cmd("AUTH", "default", "x"), cmd("AUTH", "bob", "x"), cmd("AUTH", "a", "b", "c"),
		cmd("CLIENT"), cmd("CLIENT", "FOO"), cmd("CLIENT", long200), cmd("CLIENT", "a\r\nb"),
		cmd("CLIENT", "SETNAME"), cmd("CLIENT", "SETNAME", "a", "b"), cmd("CLIENT", "SETNAME", "a b"),
		cmd("CLIENT", "SETNAME", "a\nb"), cmd("CLIENT", "SETNAME", "ok"), cmd("CLIENT", "GETNAME"),
		cmd("CLIENT", "GETNAME", "x"), cmd("CLIENT", "ID", "x"), cmd("CLIENT", "INFO", "x"), cmd("CLIENT", "HELP", "x"),
		cmd("CLIENT", "LIST", "TYPE", "master"), cmd("CLIENT", "LIST", "TYPE", "replica"),
		cmd("CLIENT", "LIST", "TYPE", "pubsub"), cmd("CLIENT", "LIST", "TYPE", "foo"), cmd("CLIENT", "LIST", "TYPE"),
		cmd("CLIENT", "LIST", "ID", "x"), cmd("CLIENT", "LIST", "ID", "0"), cmd("CLIENT", "LIST", "ID", "-5"),
		cmd("CLIENT", "LIST", "ID", "+5"), cmd("CLIENT", "LIST", "ID", "999999"), cmd("CLIENT", "LIST", "ID", "1", "x"),
		cmd("CLIENT", "LIST", "TYPE", "normal", "ID", "1"), cmd("CLIENT", "LIST", "ID", "1", "TYPE", "normal"),
		cmd("CLIENT", "LIST", "foo"),
	),
	[]diffCase{
		{name: "CLIENT SETNAME then GETNAME", setup: [][]string{{"CLIENT", "SETNAME", "conn-1"}}, args: cmd("CLIENT", "GETNAME")},
		{name: "CLIENT SETNAME empty clears", setup: [][]string{{"CLIENT", "SETNAME", "x"}, {"CLIENT", "SETNAME", ""}},
			args: cmd("CLIENT", "GETNAME")},
		{name: "HELLO SETNAME sets the name", setup: [][]string{{"HELLO", "2", "SETNAME", "via-hello"}}, args: cmd("CLIENT", "GETNAME")},
		{name: "failed HELLO SETNAME keeps the name", setup: [][]string{{"CLIENT", "SETNAME", "keep"}, {"HELLO", "2", "SETNAME", "a b"}},
			args: cmd("CLIENT", "GETNAME")},
		{name: "HELLO", args: cmd("HELLO"), shape: helloShape},
		{name: "HELLO 2", args: cmd("HELLO", "2"), shape: helloShape},
		{name: "HELLO 2 AUTH without a password configured", args: cmd("HELLO", "2", "AUTH", "default", "any"), shape: helloShape},
		{name: "HELLO 2 SETNAME n", args: cmd("HELLO", "2", "SETNAME", "n"), shape: helloShape},
		{name: "HELLO 3", args: cmd("HELLO", "3"), shape: helloShape},
		{name: "CLIENT ID", args: cmd("CLIENT", "ID"), shape: idReply},
		{name: "CLIENT INFO", args: cmd("CLIENT", "INFO"), shape: clientLineShape},
		{name: "CLIENT INFO with a name", setup: [][]string{{"CLIENT", "SETNAME", "named"}}, args: cmd("CLIENT", "INFO"),
			shape: clientLineShape},
		{name: "CLIENT LIST", args: cmd("CLIENT", "LIST"), shape: clientListShape},
		{name: "CLIENT LIST TYPE normal", args: cmd("CLIENT", "LIST", "TYPE", "normal"), shape: clientListShape},
		{name: "CLIENT HELP", args: cmd("CLIENT", "HELP"), shape: clientHelpShape},
		{name: "CLIENT SETINFO arity", args: cmd("CLIENT", "SETINFO"), known: &knownDiff{allow: "7.2-setinfo",
			redis: unknownSetinfo70, cell: "-ERR wrong number of arguments for 'client|setinfo' command\r\n"}},
		{name: "CLIENT SETINFO lib-name", args: cmd("CLIENT", "SETINFO", "lib-name", "redis-py"), known: &knownDiff{
			allow: "7.2-setinfo", redis: unknownSetinfo70, cell: "+OK\r\n"}},
		{name: "CLIENT SETINFO LIB-VER", args: cmd("CLIENT", "SETINFO", "LIB-VER", "1.2.3"), known: &knownDiff{
			allow: "7.2-setinfo", redis: unknownSetinfo70, cell: "+OK\r\n"}},
		{name: "CLIENT SETINFO unknown attribute", args: cmd("CLIENT", "SETINFO", "Lib-Foo", "x"), known: &knownDiff{
			allow: "7.2-setinfo", redis: unknownSetinfo70, cell: "-ERR Unrecognized option 'Lib-Foo'\r\n"}},
		{name: "CLIENT SETINFO LIB-NAME with a space", args: cmd("CLIENT", "SETINFO", "LIB-NAME", "a b"), known: &knownDiff{
			allow: "7.2-setinfo", redis: unknownSetinfo70,
			cell: "-ERR LIB-NAME cannot contain spaces, newlines or special characters.\r\n"}},
		{name: "CLIENT SETINFO lib-ver with a newline", args: cmd("CLIENT", "SETINFO", "lib-ver", "1\n2"), known: &knownDiff{
			allow: "7.2-setinfo", redis: unknownSetinfo70,
			cell: "-ERR lib-ver cannot contain spaces, newlines or special characters.\r\n"}},
	},

	// Keyspace, on keys absent on both and empty databases.
	exact(cmd("GET", "missing"), cmd("gEt", "missing"), cmd("GET"), cmd("GET", "a", "b"),
		cmd("DEL", "missing"), cmd("DEL", "a", "b", "c"), cmd("DEL"), cmd("UNLINK", "missing"), cmd("UNLINK", "a", "b"),
		cmd("UNLINK"), cmd("EXISTS", "a", "b", "a"), cmd("EXISTS"), cmd("TTL", "missing"), cmd("TTL"), cmd("TTL", "a", "b"),
		cmd("PTTL", "missing"), cmd("PTTL"), cmd("TYPE", "missing"), cmd("TYPE"), cmd("TYPE", "a", "b"),
		cmd("KEYS", "*"), cmd("KEYS", ""), cmd("KEYS", "a*["), cmd("KEYS"), cmd("KEYS", "a", "b"),
		cmd("SCAN", "0"), cmd("SCAN", "0", "MATCH", "*", "COUNT", "5", "TYPE", "string"), cmd("SCAN", "0", "TYPE", "hash"),
		cmd("SCAN", "0", "count", "1000"), cmd("SCAN", "x"), cmd("SCAN", ""), cmd("SCAN", "-1"), cmd("SCAN", "+0"),
		cmd("SCAN", "-0"), cmd("SCAN", "-"), cmd("SCAN", "00"), cmd("SCAN", " 0"), cmd("SCAN", "0 "),
		cmd("SCAN", "18446744073709551615"), cmd("SCAN", "18446744073709551616"), cmd("SCAN", "-18446744073709551616"),
		cmd("SCAN", "0x10"), cmd("SCAN", "0", "COUNT", "0"), cmd("SCAN", "0", "COUNT", "-1"), cmd("SCAN", "0", "COUNT", "x"),
		cmd("SCAN", "0", "COUNT"), cmd("SCAN", "0", "MATCH"), cmd("SCAN", "0", "FOO", "bar"), cmd("SCAN"),
		cmd("DBSIZE"), cmd("DBSIZE", "x"),
		cmd("FLUSHDB"), cmd("FLUSHDB", "ASYNC"), cmd("FLUSHDB", "sync"), cmd("FLUSHDB", "x"), cmd("FLUSHDB", "ASYNC", "x"),
		cmd("FLUSHALL"), cmd("FLUSHALL", "async"), cmd("FLUSHALL", "SYNC"), cmd("FLUSHALL", "x"),
		cmd("FLUSHALL", "sync", "sync"),
	),

	// Unknown commands: the name and the first arguments, quoted, ~128 bytes.
	exact(cmd("foo"), cmd("foo", "a", "b"), cmd("", "a"), cmd(long200), cmd("foo", long200),
		cmd("foo", long200[:60], long200[:60], long200[:60]), cmd("foo", "a\r\nb"), cmd("a\x00b", "x\x00y"),
		cmd("\xff\xfe", "\x01\x02"), cmd("CL.THROTTLEX", "k"),
	),

	// Introspection.
	exact(cmd("COMMAND", "COUNT", "x"), cmd("COMMAND", "INFO", "nosuch"),
		cmd("COMMAND", "DOCS", "nosuch"), cmd("COMMAND", "LIST", "x"), cmd("COMMAND", "FOO"), cmd("COMMAND", "HELP", "x"),
		cmd("COMMAND", "GETKEYS"), cmd("COMMAND", "GETKEYS", "get"), cmd("COMMAND", "GETKEYS", "get", "k"),
		cmd("COMMAND", "GETKEYS", "GET", "k"), cmd("COMMAND", "GETKEYS", "del", "a", "b", "c"),
		cmd("COMMAND", "GETKEYS", "exists", "a", "b"), cmd("COMMAND", "GETKEYS", "get", "a", "b"),
		cmd("COMMAND", "GETKEYS", "ping"), cmd("COMMAND", "GETKEYS", "ping", "x"), cmd("COMMAND", "GETKEYS", "time", "x"),
		cmd("COMMAND", "GETKEYS", "nosuch", "a"), cmd("COMMAND", "GETKEYS", "client", "setname", "x"),
		cmd("COMMAND", "GETKEYS", "client", "foo", "x"), cmd("COMMAND", "GETKEYS", "CLIENT"),
		cmd("CONFIG"), cmd("CONFIG", "FOO"), cmd("CONFIG", "GET"), cmd("CONFIG", "GET", "databases"),
		cmd("CONFIG", "GET", "DATABASES"), cmd("CONFIG", "GET", "maxmemory"), cmd("CONFIG", "GET", "maxmemory-policy"),
		cmd("CONFIG", "GET", "appendonly"), cmd("CONFIG", "GET", "save"), cmd("CONFIG", "GET", "timeout"),
		cmd("CONFIG", "GET", "timeout", "TIMEOUT"), cmd("CONFIG", "GET", "proto-max-bulk-len"),
		cmd("CONFIG", "GET", "requirepass"), cmd("CONFIG", "GET", "cluster-enabled"),
		cmd("CONFIG", "GET", "enable-debug-command"), cmd("CONFIG", "GET", "bind"), cmd("CONFIG", "GET", "nosuch"),
		cmd("CONFIG", "SET"), cmd("CONFIG", "SET", "maxmemory"), cmd("CONFIG", "SET", "maxmemory", "1", "x"),
		cmd("CONFIG", "SET", "a", "b", "c"), cmd("CONFIG", "SET", "nosuch", "1"), cmd("CONFIG", "SET", "databases", "2"),
		cmd("CONFIG", "RESETSTAT"), cmd("CONFIG", "RESETSTAT", "x"), cmd("CONFIG", "HELP", "x"), cmd("TIME", "x"),
		cmd("INFO", "nosuch"), cmd("INFO", "cluster"), cmd("INFO", "keyspace"),
		cmd("DEBUG"), cmd("DEBUG", "FOO"), cmd("DEBUG", "HELP"), cmd("DEBUG", "CLOCK", "REAL"),
		cmd("CLUSTER"), cmd("CLUSTER", "INFO"), cmd("CLUSTER", "SLOTS"), cmd("CLUSTER", "NODES"), cmd("CLUSTER", "MYID"),
		cmd("CLUSTER", "SHARDS"), cmd("CLUSTER", "KEYSLOT", "foo"), cmd("CLUSTER", "KEYSLOT"),
		cmd("CLUSTER", "COUNTKEYSINSLOT", "1"), cmd("CLUSTER", "GETKEYSINSLOT", "1", "1"), cmd("CLUSTER", "FOO"),
		cmd("CLUSTER", "HELP"), cmd("CLUSTER", "HELP", "x"), cmd("READONLY"), cmd("READWRITE"), cmd("ASKING"),
		cmd("READONLY", "x"),
	),
	[]diffCase{
		{name: "COMMAND COUNT", args: cmd("COMMAND", "COUNT"), shape: countReply},
		{name: "COMMAND", args: cmd("COMMAND"), shape: commandInfoShape},
		{name: "COMMAND INFO (all)", args: cmd("COMMAND", "INFO"), shape: commandInfoShape},
		{name: "COMMAND INFO of cellserver's commands", args: cmd("COMMAND", "INFO", "get", "del", "unlink", "exists", "ttl",
			"pttl", "type", "keys", "scan", "dbsize", "flushdb", "flushall", "ping", "echo", "quit", "select", "auth", "hello",
			"client", "command", "info", "config", "time", "debug", "cluster", "readonly", "readwrite", "asking"),
			shape: commandInfoShape},
		{name: "COMMAND INFO of a known and an unknown command", args: cmd("COMMAND", "INFO", "get", "nosuch"),
			shape: commandInfoShape},
		{name: "COMMAND INFO of subcommands", args: cmd("COMMAND", "INFO", "client|setname", "client|list", "config|get",
			"config|set", "command|getkeys", "command|info", "cluster|keyslot", "CLIENT|ID"), shape: commandInfoShape},
		{name: "COMMAND DOCS of cellserver's commands", args: cmd("COMMAND", "DOCS", "get", "del", "ping", "echo", "client",
			"config", "scan", "flushall", "time", "hello", "auth", "select", "command", "cluster", "info", "ttl", "pttl",
			"type", "keys", "dbsize", "unlink", "exists", "quit", "readonly", "readwrite", "asking", "flushdb"),
			shape: commandDocsShape},
		{name: "COMMAND LIST", args: cmd("COMMAND", "LIST"), shape: commandListShape},
		{name: "COMMAND LIST FILTERBY PATTERN", args: cmd("COMMAND", "LIST", "FILTERBY", "PATTERN", "ECH*")},
		{name: "COMMAND LIST FILTERBY PATTERN subcommands", args: cmd("COMMAND", "LIST", "FILTERBY", "PATTERN", "slowlog|l*")},
		{name: "COMMAND LIST FILTERBY ACLCAT", args: cmd("COMMAND", "LIST", "FILTERBY", "ACLCAT", "connection"), shape: commandListShape},
		{name: "COMMAND LIST FILTERBY ACLCAT unknown", args: cmd("COMMAND", "LIST", "FILTERBY", "ACLCAT", "nosuch")},
		{name: "COMMAND LIST FILTERBY MODULE", args: cmd("COMMAND", "LIST", "FILTERBY", "MODULE", "nosuch")},
		{name: "COMMAND LIST FILTERBY no argument", args: cmd("COMMAND", "LIST", "FILTERBY", "ACLCAT")},
		{name: "COMMAND LIST FILTERBY unknown", args: cmd("COMMAND", "LIST", "FILTERBY", "FOO", "bar")},
		{name: "COMMAND HELP", args: cmd("COMMAND", "HELP"), shape: helpShape},
		{name: "CONFIG HELP", args: cmd("CONFIG", "HELP"), shape: helpShape},
		{name: "CONFIG GET port", args: cmd("CONFIG", "GET", "port"), shape: configShape([]string{"config-values"}, "port")},
		{name: "CONFIG GET maxclients", args: cmd("CONFIG", "GET", "maxclients"),
			shape: configShape([]string{"config-values"}, "maxclients")},
		{name: "CONFIG GET two", args: cmd("CONFIG", "GET", "databases", "timeout"), shape: configShape([]string{"config-subset"})},
		{name: "CONFIG GET max*", args: cmd("CONFIG", "GET", "max*"),
			shape: configShape([]string{"config-subset", "config-values"}, "maxclients")},
		{name: "CONFIG GET *", args: cmd("CONFIG", "GET", "*"),
			shape: configShape([]string{"config-subset", "config-values"}, "port", "maxclients", "client-output-buffer-limit")},
		{name: "CONFIG SET a mutable parameter", args: cmd("CONFIG", "SET", "timeout", "0"), known: &knownDiff{
			allow: "choice-config-set", redis: "+OK\r\n",
			cell: "-ERR CONFIG SET failed (possibly related to argument 'timeout') - can't set immutable config\r\n"}},
		{name: "CONFIG SET an immutable parameter cellserver does not know", args: cmd("CONFIG", "SET", "daemonize", "yes"),
			known: &knownDiff{allow: "choice-config-set",
				redis: "-ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config\r\n",
				cell:  "-ERR Unknown option or number of arguments for CONFIG SET - 'daemonize'\r\n"}},
		{name: "TIME", args: cmd("TIME"), shape: timeShape},
		{name: "INFO", args: cmd("INFO"), shape: infoShape(false)},
		{name: "INFO default", args: cmd("INFO", "default"), shape: infoShape(false)},
		{name: "INFO all", args: cmd("INFO", "all"), shape: infoShape(false)},
		{name: "INFO everything", args: cmd("INFO", "everything"), shape: infoShape(false)},
		{name: "INFO server", args: cmd("INFO", "server"), shape: infoShape(false)},
		{name: "INFO SERVER clients", args: cmd("INFO", "SERVER", "clients"), shape: infoShape(false)},
		{name: "INFO memory", args: cmd("INFO", "memory"), shape: infoShape(false)},
		{name: "INFO persistence", args: cmd("INFO", "persistence"), shape: infoShape(false)},
		{name: "INFO replication", args: cmd("INFO", "replication"), shape: infoShape(false)},
		{name: "INFO cpu", args: cmd("INFO", "cpu"), shape: infoShape(false)},
		{name: "INFO stats after misses and errors",
			setup: [][]string{{"CONFIG", "RESETSTAT"}, {"GET", "a"}, {"TTL", "a"}, {"PTTL", "a"}, {"TYPE", "a"},
				{"EXISTS", "a", "b"}, {"DEL", "a"}, {"SCAN", "0"}, {"GET"}, {"foo"}, {"SELECT", "x"}},
			args: cmd("INFO", "stats"), shape: infoShape(true)},
		{name: "INFO errorstats",
			setup: [][]string{{"CONFIG", "RESETSTAT"}, {"GET"}, {"foo"}, {"SELECT", "x"}, {"CLUSTER", "INFO"},
				{"CLIENT", "FOO"}, {"AUTH", "bob", "x"}},
			args: cmd("INFO", "errorstats")},
		{name: "INFO commandstats",
			setup: [][]string{{"CONFIG", "RESETSTAT"}, {"GET"}, {"GET", "a"}, {"GET", "b"}, {"SELECT", "x"}, {"SELECT", "0"},
				{"CLUSTER", "INFO"}, {"CLIENT"}, {"CLIENT", "SETNAME", "a b"}, {"ECHO", "a"}, {"TTL", "a"}, {"INFO", "cpu"},
				{"KEYS", "*"}, {"SCAN", "x"}},
			args: cmd("INFO", "commandstats"), shape: commandstatsShape},
	},
)

// diffAuthCases run against servers started with a password ("secret").
var diffAuthCases = concat(
	exact(cmd("PING"), cmd("GET", "k"), cmd("foo", "a"), cmd("GET"), cmd("CLIENT", "SETNAME", "x"), cmd("CLIENT"),
		cmd("CLIENT", "FOO"), cmd("SELECT", "0"), cmd("COMMAND"),
		cmd("COMMAND", "COUNT"), cmd("CONFIG", "GET", "x"), cmd("INFO"), cmd("CLUSTER", "INFO"), cmd("READONLY"),
		cmd("ASKING"), cmd("KEYS", "*"), cmd("SCAN", "0"), cmd("DBSIZE"), cmd("FLUSHALL"), cmd("TIME"), cmd("ECHO", "a"),
		cmd("DEBUG", "CLOCK", "REAL"), cmd("QUIT"),
		cmd("AUTH"), cmd("AUTH", "wrong"), cmd("AUTH", "default", "wrong"), cmd("AUTH", "bob", "secret"),
		cmd("AUTH", "a", "b", "c"), cmd("AUTH", "secret"), cmd("AUTH", "default", "secret"), cmd("AUTH", "DEFAULT", "secret"),
		cmd("HELLO", "x"), cmd("HELLO", "2", "AUTH", "default", "wrong"), cmd("HELLO", "2", "FOO"),
		cmd("HELLO", "2", "AUTH", "default"),
	),
	[]diffCase{
		{name: "HELLO before AUTH", args: cmd("HELLO"), known: &knownDiff{allow: "7.2-hello-noauth", redis: noAuth70, cell: noAuth72}},
		{name: "HELLO 2 before AUTH", args: cmd("HELLO", "2"), known: &knownDiff{allow: "7.2-hello-noauth", redis: noAuth70,
			cell: noAuth72}},
		{name: "HELLO 2 SETNAME before AUTH", args: cmd("HELLO", "2", "SETNAME", "x"), known: &knownDiff{
			allow: "7.2-hello-noauth", redis: noAuth70, cell: noAuth72}},
		{name: "HELLO 3 before AUTH", args: cmd("HELLO", "3"), known: &knownDiff{allow: "7.2-hello-noauth", redis: noAuth70,
			cell: noAuth72}},
		{name: "CLIENT SETINFO before AUTH", args: cmd("CLIENT", "SETINFO", "lib-name", "x"), known: &knownDiff{
			allow: "7.2-setinfo", redis: unknownSetinfo70, cell: "-NOAUTH Authentication required.\r\n"}},
		{name: "HELLO 2 AUTH", args: cmd("HELLO", "2", "AUTH", "default", "secret"), shape: helloShape},
		{name: "HELLO 2 AUTH SETNAME", setup: [][]string{{"HELLO", "2", "AUTH", "default", "secret", "SETNAME", "h"}},
			args: cmd("CLIENT", "GETNAME")},
		{name: "AUTH then PING", setup: [][]string{{"AUTH", "secret"}}, args: cmd("PING")},
		{name: "failed AUTH keeps the login", setup: [][]string{{"AUTH", "secret"}, {"AUTH", "wrong"}}, args: cmd("PING")},
		{name: "failed HELLO AUTH keeps the login", setup: [][]string{{"AUTH", "secret"}, {"HELLO", "2", "AUTH", "default", "no"}},
			args: cmd("PING")},
		{name: "CONFIG GET requirepass", setup: [][]string{{"AUTH", "secret"}}, args: cmd("CONFIG", "GET", "requirepass")},
		{name: "unauthenticated multibulk length", raw: "*11\r\n"},
		{name: "unauthenticated bulk length", raw: "*2\r\n$4\r\nECHO\r\n$16385\r\n"},
		{name: "unauthenticated limits: 10 arguments pass", raw: string(encodeCommand("EXISTS", "1", "2", "3", "4", "5", "6",
			"7", "8", "9"))},
		{name: "unauthenticated limits: 16384 bytes pass", raw: string(encodeCommand("ECHO", strings.Repeat("e", 16384)))},
		{name: "AUTH in the pipeline lifts the limits", raw: "AUTH secret\r\n" + string(encodeCommand("EXISTS", "1", "2", "3",
			"4", "5", "6", "7", "8", "9", "10", "11")), n: 2},
		{name: "inline request with many arguments before AUTH", raw: "PING a b c d e f g h i j k\r\n"},
	},
)

// diffACLCases run against servers where the default user may not run
// DEBUG: Redis with an ACL rule, cellserver with an admin password (only
// the admin user may run DEBUG); both allow DEBUG itself.
var diffACLCases = []diffCase{
	{name: "DEBUG arity is checked first", args: cmd("DEBUG")},
	{name: "DEBUG CLOCK REAL", args: cmd("DEBUG", "CLOCK", "REAL"), known: &knownDiff{allow: "7.2-noperm",
		redis: "-NOPERM this user has no permissions to run the 'debug' command\r\n",
		cell:  "-NOPERM User default has no permissions to run the 'debug' command\r\n"}},
	{name: "DEBUG HELP", args: cmd("DEBUG", "HELP"), known: &knownDiff{allow: "7.2-noperm",
		redis: "-NOPERM this user has no permissions to run the 'debug' command\r\n",
		cell:  "-NOPERM User default has no permissions to run the 'debug' command\r\n"}},
	{name: "other commands run", args: cmd("PING")},
	// CONFIG RESETSTAT is an admin command: the admin user resets the
	// counts, RESET goes back to the default user.
	{name: "the default user cannot reset the counts", args: cmd("CONFIG", "RESETSTAT"), known: &knownDiff{allow: "7.2-noperm",
		redis: "-NOPERM this user has no permissions to run the 'config|resetstat' command\r\n",
		cell:  "-NOPERM User default has no permissions to run the 'config|resetstat' command\r\n"}},
	{name: "a denied command is a rejected call", setup: [][]string{{"AUTH", "admin", "adm"}, {"CONFIG", "RESETSTAT"}, {"RESET"}, {"DEBUG", "HELP"}, {"DEBUG"}},
		args: cmd("INFO", "commandstats"), shape: commandstatsShape},
	{name: "a denied command is an error reply", setup: [][]string{{"AUTH", "admin", "adm"}, {"CONFIG", "RESETSTAT"}, {"RESET"}, {"DEBUG", "HELP"}},
		args: cmd("INFO", "errorstats")},
}

// diffProtocolCases are raw requests, each on a fresh connection, against
// servers without a password; most end the connection.
var diffProtocolCases = []diffCase{
	{name: "invalid multibulk length", raw: "*x\r\n"},
	{name: "multibulk leading zero", raw: "*01\r\n"},
	{name: "multibulk plus sign", raw: "*+1\r\n"},
	{name: "multibulk over INT_MAX", raw: "*3000000000\r\n"},
	{name: "expected $", raw: "*1\r\nx\r\n"},
	{name: "expected $ got 0xff", raw: "*1\r\n\xff\r\n"},
	{name: "expected $ on the second argument", raw: "*2\r\n$4\r\nECHO\r\n:5\r\n"},
	{name: "invalid bulk length", raw: "*1\r\n$x\r\n"},
	{name: "negative bulk length", raw: "*1\r\n$-1\r\n"},
	{name: "bulk length leading zero", raw: "*1\r\n$04\r\nPING\r\n"},
	{name: "bulk length plus sign", raw: "*1\r\n$+1\r\n"},
	{name: "bulk over proto-max-bulk-len", raw: "*1\r\n$536870913\r\n"},
	{name: "unbalanced double quote", raw: "ECHO \"a\n"},
	{name: "unbalanced single quote", raw: "ECHO 'a\r\n"},
	{name: "closing quote not followed by a space", raw: "ECHO \"a\"b\r\n"},
	{name: "too big inline request", raw: strings.Repeat("a", 70000)},
	{name: "too big mbulk count string", raw: "*" + strings.Repeat("1", 70000)},
	{name: "too big bulk count string", raw: "*1\r\n$" + strings.Repeat("1", 70000)},
	{name: "replies before a protocol error are sent", raw: "PING\r\n*2\r\n$4\r\nECHO\r\n$-5\r\n", n: 2},
	{name: "long inline request with its newline", raw: "ECHO " + strings.Repeat("i", 70000) + "\r\n"},
	{name: "inline quotes and escapes", raw: "ECHO \"\\x41\\n\\t\\\\\" 'it\\'s'\r\n"},
	{name: "inline LF only", raw: "PING\n"},
	{name: "inline extra spaces", raw: "   ECHO    x   \r\n"},
	{name: "empty lines and empty multibulks are skipped", raw: "\r\n\n*0\r\n*-1\r\nPING\r\n"},
	{name: "bulk outside a multibulk is an inline command", raw: "$4\r\nPING\r\n", n: 2},
	{name: "inline that looks like a reply", raw: ":1\r\n+PING\r\n-ERR\r\n", n: 3},
	{name: "bulk body longer than its length", raw: "*2\r\n$4\r\nECHO\r\n$1\r\nab\r\n"},
	{name: "pipeline of mixed commands", raw: "PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nDEL a b\r\nfoo\r\n", n: 4},
}

// diffClusterCases run against a Redis cluster node with no slots assigned
// and a cellserver --cluster yes node with no topology applied.
var diffClusterCases = concat(
	exact(cmd("CLUSTER", "KEYSLOT", "foo"), cmd("CLUSTER", "KEYSLOT", "{user}x"), cmd("CLUSTER", "KEYSLOT", ""),
		cmd("CLUSTER", "KEYSLOT"), cmd("CLUSTER", "KEYSLOT", "a", "b"), cmd("CLUSTER", "COUNTKEYSINSLOT", "0"),
		cmd("CLUSTER", "COUNTKEYSINSLOT", "16384"), cmd("CLUSTER", "COUNTKEYSINSLOT", "-1"),
		cmd("CLUSTER", "COUNTKEYSINSLOT", "x"), cmd("CLUSTER", "COUNTKEYSINSLOT"), cmd("CLUSTER", "GETKEYSINSLOT", "0", "1"),
		cmd("CLUSTER", "GETKEYSINSLOT", "-1", "1"), cmd("CLUSTER", "GETKEYSINSLOT", "0", "-1"),
		cmd("CLUSTER", "GETKEYSINSLOT", "0", "x"), cmd("CLUSTER", "GETKEYSINSLOT", "x", "1"),
		cmd("CLUSTER", "GETKEYSINSLOT", "16384", "1"), cmd("CLUSTER", "GETKEYSINSLOT", "1"),
		cmd("CLUSTER", "INFO"), cmd("CLUSTER", "SLOTS"), cmd("CLUSTER", "FOO"), cmd("CLUSTER"),
		cmd("GET", "k"), cmd("TTL", "k"), cmd("DEL", "a", "b"), cmd("EXISTS", "{a}1", "{a}2"),
		cmd("SELECT", "0"), cmd("SELECT", "1"), cmd("SELECT", "-1"), cmd("SELECT", "x"), cmd("SELECT", "2147483648"),
		cmd("READONLY"), cmd("READWRITE"), cmd("ASKING"), cmd("READONLY", "x"),
		cmd("DBSIZE"), cmd("KEYS", "*"), cmd("SCAN", "0"), cmd("FLUSHALL"), cmd("CONFIG", "GET", "cluster-enabled"),
	),
	[]diffCase{
		{name: "CLUSTER MYID", args: cmd("CLUSTER", "MYID"), shape: clusterMyID},
		{name: "CLUSTER NODES", args: cmd("CLUSTER", "NODES"), shape: clusterNodes},
		{name: "CLUSTER HELP", args: cmd("CLUSTER", "HELP"), shape: helpShape},
		{name: "HELLO in cluster mode", args: cmd("HELLO", "2"), shape: helloShape},
		{name: "INFO cluster", args: cmd("INFO", "cluster"), shape: infoShape(false)},
		{name: "CLUSTER SHARDS", args: cmd("CLUSTER", "SHARDS"), known: &knownDiff{allow: "gap-cluster-shards-unassigned",
			redis: "*1\r\n*4\r\n$5\r\nslots\r\n*0\r\n$5\r\nnodes\r\n*1\r\n...", cell: "*0\r\n"}},
	},
)

// diffClusterOwnedCases run against a Redis cluster node that was given
// every slot and a cellserver --cluster emulated node (which owns them all).
var diffClusterOwnedCases = concat(
	exact(cmd("GET", "k"), cmd("TTL", "k"), cmd("DEL", "a", "b"), cmd("EXISTS", "{a}1", "{a}2"), cmd("UNLINK", "{u}1", "u"),
		cmd("CLUSTER", "COUNTKEYSINSLOT", "12182"), cmd("CLUSTER", "GETKEYSINSLOT", "12182", "10"), cmd("SELECT", "1"),
		cmd("DBSIZE"), cmd("SCAN", "0"),
	),
	[]diffCase{
		{name: "CLUSTER INFO", args: cmd("CLUSTER", "INFO"), shape: clusterInfoKV},
		{name: "CLUSTER NODES", args: cmd("CLUSTER", "NODES"), shape: clusterNodes},
		{name: "CLUSTER SLOTS", args: cmd("CLUSTER", "SLOTS"), shape: clusterSlotsShape},
		{name: "CLUSTER SHARDS", args: cmd("CLUSTER", "SHARDS"), shape: clusterSlotsShape},
	},
)

func concat(parts ...[]diffCase) []diffCase {
	var out []diffCase
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ---- running them ----

// diffTally counts how each case was compared, for the log.
type diffTally struct{ exact, shape, known int }

func runDiffCases(t *testing.T, redisAddr, cellAddr string, cases []diffCase) {
	var tally diffTally
	start := time.Now()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runDiffCase(t, redisAddr, cellAddr, tc) })
		switch {
		case tc.known != nil:
			tally.known++
		case tc.shape != nil:
			tally.shape++
		default:
			tally.exact++
		}
	}
	t.Logf("%d cases in %v: %d byte for byte, %d by shape, %d known differences",
		len(cases), time.Since(start).Round(time.Millisecond), tally.exact, tally.shape, tally.known)
}

func runDiffCase(t *testing.T, redisAddr, cellAddr string, tc diffCase) {
	rc, cc := dialDiff(t, redisAddr), dialDiff(t, cellAddr)
	both := func(req []byte, n int) (r, c []reply) {
		t.Helper()
		for _, x := range []struct {
			conn *diffConn
			out  *[]reply
			who  string
		}{{rc, &r, "redis-server"}, {cc, &c, "cellserver"}} {
			if err := x.conn.send(req); err != nil {
				t.Fatalf("%s: sending %q: %v", x.who, clip(req), err)
			}
			for i := 0; i < n; i++ {
				rep, err := x.conn.read()
				if err != nil {
					t.Fatalf("%s: reply %d to %q: %v (got %q)", x.who, i, clip(req), err, clip(rep.raw))
				}
				*x.out = append(*x.out, rep)
			}
		}
		return r, c
	}
	for _, s := range tc.setup {
		r, c := both(encodeCommand(s...), 1)
		if r[0].val.kind != c[0].val.kind {
			t.Fatalf("setup %q: Redis %q, cellserver %q", s, r[0].raw, c[0].raw)
		}
	}
	req := []byte(tc.raw)
	if tc.args != nil {
		req = encodeCommand(tc.args...)
	}
	n := max(tc.n, 1)
	r, c := both(req, n)
	switch {
	case tc.known != nil:
		k := tc.known
		got := string(c[0].raw)
		if got != k.cell {
			t.Errorf("cellserver sent %q, want %q (%s)", got, k.cell, diffAllowList[k.allow].why)
		}
		rgot := string(r[0].raw)
		okRedis := rgot == k.redis || (strings.HasSuffix(k.redis, "...") && strings.HasPrefix(rgot, strings.TrimSuffix(k.redis, "...")))
		if diffAllowList[k.allow].kind == "7.2" && rgot == k.cell {
			okRedis = true // a Redis 7.2 reference
		}
		if !okRedis {
			t.Errorf("Redis sent %q, the table says %q: update the known difference (%s)", clip(r[0].raw), k.redis, k.allow)
		}
	case tc.shape != nil:
		if err := tc.shape.check(r, c); err != nil {
			t.Errorf("%v\nRedis:      %q\ncellserver: %q", err, clip([]byte(joinRaw(r))), clip([]byte(joinRaw(c))))
		}
	default:
		if joinRaw(r) != joinRaw(c) {
			t.Errorf("replies differ\nRedis:      %q\ncellserver: %q", clip([]byte(joinRaw(r))), clip([]byte(joinRaw(c))))
		}
	}
	// What each connection does next: still serving, or closed.
	if rp, cp := rc.probe(), cc.probe(); rp != cp {
		t.Errorf("after the request, Redis's connection: %s; cellserver's: %s", rp, cp)
	}
}

func joinRaw(rs []reply) string {
	var b strings.Builder
	for _, r := range rs {
		b.Write(r.raw)
	}
	return b.String()
}

// startDiffPair starts a redis-server and a cellserver (with its default
// persistence, in a temp dir) with the same password (none when empty).
func startDiffPair(t *testing.T, password string) (redisAddr, cellAddr string) {
	var rargs, cargs []string
	if password != "" {
		rargs = []string{"--requirepass", password}
		cargs = []string{"--requirepass", password}
	}
	r := startRedis(t, rargs...)
	s := startServer(t, cargs...)
	t.Logf("comparing cellserver %s with redis-server %s (v%s)", s.Addr, r.Addr, r.Version)
	return r.Addr, s.Addr
}

// TestDifferentialReplies compares connection, keyspace and introspection
// commands and error texts with a real redis-server.
func TestDifferentialReplies(t *testing.T) {
	t.Parallel()
	ra, ca := startDiffPair(t, "")
	runDiffCases(t, ra, ca, diffPlainCases)
}

// TestDifferentialAuth compares NOAUTH, WRONGPASS and the unauthenticated
// request limits with a redis-server started with requirepass.
func TestDifferentialAuth(t *testing.T) {
	t.Parallel()
	ra, ca := startDiffPair(t, "secret")
	runDiffCases(t, ra, ca, diffAuthCases)
}

// TestDifferentialACL compares a command the user may not run: Redis
// with "user default ... -debug", cellserver with --admin-password.
func TestDifferentialACL(t *testing.T) {
	t.Parallel()
	r := startRedis(t, "--enable-debug-command", "yes", "--user", "default", "on", "nopass", "~*", "&*", "+@all", "-debug", "-config|resetstat",
		"--user", "admin", "on", ">adm", "~*", "&*", "+@all")
	s := startServer(t, "--enable-debug-command", "yes", "--admin-password", "adm")
	runDiffCases(t, r.Addr, s.Addr, diffACLCases)
}

// TestDifferentialProtocol compares protocol errors, byte for byte, and
// whether the connection is closed afterwards.
func TestDifferentialProtocol(t *testing.T) {
	t.Parallel()
	ra, ca := startDiffPair(t, "")
	runDiffCases(t, ra, ca, diffProtocolCases)
}

// startDiffCluster starts a redis-server in cluster mode and a cellserver
// in the given cluster mode; owned: Redis is given every slot (and is
// waited for until its cluster state is ok), to match --cluster emulated.
func startDiffCluster(t *testing.T, cellMode string, owned bool) (redisAddr, cellAddr string) {
	r := startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-port", strconv.Itoa(freePort(t)), "--cluster-announce-ip", "127.0.0.1")
	s := startServer(t, "--in-memory", "--cluster", cellMode)
	c := dialDiff(t, r.Addr)
	settled := "cluster_size:0\r\n"
	if owned {
		if err := c.send(encodeCommand("CLUSTER", "ADDSLOTSRANGE", "0", "16383")); err != nil {
			t.Fatal(err)
		}
		if rep, err := c.read(); err != nil || string(rep.raw) != "+OK\r\n" {
			t.Fatalf("CLUSTER ADDSLOTSRANGE: %q %v", rep.raw, err)
		}
		settled = "cluster_state:ok\r\n"
	}
	// Redis computes its cluster state only 2 s after start
	// (CLUSTER_WRITABLE_DELAY); until then CLUSTER INFO says cluster_size:1.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_ = c.send(encodeCommand("CLUSTER", "INFO"))
		rep, err := c.read()
		if err == nil && strings.Contains(rep.val.str, settled) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis's cluster state did not settle (%q): %q %v", settled, rep.raw, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("comparing cellserver %s (--cluster %s) with redis-server %s in cluster mode (v%s)", s.Addr, cellMode, r.Addr, r.Version)
	return r.Addr, s.Addr
}

// TestDifferentialCluster compares cluster-mode replies with a redis-server
// in cluster mode, first with no slots assigned, then owning them all.
func TestDifferentialCluster(t *testing.T) {
	t.Parallel()
	t.Run("unassigned", func(t *testing.T) {
		t.Parallel()
		ra, ca := startDiffCluster(t, "yes", false)
		runDiffCases(t, ra, ca, diffClusterCases)
	})
	t.Run("all slots", func(t *testing.T) {
		t.Parallel()
		ra, ca := startDiffCluster(t, "emulated", true)
		runDiffCases(t, ra, ca, diffClusterOwnedCases)
	})
}

// TestDifferentialAllowList checks the tables themselves (no servers): every
// allow-list entry is used by some case and says why, every case names only
// listed reasons, and case names are unique.
func TestDifferentialAllowList(t *testing.T) {
	used := map[string]bool{}
	for _, r := range infoCellOnly {
		used[r] = true
	}
	var total diffTally
	for _, table := range [][]diffCase{diffPlainCases, diffAuthCases, diffACLCases, diffProtocolCases, diffClusterCases,
		diffClusterOwnedCases} {
		names := map[string]bool{}
		for _, tc := range table {
			if names[tc.name] {
				t.Errorf("case name %q used twice", tc.name)
			}
			names[tc.name] = true
			if (tc.args == nil) == (tc.raw == "") {
				t.Errorf("case %q: set exactly one of args and raw", tc.name)
			}
			var keys []string
			switch {
			case tc.known != nil:
				keys = []string{tc.known.allow}
				total.known++
			case tc.shape != nil:
				keys = tc.shape.allow
				total.shape++
			default:
				total.exact++
			}
			for _, k := range keys {
				if _, ok := diffAllowList[k]; !ok {
					t.Errorf("case %q names %q, which is not in diffAllowList", tc.name, k)
				}
				used[k] = true
			}
		}
	}
	var unused []string
	for k, e := range diffAllowList {
		if !used[k] {
			unused = append(unused, k)
		}
		if e.why == "" || (e.kind != "shape" && e.kind != "7.2" && e.kind != "choice") {
			t.Errorf("allow-list entry %q: kind %q, why %q", k, e.kind, e.why)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("allow-list entries no case uses (remove them): %v", unused)
	}
	t.Logf("%d cases: %d byte for byte, %d by shape, %d known differences",
		total.exact+total.shape+total.known, total.exact, total.shape, total.known)
}

// ownCommand reports whether name is one of cellserver's own commands
// (CL.THROTTLE and the CL.LIMIT family), which Redis does not have.
func ownCommand(name string) bool { return strings.HasPrefix(name, "cl.") }

// ownSubcommand reports the subcommands Redis 7.0 lacks: 7.2's, and
// cellserver's own cluster ones.
func ownSubcommand(name string) bool {
	switch name {
	case "client|setinfo", "client|no-touch", // Redis 7.2's
		"cluster|settopology", "cluster|importstate", "cluster|setslotrange", "cluster|getstate",
		"cluster|movekeys", "cluster|migratestate": // cellserver's own
		return true
	}
	return false
}
